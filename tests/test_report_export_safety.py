"""What ``ctmon export`` (and every command writing a file the user names)
may write over, and what it writes, whatever a recording holds.

* never its own input (by any name: the same path, a symlink, a hard link,
  a log file of the TORCH_TRACE directory it reads), never a recording a
  running ctmon is writing -- refused in one line before anything is written,
  the writer's lock untouched; ``ctmon bench -o DIR`` likewise, and
  ``ctmon record -o`` over the program it runs;
* a file whole or not at all: a write that fails half-way (here: the file
  size limit, as a full disk would) leaves the earlier file as it was and no
  temporary file behind;
* well-formed: a recording whose every text field holds control characters,
  escape sequences, XML's forbidden characters and markup exports to an SVG
  that parses as XML and a JSON that parses strictly, as do times and
  durations near the float maximum.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import signal
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import msgspec
import pytest
from helpers import ROOT, ctmon, env_with, one_line_containing

from ctmon.wire import events as E
from ctmon.wire.event_base import Event
from ctmon.words.textsafe import PLACEHOLDER, clean_markup

T0 = 1_800_000_000.0
# Every kind of text a recording may hold that a terminal, an XML or a strict
# JSON reader would choke on: C0 controls, ESC sequences (colour, window
# title), DEL, C1, XML's non-characters, a bidi override, markup and a CDATA end.
HOSTILE = "a\x00b\x01\x08\x0b\x0c\x0e\x1b[31m\x1b]0;title\x07\x7f\x85\x9b\ufffe\uffff\u202e<&>\"'\r\n]]>--x"
SVG = "{http://www.w3.org/2000/svg}"

# A job that says it started, then waits (bounded) until told to end.
WAITING_JOB = """\
import os, sys, time
print("ready", flush=True)
deadline = time.monotonic() + 300
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.02)
"""


def _recording(path: Path, steps: int = 3) -> str:
    evs: list[dict[str, Any]] = [
        {"kind": "session", "t": T0, "v": 1, "id": "x", "command": ["train.py"]},
        {"kind": "compile_start", "t": T0 + 1, "compile_id": "0/0", "frame_id": 0, "name": "fwd"},
        {"kind": "compile", "t": T0 + 2, "compile_id": "0/0", "frame_id": 0, "entire_frame_compile_time_s": 1.0},
        {"kind": "steps", "t": T0 + 3, "src": "optimizer", "i0": 0, "ns": [0] + [1_000_000] * steps},
        {"kind": "exit", "t": T0 + 4, "code": 0, "signal": None},
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in evs))
    return str(path)


def _trace_dir(path: Path) -> str:
    """A TORCH_TRACE directory of one log file with one record."""
    path.mkdir()
    log = path / "dedicated_log_torch_trace_abc.log"
    log.write_text('V1125 14:59:22.546000 14840 torch/_dynamo/utils.py:2350] {"str": {"string": "x", "id": 0}}\n')
    return str(log)


def _bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _leftovers(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if n.endswith(".tmp")]


@pytest.mark.parametrize("fmt", ["--perfetto", "--svg"])
@pytest.mark.parametrize("spelling", ["same path", "symlink", "hard link", "another spelling"])
def test_export_refuses_to_write_over_its_own_input(tmp_path, fmt, spelling):
    rec = _recording(tmp_path / "run.jsonl")
    before = _bytes(rec)
    out = {
        "same path": rec,
        "symlink": str(tmp_path / "link.jsonl"),
        "hard link": str(tmp_path / "hard.jsonl"),
        "another spelling": str(tmp_path / "sub" / ".." / "run.jsonl"),
    }[spelling]
    if spelling == "symlink":
        os.symlink(rec, out)
    elif spelling == "hard link":
        os.link(rec, out)
    elif spelling == "another spelling":
        (tmp_path / "sub").mkdir()
    one_line_containing(ctmon("export", fmt, rec, "-o", out), "refusing to write", "over its own input")
    assert _bytes(rec) == before
    assert _leftovers(tmp_path) == []


def test_export_refuses_to_write_over_a_log_of_the_trace_it_reads(tmp_path):
    log = _trace_dir(tmp_path / "trace")
    before = _bytes(log)
    one_line_containing(ctmon("export", "--perfetto", str(tmp_path / "trace"), "-o", log), "over its own input")
    assert _bytes(log) == before
    out = str(tmp_path / "t.json")  # and the same trace still exports where it may
    assert ctmon("export", "--perfetto", str(tmp_path / "trace"), "-o", out).returncode == 0
    json.loads(_bytes(out))


def _writer_holds_its_lock(path: str) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # a lock we took goes with our descriptor
    return False


@pytest.mark.slow
def test_a_recording_being_written_is_never_written_over(tmp_path):
    """A live ``ctmon record -o live.jsonl``: ``export -o`` it (directly or
    through a symlink) and ``bench -o`` its directory (where a run would
    take its name) are refused; the writer keeps its lock and its recording
    ends complete."""
    job = tmp_path / "job.py"
    job.write_text(WAITING_JOB)
    runs = tmp_path / "runs"
    runs.mkdir()
    live = str(runs / "eager.jsonl")
    release = str(tmp_path / "release")
    writer = subprocess.Popen(
        [sys.executable, "-m", "ctmon", "record", "-q", "-o", live, str(job), release],
        env=env_with(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        assert _writer_holds_its_lock(live)
        other = _recording(tmp_path / "other.jsonl")
        os.symlink(live, tmp_path / "link.jsonl")
        before = _bytes(live)
        for out in (live, str(tmp_path / "link.jsonl")):
            for fmt in ("--perfetto", "--svg"):
                refused = ctmon("export", fmt, other, "-o", out)
                one_line_containing(refused, "refusing to write", "a running ctmon is writing it")
        bench = ctmon("bench", "--modes", "eager", "-o", str(runs), str(job), release)
        one_line_containing(bench, "bench: refusing to write", live, "a running ctmon is writing it")
        assert _bytes(live).startswith(before)  # untouched: it may only have grown
        assert _writer_holds_its_lock(live)  # looking never took the writer's lock away
        assert sorted(os.listdir(runs)) == ["eager.jsonl"]
    finally:
        open(release, "w").close()
        writer.communicate(timeout=120)
    assert writer.returncode == 0
    lines = [json.loads(x) for x in _bytes(live).splitlines()]
    assert lines[0]["kind"] == "session" and lines[-1]["kind"] == "exit"
    assert [x["kind"] for x in lines].count("session") == 1


def test_record_refuses_to_write_over_the_program_it_runs(tmp_path):
    """``ctmon record -o launch.sh ./launch.sh``: the program (not a Python
    script) is the job's own file too."""
    program = tmp_path / "launch.sh"
    program.write_text("#!/bin/sh\necho hi\n")
    program.chmod(0o755)
    before = _bytes(str(program))
    out = ctmon("record", "-q", "-o", str(program), str(program))
    one_line_containing(out, "refusing to write the recording over the script itself")
    assert _bytes(str(program)) == before


def _limit_file_size() -> None:
    """In the child: files stop growing at 4 KiB, and a write past that
    fails (EFBIG) instead of killing the process -- a full disk, in short."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


@pytest.mark.parametrize("fmt", ["--perfetto", "--svg"])
def test_a_failed_write_leaves_the_earlier_file_whole(tmp_path, fmt):
    rec = _recording(tmp_path / "run.jsonl", steps=2000)  # an export of ~200 KB
    out = tmp_path / "out" / "t.out"
    out.parent.mkdir()
    out.write_text("an earlier good export\n")
    out.chmod(0o640)
    failed = subprocess.run(
        [sys.executable, "-m", "ctmon", "export", fmt, rec, "-o", str(out)],
        env=env_with(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_file_size,
    )
    one_line_containing(failed, f"cannot write {out}", "File too large")
    assert out.read_text() == "an earlier good export\n"
    assert _leftovers(out.parent) == []
    # the same export without the limit replaces it, keeping its permissions;
    # through a symlink, the file it points at
    link = tmp_path / "link.out"
    link.symlink_to(out)
    assert ctmon("export", fmt, rec, "-o", str(link)).returncode == 0
    assert link.is_symlink() and (out.stat().st_mode & 0o777) == 0o640
    assert out.stat().st_size > 100_000
    assert _leftovers(out.parent) == [] and _leftovers(tmp_path) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_full_disk_is_one_line(tmp_path):
    rec = _recording(tmp_path / "run.jsonl")
    one_line_containing(ctmon("export", "--perfetto", rec, "-o", "/dev/full"), "No space left on device")


def _hostile_event(cls: type[Event], t: float) -> dict[str, Any]:
    """An event of kind ``cls`` with every text field (and list of texts) HOSTILE."""
    ev: dict[str, Any] = {"kind": cls.__struct_config__.tag, "t": t}
    for f in msgspec.structs.fields(cls):
        args = typing.get_args(f.type)
        if typing.get_origin(f.type) is list:
            if args == (str,):
                ev[f.name] = [HOSTILE, HOSTILE]
        elif typing.get_origin(f.type) is dict:
            ev[f.name] = {HOSTILE: HOSTILE if args == (str, str) else 1}
        elif f.type is str or str in args:
            ev[f.name] = HOSTILE
    return ev


def _hostile_recording(path: Path) -> str:
    evs = [_hostile_event(cls, T0 + i) for i, cls in enumerate(E.KINDS.values())]
    for ev in evs:
        kind = ev["kind"]
        if kind == "session":
            ev["v"] = 1
        elif kind == "steps":
            ev.update(i0=0, ns=[0, 1_000_000, 2_000_000])
        elif kind == "compile_phase":
            ev["ph"] = "B"
        elif kind == "sample":
            ev.update(cpu_percent=1.0, gpus=[{"index": 0, "name": HOSTILE, "util": 3.0, "mem_used": 5}])
        elif kind == "hotness":
            ev["frames"] = [[HOSTILE, 1, HOSTILE, 1, 1]]
        elif kind == "exit":
            ev["code"] = None  # the signal's name is drawn
    evs.sort(key=lambda ev: ev["kind"] != "session")
    evs.append({"kind": "compile_phase", "t": T0 + 100, "compile_id": HOSTILE, "phase": HOSTILE, "ph": "E"})
    # a process whose host is hostile, and a rank whose pid name is drawn
    evs.append({"kind": "process", "t": T0 + 101, "pid": 7, "rank": 0, "world_size": 1, "host": HOSTILE})
    path.write_text("".join(json.dumps(ev) + "\n" for ev in evs))
    return str(path)


def _strict_json(data: bytes) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(data.decode("utf-8"), parse_constant=refuse)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(k) + _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_every_text_a_recording_holds_exports_well_formed(tmp_path):
    rec = _hostile_recording(tmp_path / "hostile.jsonl")
    report = ctmon("report", rec, "--json")
    assert report.returncode == 0 and "skipped" not in report.stderr, report.stderr  # every line is an event
    json_out, svg_out = str(tmp_path / "t.json"), str(tmp_path / "t.svg")
    assert ctmon("export", "--perfetto", rec, "-o", json_out).returncode == 0
    doc = _strict_json(_bytes(json_out))
    texts = _strings(doc)
    assert any("<&>" in s for s in texts)  # the hostile strings reached the timeline
    for s in texts:
        assert clean_markup(s) == s, s
    out = ctmon("export", "--svg", rec, "-o", svg_out)
    assert out.returncode == 0, out.stderr
    svg = ElementTree.parse(svg_out).getroot()  # well-formed XML
    drawn = [t.text or "" for t in svg.iter() if t.tag in (f"{SVG}title", f"{SVG}text")]
    hostile = [t for t in drawn if "<&>" in t]
    assert len(hostile) >= 4  # process, compile, phase, break, cache, exit
    for t in hostile:
        assert PLACEHOLDER in t and clean_markup(t) == t


def test_times_near_the_float_maximum_export_as_numbers(tmp_path):
    evs = [
        {"kind": "session", "t": T0, "v": 1},
        {"kind": "steps", "t": 1e308, "src": "o", "i0": 0, "ns": [0, 5, 6]},
        {"kind": "steps", "t": T0 + 1, "src": "o", "i0": 0, "ns": [0, 5, 6]},
        {"kind": "compile", "t": T0 + 2, "compile_id": "0/0", "entire_frame_compile_time_s": 1.7e308},
        {"kind": "bwd_compile", "t": T0 + 2, "compile_id": "0/0", "duration_us": 1.7e308},
        {"kind": "sample", "t": T0 + 3, "cpu_percent": -1.7e308},
        {"kind": "sample", "t": T0 + 4, "cpu_percent": 1e-300},
        {"kind": "graph_break", "t": 1e300, "file": "x"},
        {"kind": "exit", "t": T0 + 5, "code": 0, "signal": None},
    ]
    rec = tmp_path / "big.jsonl"
    rec.write_text("".join(json.dumps(e) + "\n" for e in evs))
    for fmt, name in (("--perfetto", "t.json"), ("--svg", "t.svg")):
        out = ctmon("export", fmt, str(rec), "-o", str(tmp_path / name))
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    doc = _strict_json(_bytes(str(tmp_path / "t.json")))
    assert any(e["name"].startswith("compile 0/0") for e in doc["traceEvents"])
    svg = _bytes(str(tmp_path / "t.svg")).decode()
    ElementTree.fromstring(svg)
    assert "inf" not in svg and "nan" not in svg


def test_clean_markup_leaves_text_and_replaces_what_xml_forbids():
    assert clean_markup("plain é 😀 <&>\tand\nlines") == "plain é 😀 <&>\tand\nlines"
    for bad in ("\x00", "\x08", "\x0b", "\x1f", "\x7f", "\x85", "\ud800", "\udcff", "\ufffe", "\uffff", "\u202e"):
        assert clean_markup(f"a{bad}b") == f"a{PLACEHOLDER}b", repr(bad)
    assert clean_markup("\x1b]0;title\x07x") == f"{PLACEHOLDER}x"  # a sequence whole, not its letters
    assert clean_markup("a\r\nb") == "a\nb"
