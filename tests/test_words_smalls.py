"""Small things the reports and the command line said wrong (issue 38, item 6):
a dead process's memory read as 0 B, a bench directory taken for PyTorch's
trace, a refused compile counted as a compile, a cut-off recording said to
be running, a trace's span taken for a run, brackets in brackets, a
misaligned help line, and paths said otherwise than the user gave them."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Any

import pytest
from golden import FIXTURES
from helpers import ctmon

from ctmon.read.load import load
from ctmon.report.build import build_report
from ctmon.report.markdown import markdown
from ctmon.report.perfetto import export
from ctmon.report.text import full_text, summary_lines
from ctmon.store import Session
from ctmon.wire import events as E

RECORDINGS = os.path.join(FIXTURES, "recordings")
SHAPE_STORM = os.path.join(RECORDINGS, "v1", "shape_storm.jsonl")  # 5 attempts: 4 compiled, 1 refused at limit 4
HEALTHY = os.path.join(RECORDINGS, "healthy.jsonl")
NO_GPU = os.path.join(RECORDINGS, "no_gpu.jsonl")
CRASHED = os.path.join(RECORDINGS, "crashed.jsonl")

MiB = 1 << 20


def _one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctmon: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# ---------------------------------------------------------------- dead process RSS


def _zombie() -> subprocess.Popen[bytes]:
    """A child that has exited and is not reaped yet (its memory reads 0 B)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat") as f:
            if f.read().rsplit(") ", 1)[1][0] == "Z":
                return child
        time.sleep(0.02)
    child.kill()
    raise AssertionError("the child did not exit")


def test_the_sampler_reports_no_memory_for_a_dead_process() -> None:
    from ctmon.samplers.process import ProcessSampler

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        sampler = ProcessSampler(child.pid)
        live = sampler.sample()
        assert live["rss"] > 0 and live["procs"] == 1
    finally:
        assert child.stdin is not None
        child.stdin.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat") as f:
            if f.read().rsplit(") ", 1)[1][0] == "Z":
                break
        time.sleep(0.02)
    dead = sampler.sample()
    child.wait()
    gone = sampler.sample()
    for sample in (dead, gone):
        assert sample["procs"] == 0
        assert "rss" not in sample and "tree_rss" not in sample and "cpu_percent" not in sample, sample
        assert sample.get("sys_mem_total")  # the host's figures still come


def _samples(*rss: int) -> list[E.Sample]:
    return [
        E.Sample(t=1000.0 + i, cpu_percent=50.0, rss=r, tree_rss=r, threads=4 if r else 0) for i, r in enumerate(rss)
    ]


def test_a_dead_process_keeps_its_last_live_memory_in_the_store_and_the_export() -> None:
    # as an older recording holds it: the zombie's sample reads 0 B
    events: list[Any] = [*_samples(300 * MiB, 310 * MiB, 0, 0)]
    s = Session().apply_all(events)
    last = s.latest_sample()
    assert last is not None and last.rss == 310 * MiB and last.tree_rss == 310 * MiB and last.threads == 4
    assert build_report(s)["system"]["rss_peak_bytes"] == 310 * MiB
    rss = [e["args"]["rss"] for e in export(events)["traceEvents"] if e.get("name") == "RSS GB"]
    assert rss and rss[-1] == round(310 * MiB / 1e9, 4) and 0 not in rss
    # as a recording made now holds it: no process figures at all
    now = [*_samples(300 * MiB), E.Sample(t=1002.0, procs=0, sys_mem_total=8 << 30)]
    last = Session().apply_all(now).latest_sample()
    assert last is not None and last.rss == 300 * MiB


# ---------------------------------------------------------------- a bench directory


@pytest.fixture
def bench_dir(tmp_path) -> str:  # type: ignore[no-untyped-def]
    d = tmp_path / "bench-20260101-120000"
    d.mkdir()
    for mode in ("eager", "default"):
        shutil.copy(HEALTHY, d / f"{mode}.jsonl")
        (d / f"{mode}.output.log").write_text("step 1\n")
    return str(d)


@pytest.mark.parametrize("command", ["report", "replay", "export"])
def test_a_bench_directory_is_said_to_be_one(bench_dir: str, command: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    argv = {"export": ["export", "--perfetto", bench_dir, "-o", str(tmp_path / "x.json")]}.get(
        command, [command, bench_dir]
    )
    line = _one_line_error(ctmon(*argv, timeout=120))
    assert "no PyTorch trace records" not in line
    assert "'ctmon bench' directory" in line and os.path.join(bench_dir, "default.jsonl") in line, line


def test_a_directory_of_recordings_is_said_to_be_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    shutil.copy(HEALTHY, tmp_path / "mine.jsonl")
    line = _one_line_error(ctmon("report", str(tmp_path), timeout=120))
    assert "a directory of ctmon recordings" in line and str(tmp_path / "mine.jsonl") in line, line


# ---------------------------------------------------------------- refused compiles


def test_a_compile_the_limit_refused_is_said_apart() -> None:
    s, _ = load(SHAPE_STORM)
    assert (s.compile.compile_count, s.compile.recompile_count, s.compile.limit_hits) == (5, 4, 1)
    r = build_report(s)
    assert (r["compile"]["compiles"], r["compile"]["recompiles"]) == (
        5,
        4,
    )  # the report's keys count attempts, as before
    said = "4 compiles, 3 recompiles + 1 refused at the recompile limit"
    assert any(said in line for line in summary_lines(r)), summary_lines(r)
    text = full_text(r)
    assert f"{said} (4), 0 graph breaks" in text and "5 compiles" not in text
    assert re.search(r"encode: 4 compiles, 3 recompiles \+ 1 refused at the recompile limit, [\d.]+ s  LIMIT HIT", text)
    assert "| Compiles | 4 (3 recompiles) + 1 refused at the recompile limit," in markdown(r)
    # without a refusal, as ever
    healthy = build_report(load(HEALTHY)[0])
    assert any("1 compile, 0 recompiles, 0 graph breaks, 0 recompile-limit hits" in x for x in summary_lines(healthy))
    assert (s.compile.compiled_count, s.compile.recompiled_count) == (4, 3)  # the TUI's figures, the same


# ---------------------------------------------------------------- a cut-off recording


def _cut(tmp_path, name: str = "cut.jsonl") -> str:  # type: ignore[no-untyped-def]
    """healthy.jsonl without its end: as ctmon killed mid-run leaves it."""
    with open(HEALTHY, encoding="utf-8") as f:
        lines = f.readlines()
    path = str(tmp_path / name)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines[: len(lines) * 2 // 3])
    return path


def test_a_cut_off_recording_is_not_said_to_be_running(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = _cut(tmp_path)
    proc = ctmon("report", path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.splitlines()[1]
    assert "running" not in proc.stdout.split("Findings")[0]
    assert head.startswith("  Has no exit in its recording: ctmon was stopped or killed, or the file was cut short; ")
    assert head.endswith(" recorded")
    r = json.loads(ctmon("report", path, "--json", timeout=120).stdout)
    assert r["state"] == "cut_off" and r["exit_code"] is None
    assert "has no exit in its recording" in markdown(r).splitlines()[0]


def test_a_recording_ctmon_still_writes_is_running(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = _cut(tmp_path)
    with open(path, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # as a live supervisor holds its recording
        s, _ = load(path)
        r = build_report(s)
    assert r["state"] == "running"
    assert "is still running after" in summary_lines(r)[0]


# ---------------------------------------------------------------- a PyTorch trace has no run


def test_a_trace_has_no_run_to_compare_the_compile_time_with() -> None:
    s = Session()
    s.apply({"kind": "session", "t": 100.0, "v": 1, "mode": "torch_trace", "command": ["TORCH_TRACE", "trace"]})
    s.apply(
        {
            "kind": "compile",
            "t": 100.1,
            "compile_id": "0/0",
            "frame_id": 0,
            "co_name": "f",
            "entire_frame_compile_time_s": 0.095,
        }
    )
    s.apply({"kind": "exit", "t": 100.1, "code": None, "signal": None})
    r = build_report(s)
    (cost,) = [f for f in r["findings"] if f["rule"] == "compile-cost"]
    assert cost["title"] == "Compilation took 0.1 s", cost["title"]
    head = full_text(r).splitlines()[1]
    assert head == "  Ended (a PyTorch trace holds no exit status); its records span 0.10 s", head


# ---------------------------------------------------------------- words


def test_no_brackets_in_brackets_in_the_markdown() -> None:
    md = markdown(build_report(load(NO_GPU)[0]))
    assert "no GPU figures: no NVIDIA driver (NVML not found)" in md
    assert "((" not in md and "))" not in md


def test_ctmon_help_lines_up_its_commands() -> None:
    from ctmon.cli import USAGE

    rows = [ln for ln in USAGE.split("commands:\n")[1].split("\n\n")[0].splitlines() if ln.strip()]
    # where each command's description begins: after its last run of spaces
    columns = {[m.end() for m in re.finditer(r"\S  +(?=\S)", ln)][-1] for ln in rows}
    assert len(rows) == 9 and len(columns) == 1, rows


def test_every_help_screen_fits_its_lines() -> None:
    from ctmon.cli import attach, bench, record
    from ctmon.cli.args import format_help

    for mod in (attach, bench, record):
        text = format_help(mod.USAGE, mod.DESCRIPTION, mod.OPTIONS)
        assert max(len(line) for line in text.splitlines()[1:]) <= 100, text


# ---------------------------------------------------------------- paths as given


def test_attach_says_paths_as_the_user_gave_them(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ctmon.cli.attach import report_after
    from ctmon.tui.app import AppResult

    monkeypatch.chdir(tmp_path)
    rec = str(tmp_path / "runs" / "r.jsonl")
    os.makedirs(os.path.dirname(rec))
    shutil.copy(CRASHED, rec)
    log = str(tmp_path / "runs" / "r.output.log")
    with open(log, "w") as f:
        f.write("step 1\n")
    s, _ = load(rec)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = report_after(AppResult("quit", s.exit, s), rec, None, log, "runs/r.jsonl")
    assert rc == 1
    out = err.getvalue().splitlines()
    assert "ctmon: the job's whole output: runs/r.output.log" in out, out
    assert "ctmon: recording: runs/r.jsonl  (ctmon report runs/r.jsonl)" in out, out
    assert out.index("ctmon: the job's whole output: runs/r.output.log") > 0  # after the job's own words
    assert not any(str(tmp_path) in line for line in out), out


def test_a_trace_is_named_as_the_user_named_it(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ctmon.read.torch_trace import trace_events
    from ctmon.read.trace_lines import TraceStats

    monkeypatch.chdir(tmp_path)
    os.mkdir("trace")
    with open(os.path.join("trace", "dedicated_log_torch_trace_x.log"), "w") as f:
        f.write('V0101 12:00:00.000000 1 torch/_logging/structured.py:1] {"str": ["a.py", 0]}\n')
    session = next(iter(trace_events(["trace"], TraceStats())))
    assert session["command"] == ["TORCH_TRACE", "trace"], session


def test_the_watch_list_fits_an_80_column_terminal(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`ctmon watch` over ssh: one line a session, the command cut to the
    terminal's width; piped, the whole command."""
    from ctmon.cli import watch

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    long_cmd = ["python", "-m", "torch.distributed.run", "--nproc_per_node", "8", "train.py"] + ["--flag"] * 20
    sessions = [
        {
            "job_pid": 4242,
            "start": time.time() - 75,
            "state": "running",
            "steps": 1200,
            "compiles": 9,
            "command": long_cmd,
        }
    ]
    out = Tty()
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("shutil.get_terminal_size", lambda *a: os.terminal_size((80, 24)))
    watch._print_list(sessions, as_json=False)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(len(line) <= 80 for line in lines), lines
    assert lines[1].endswith("…") and "4242" in lines[1] and re.search(r" 1m\d\ds ", lines[1])
    piped = io.StringIO()
    monkeypatch.setattr("sys.stdout", piped)
    watch._print_list(sessions, as_json=False)
    assert piped.getvalue().splitlines()[1].endswith(" ".join(long_cmd))


def test_the_sampler_counts_every_process_of_a_job_joined_by_several_pids() -> None:
    """``--pid A,B``: the CPU, tree memory and the GPU's process list are the
    whole job's, each process's tree, not the first one's alone."""
    from ctmon.samplers.process import ProcessSampler

    code = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import sys; sys.stdin.read()']); sys.stdin.read()"
    first = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    second = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        sampler = ProcessSampler(first.pid, also=[second.pid])
        deadline = time.monotonic() + 60
        sample: dict[str, object] = {}
        while time.monotonic() < deadline:  # the second's child may not have started yet
            sample = sampler.sample()
            if sample.get("procs") == 3:
                break
            time.sleep(0.02)
        assert sample.get("procs") == 3, sample  # the first, the second, and the second's child
        assert second.pid in sampler.tree_pids() and first.pid in sampler.tree_pids()
        assert ProcessSampler(first.pid).sample()["procs"] == 1  # without ``also``: the first's tree alone
    finally:
        for p in (first, second):
            assert p.stdin is not None
            p.stdin.close()
        for p in (first, second):
            p.wait(timeout=60)
