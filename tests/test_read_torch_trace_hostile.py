"""PyTorch's trace read as it comes, whatever it holds.

A real TORCH_TRACE of two ranks under torchrun (gloo) reports in every
format and exports; records a trace could hold only corrupt or hand-made
(nested 100,000 deep, a pid or rank of 5,000 digits, ids that are no
counter's, NUL bytes, bytes that are not UTF-8, a lone surrogate, a
payload of the wrong kind, a last line cut off) are each skipped and
counted in one note, never a traceback; a line of 300 MB is read past with
memory bounded by a fixed cap (and a recording followed as it grows is read
a chunk at a time); a trace of more files than the process may open is read
whole; a report stdout cannot take is one line.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from helpers import ROOT, ctmon, env_with, workload
from test_whole_ranks import free_port

from ctmon.read import trace_lines
from ctmon.read.follow import Follower
from ctmon.read.torch_trace import load_trace, trace_events
from ctmon.read.trace_lines import MAX_LINE, MAX_PAYLOAD, TraceStats
from ctmon.report.build import build_report
from ctmon.report.markdown import markdown
from ctmon.report.text import full_text

LOG = "dedicated_log_torch_trace_x.log"


def _trace(tmp: Any, argv: list[str]) -> str:
    trace = str(tmp / "trace")
    out = subprocess.run(
        [sys.executable, *argv], env=env_with(TORCH_TRACE=trace), capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return trace


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: Any) -> str:
    """The TORCH_TRACE directory of a two-rank torchrun job: one file per rank."""
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    script = [workload("ddp_ranks.py"), "--workers", "0", "--steps", "3"]
    trace = _trace(tmp_path_factory.mktemp("ranks"), [*launcher, "--master_port", str(free_port()), *script])
    assert sorted(n.split("_rank_")[1][0] for n in os.listdir(trace)) == ["0", "1"], os.listdir(trace)
    return trace


@pytest.fixture(scope="module")
def one(graph_breaks_trace: str) -> bytes:
    """One process's log: compiles, recompiles, graph breaks, backward graphs, phases."""
    trace = graph_breaks_trace
    (log,) = os.listdir(trace)
    with open(os.path.join(trace, log), "rb") as f:
        return f.read()


def _no_traceback(out: subprocess.CompletedProcess[str]) -> None:
    assert out.returncode == 0 and "Traceback" not in out.stderr, (out.returncode, out.stderr[-3000:])


@pytest.mark.slow
def test_a_torchrun_trace_reports_in_every_format_and_exports(two_ranks, tmp_path):
    text = ctmon("report", two_ranks)
    _no_traceback(text)
    ranks = [ln.strip() for ln in text.stdout.splitlines() if ln.strip().startswith("rank ")]
    assert len(ranks) == 2 and all("(pid " in ln and ": steps not traced; " in ln for ln in ranks), ranks
    md = ctmon("report", two_ranks, "--md")
    _no_traceback(md)
    assert "| Ranks | 2;" in md.stdout and "- rank 1 (pid " in md.stdout, md.stdout
    js = ctmon("report", two_ranks, "--json")
    _no_traceback(js)
    rep = json.loads(js.stdout)
    assert [r["rank"] for r in rep["ranks"]] == [0, 1] and all(r["steps"]["count"] is None for r in rep["ranks"])
    (rank1,) = [os.path.join(two_ranks, n) for n in os.listdir(two_ranks) if "_rank_1_" in n]
    alone = ctmon("report", rank1)
    _no_traceback(alone)
    assert "rank 1 (pid " in alone.stdout
    for fmt in ("--perfetto", "--svg"):
        out = ctmon("export", fmt, two_ranks, "-o", str(tmp_path / f"run{fmt[2:]}"))
        _no_traceback(out)
    gated = ctmon("report", two_ranks, "--fail-on", "recompiles>5")
    _no_traceback(gated)


@pytest.mark.slow
def test_a_torchrun_trace_with_a_hostile_record_replays_on_the_screen(two_ranks, tmp_path):
    import asyncio

    from test_whole_ranks import _until

    from ctmon.read.feeds import ListFeed
    from ctmon.tui.app import CtmonApp
    from ctmon.tui.testing import wait_loaded

    trace = tmp_path / "t"
    shutil.copytree(two_ranks, trace)
    (rank1,) = [p for p in trace.iterdir() if "_rank_1_" in p.name]
    with open(rank1, "ab") as f:
        f.write(HEAD + b'{"dynamo_start": ' + b"[" * DEEP + b"]" * DEEP + b"}\n")

    async def shown() -> str:
        app = CtmonApp(ListFeed(list(trace_events([str(trace)], TraceStats()))), replay=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_loaded(pilot)
            return await _until(pilot, app, "2 ranks", "WARN 1 record of the")

    screen = asyncio.run(shown())
    assert "2 ranks" in screen and "WARN 1 record of the" in screen, screen


# --------------------------------------------------------------- hostile records

HEAD = b"V1126 10:00:00.000000 4242 torch/_dynamo/x.py:1] "


def _rec(md: str, *payload: bytes) -> bytes:
    return HEAD + md.encode() + b"\n" + b"".join(b"\t" + p + b"\n" for p in payload)


def _start(ids: str, stack: str = "[]") -> bytes:
    return _rec('{"dynamo_start": {"stack": ' + stack + "}, " + ids + "}")


def _artifact(name: str, *payload: bytes) -> bytes:
    return _rec(
        '{"artifact": {"name": "' + name + '", "encoding": "string"}, "frame_id": 0, "frame_compile_id": 0}', *payload
    )


def _phase(event: bytes) -> bytes:
    return _rec('{"chromium_event": {}, "frame_id": 0, "frame_compile_id": 0}', event)


DEEP = 100_000
# name -> (the record, why it is skipped)
HOSTILE: dict[str, tuple[bytes, str]] = {
    "json nested 100,000 deep": (HEAD + b'{"dynamo_start": ' + b"[" * DEEP + b"]" * DEEP + b"}\n", "nested too deep"),
    "a compile's field nested 1,000 deep": (
        _rec(
            '{"compilation_metrics": {"co_name": '
            + "[" * 1000
            + "]" * 1000
            + '}, "frame_id": 0, "frame_compile_id": 0}'
        ),
        "nested too deep",
    ),
    "pid of 5,000 digits": (
        b"V1126 10:00:00.000000 " + b"9" * 5000 + b' x.py:1] {"dynamo_start": {}}\n',
        "not trace records",
    ),
    "rank of 5,000 digits": (_start('"rank": ' + "7" * 5000 + ', "frame_id": 0, "frame_compile_id": 9'), "not JSON"),
    "negative rank": (_start('"rank": -1, "frame_id": 0, "frame_compile_id": 9'), "shape"),
    "negative frame id": (_start('"frame_id": -5, "frame_compile_id": 0'), "shape"),
    "float frame id": (_start('"frame_id": 1.5, "frame_compile_id": 0'), "shape"),
    "huge frame id": (_start('"frame_id": ' + "9" * 400 + ', "frame_compile_id": 0'), "shape"),
    "string frame id": (_start('"frame_id": "x", "frame_compile_id": 0'), "shape"),
    "float compile id": (_start('"frame_id": 0, "frame_compile_id": 0.25'), "shape"),
    "object compile id": (
        _rec('{"compilation_metrics": {"compile_id": {"a": 1}}, "frame_id": 0, "frame_compile_id": 0}'),
        "shape",
    ),
    "huge line number": (
        _start('"frame_id": 3, "frame_compile_id": 0', '[{"filename": "a.py", "line": 1' + "0" * 30 + "}]"),
        "shape",
    ),
    "NaN compile time": (
        _rec('{"compilation_metrics": {"entire_frame_compile_time_s": NaN}, "frame_id": 0, "frame_compile_id": 0}'),
        "shape",
    ),
    "infinite compile time": (
        _rec('{"compilation_metrics": {"entire_frame_compile_time_s": 1e400}, "frame_id": 0, "frame_compile_id": 0}'),
        "shape",
    ),
    "string index not an int": (_rec('{"str": ["x.py", "one"]}'), "shape"),
    "string index of 300 digits": (_rec('{"str": ["x.py", ' + "9" * 300 + "]}"), "shape"),
    "impossible date": (
        b"V1399 25:61:99.000000 4242 x.py:1] " + b'{"dynamo_start": {}, "frame_id": 0, "frame_compile_id": 5}\n',
        "impossible time",
    ),
    "phase at an infinite time": (
        _phase(b'{"name": "inductor_compile", "ph": "B", "ts": Infinity}'),
        "impossible time",
    ),
    "phase payload nested 100,000 deep": (
        _phase(b'{"name": "inductor_compile", "ph": "B", "args": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
        "shape",
    ),
    "kernel payload nested 50,000 deep": (
        _artifact("triton_kernel_info", b'{"k": ' * 50_000 + b"1" + b"}" * 50_000),
        "shape",
    ),
    "NUL bytes in a record": (HEAD + b'{"dynamo_start": {}\x00, "frame_id": 0}\n', "not JSON"),
    "record not UTF-8": (
        HEAD
        + b'{"dynamo_start": {"stack": [{"filename": "\xff\xfe", "line": 1}]}, "frame_id": 0, "frame_compile_id": 4}\n',
        "not UTF-8",
    ),
    "payload not UTF-8": (
        _artifact("dynamo_graph_break_reason", b"Graph break in user code at /x.py:3", b"\xff\xfe"),
        "not UTF-8",
    ),
    "lone surrogate in a record": (
        _start('"frame_id": 9, "frame_compile_id": 4', '[{"filename": "\\ud800", "line": 1}]'),
        "not UTF-8",
    ),
    "lone surrogate in an interned string": (_rec('{"str": ["\\udc00.py", 1]}'), "not UTF-8"),
    "lone surrogate in a payload": (_artifact("recompile_reasons", b'["\\ud800 guard"]'), "not UTF-8"),
    "a list, not a record": (HEAD + b"[1, 2, 3]\n", "not trace records"),
    "payload over the cap": (
        _artifact("dynamo_graph_break_reason", *[b"x" * 4095] * (MAX_PAYLOAD // 4096 + 1)),
        "longer than",
    ),
    "record line over the cap": (HEAD + b'{"dynamo_start": {"x": "' + b"y" * MAX_LINE + b'"}}\n', "longer than"),
}


def _with(one: bytes, extra: bytes, at_end: bool = False) -> bytes:
    """The real log with ``extra`` put between two of its records (or after the last)."""
    if at_end:
        return one + extra
    cut = one.index(b"\nV", len(one) // 2) + 1
    return one[:cut] + extra + one[cut:]


def _write(tmp: Any, data: bytes, name: str = LOG) -> str:
    d = tmp / "t"
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)
    return str(d)


def _every_rendering(trace: str) -> tuple[dict[str, Any], TraceStats]:
    """The report, after each rendering of it ran and gave text a terminal and JSON can hold."""
    s, stats = load_trace([trace])
    rep = build_report(s, [])
    json.dumps(rep, allow_nan=False).encode("utf-8")
    full_text(rep).encode("utf-8")
    markdown(rep).encode("utf-8")
    return rep, stats


@pytest.fixture(scope="module")
def clean(one: bytes, tmp_path_factory: Any) -> dict[str, Any]:
    rep, stats = _every_rendering(_write(tmp_path_factory.mktemp("clean"), one))
    assert not stats.skipped and rep["compile"]["compiles"] >= 2 and rep["graph_breaks"], (stats.skipped, rep)
    return rep


@pytest.mark.parametrize("case", list(HOSTILE))
@pytest.mark.slow
def test_a_hostile_record_is_skipped_and_counted(one, clean, tmp_path, case):
    record, why = HOSTILE[case]
    rep, stats = _every_rendering(_write(tmp_path, _with(one, record)))
    assert sum(stats.skipped.values()) == 1 and why in next(iter(stats.skipped)), stats.skipped
    (warning,) = stats.warnings
    assert warning.startswith("1 record of the trace skipped: not records ctmon could read (1 "), warning
    assert [n["message"] for n in rep["notes"] if n["message"] == warning], rep["notes"]  # replay and --json see it
    assert rep["compile"] == clean["compile"] and rep["graph_breaks"] == clean["graph_breaks"]


@pytest.mark.slow
def test_a_log_cut_off_mid_record_is_read_up_to_the_cut(one, tmp_path):
    rep, stats = _every_rendering(_write(tmp_path, _with(one, HEAD + b'{"dynamo_start": {"stack": [{"filen', True)))
    assert dict(stats.skipped) == {"cut off or not JSON": 1}
    assert rep["compile"]["compiles"] >= 1


@pytest.mark.slow
def test_control_bytes_in_a_graph_break_never_reach_the_terminal(one, tmp_path):
    nasty = _artifact(
        "dynamo_graph_break_reason", b"Graph break in user code at /x\x00.py:3", b"Graph Break Reason: a\x00\x1b[2Jb"
    )
    rep, stats = _every_rendering(_write(tmp_path, _with(one, nasty)))
    assert not stats.skipped  # text, read as text: kept, its control bytes made harmless
    shown = full_text(rep) + markdown(rep)
    assert "\x00" not in shown and "\x1b" not in shown and "/x" in shown


@pytest.mark.slow
def test_every_hostile_record_at_once_gets_one_line_in_every_format(one, tmp_path):
    bad = one
    for record, _ in HOSTILE.values():
        bad = _with(bad, record)
    trace = _write(tmp_path, _with(bad, HEAD + b'{"dynamo_start": {"stack": [{"filen', True))
    # the same records in a rank's file: the rank comes from the name, not the 5,000 digits
    os.link(os.path.join(trace, LOG), os.path.join(trace, "dedicated_log_torch_trace_rank_0_y.log"))
    os.unlink(os.path.join(trace, LOG))
    for fmt in ("--json", "--md", None):
        out = ctmon("report", trace, *([fmt] if fmt else []))
        _no_traceback(out)
        (line,) = [ln for ln in out.stderr.splitlines() if ln.startswith("ctmon:")]
        assert f"{len(HOSTILE) + 1} records of the trace skipped" in line, line
    out = ctmon("export", "--perfetto", trace, "-o", str(tmp_path / "run.json"))
    _no_traceback(out)


@pytest.mark.slow
def test_records_read_a_batch_at_a_time_are_the_records_read_at_once(one, tmp_path, monkeypatch):
    trace = _write(tmp_path, one + _with(one, HOSTILE["payload not UTF-8"][0]))
    whole = list(trace_events([trace], TraceStats()))
    monkeypatch.setattr(trace_lines, "READ_BATCH", 1)  # every record its own batch: the file reopened each time
    stats = TraceStats()
    assert list(trace_events([trace], stats)) == whole and sum(stats.skipped.values()) == 1


# --------------------------------------------------------------- size and count


# Runs the command given and says its peak RSS (KB) on its last line of
# stderr. The peak is measured in a small process of its own: a child's
# ru_maxrss counts what it was before exec, and a fork of this test process
# is large.
_PEAK = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)"
)


def _peak_rss_mb(argv: list[str]) -> tuple[int, str]:
    """``argv``'s peak resident memory in MB, and its stderr (less that last line)."""
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, *argv], capture_output=True, text=True, cwd=ROOT, env=env_with(), timeout=300
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    *said, peak = out.stderr.strip().splitlines()
    return int(peak) // 1024, "\n".join(said)


@pytest.mark.slow
def test_a_300_mb_line_is_read_past_in_bounded_memory(one, tmp_path):
    trace = tmp_path / "t"
    trace.mkdir()
    cut = one.index(b"\nV", len(one) // 2) + 1
    chunk = b"x" * (16 << 20)
    with open(trace / LOG, "wb") as f:
        f.write(one[:cut])
        # a graph break's payload: the kind of record ctmon keeps, one line of 300 MB
        f.write(_artifact("dynamo_graph_break_reason") + b"\t")
        for _ in range(300 // 16):
            f.write(chunk)
        f.write(b"x" * ((300 << 20) - (300 // 16) * len(chunk)) + b"\n")
        f.write(one[cut:])
    try:
        peak, stderr = _peak_rss_mb([sys.executable, "-m", "ctmon", "report", "--json", str(trace)])
    finally:
        shutil.rmtree(trace)
    assert peak < 200, f"peak RSS {peak} MB reading a 300 MB line"
    assert "1 record of the trace skipped: not records ctmon could read (1 longer than 16 MiB)" in stderr, stderr


def _nofile(n: int) -> Callable[[], None]:
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    return lower


@pytest.mark.slow
def test_a_trace_of_more_files_than_may_be_open_is_read_whole(one, clean, tmp_path):
    files = 80
    trace = tmp_path / "t"
    trace.mkdir()
    for r in range(files):
        (trace / f"dedicated_log_torch_trace_rank_{r}_x.log").write_bytes(one)
    argv = [sys.executable, "-m", "ctmon", "report", "--json", str(trace)]
    out = subprocess.run(
        argv, capture_output=True, text=True, cwd=ROOT, env=env_with(), timeout=300, preexec_fn=_nofile(48)
    )
    _no_traceback(out)
    rep = json.loads(out.stdout)
    assert len(rep["ranks"]) == files
    assert rep["compile"]["compiles"] == files * clean["compile"]["compiles"]


@pytest.mark.slow
def test_a_report_stdout_cannot_take_is_one_line(two_ranks):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    for fmt in ("--json", "--md", None):
        with open("/dev/full", "w") as full:
            out = subprocess.run(
                [sys.executable, "-m", "ctmon", "report", two_ranks, *([fmt] if fmt else [])],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env=env_with(),
                timeout=300,
            )
        assert (
            out.returncode == 1 and out.stderr == "ctmon: report: cannot write the report: No space left on device\n"
        ), (
            out.returncode,
            out.stderr,
        )


def test_a_recording_followed_as_it_grows_is_read_a_chunk_at_a_time(tmp_path):
    rec = tmp_path / "run.jsonl"
    events = [
        {"kind": "session", "t": 1.0, "v": 1, "id": "x", "command": ["train.py"]},
        {"kind": "compile_start", "t": 2.0, "compile_id": "0/0", "frame_id": 0, "name": "fwd"},
        {"kind": "compile", "t": 3.0, "compile_id": "0/0", "frame_id": 0, "entire_frame_compile_time_s": 1.0},
    ]
    with open(rec, "wb") as f:
        f.write(b"".join(json.dumps(e).encode() + b"\n" for e in events[:2]))
        f.write(b"x" * (64 << 20) + b"\n")  # a line no decoder keeps: never to be read whole
        f.write(json.dumps(events[2]).encode() + b"\n")
    tracemalloc.start()
    try:
        follow = Follower(str(rec))
        follow.read(final=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak >> 20} MB held reading a 64 MB line"
    assert follow.session.compile.compile_count == 1 and follow.offset == os.path.getsize(rec)
