"""What ctmon says about a recording is what the file holds.

When the disk stays full to the end of the run (a tmpfs the test fills), or
the recording reaches the process's file-size limit (RLIMIT_FSIZE: the same
failure, no root needed), events stay in memory and never reach the file.
Then:

* the file ends with a whole line (a write the disk cut short is rolled
  back), followed where room allows by a note saying it is incomplete and
  the job's exit;
* ``record``'s summary counts what is in the file, and one line says what
  is not ("... is INCOMPLETE: N events (M steps) could not be written: why"),
  quiet or not, with M + the file's steps = the job's steps;
* a ``--fail-on`` gate cannot vouch for its budgets: exit 4, unless the job
  itself failed (its own code wins); without a gate ``record`` exits as the
  job did;
* ``ctmon report`` of the file alone says it is incomplete, and its gate fails.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import ROOT, WORKLOADS, env_with

from ctmon.report import gate
from ctmon.report.build import build_report
from ctmon.store import Session

PY = sys.executable
JOB = os.path.join(WORKLOADS, "faults_job.py")
INCOMPLETE = re.compile(
    r"ctmon: recording (?P<path>\S+) is INCOMPLETE: (?P<events>\d+) events \((?P<steps>\d+) steps\) "
    r"could not be written: (?P<why>[^\n]+)"
)
NOTE_EVENTS = re.compile(r"INCOMPLETE: (\d+) events of the run could not be written")
FSIZE = 128 << 10  # the recording's limit in the file-size cases: reached a third of the way in


@pytest.fixture
def rt() -> Iterator[str]:
    """A short runtime dir for the session sockets (a socket path stays under 108 bytes)."""
    d = tempfile.mkdtemp(prefix="ctr-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _env(rt: str) -> dict[str, str]:
    # a small step ring: the job's own ring file stays far under the file-size limit
    return env_with(CTMON_RUNTIME_DIR=os.path.join(rt, "run"), CTMON_STEP_RING_CAPACITY="4096")


def _limit_file_size() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE, hard))


def _record(
    rec: str, job_args: list[str], rt: str, options: list[str] | None = None, fsize: bool = False
) -> subprocess.CompletedProcess[str]:
    """``ctmon record`` to ``rec``; its own stdout and stderr are pipes (no
    file-size limit applies to them)."""
    return subprocess.run(
        [PY, "-m", "ctmon", "record", "-o", rec, *(options or []), JOB, *job_args],
        cwd=ROOT,
        env=_env(rt),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size if fsize else None,
    )


def _file_events(rec: str) -> list[dict[str, Any]]:
    """Every line of the file, each a whole event: the file never ends mid-line."""
    with open(rec, "rb") as f:
        data = f.read()
    assert data.endswith(b"\n"), data[-200:]
    return [json.loads(line) for line in data.split(b"\n") if line]


def _steps_in(events: list[dict[str, Any]]) -> int:
    return int(build_report(Session().apply_all(events))["steps"]["count"])


def _check_truth(rec: str, err: str, steps: int, why: str) -> tuple[list[dict[str, Any]], int]:
    """The file is whole lines, ends with its note and the exit, and the
    INCOMPLETE line's counts plus the file's are the run's."""
    events = _file_events(rec)
    note, last = events[-2], events[-1]
    assert last["kind"] == "exit", [e["kind"] for e in events[-4:]]
    assert note["kind"] == "note" and note["source"] == gate.RECORDING_SOURCE and note["level"] == "error", note
    (said,) = [m.groupdict() for m in INCOMPLETE.finditer(err)]
    assert said["path"] == rec and said["why"] == why, err
    in_file = _steps_in(events)
    assert 0 < in_file < steps, in_file
    assert in_file + int(said["steps"]) == steps, (in_file, said, err)
    noted = NOTE_EVENTS.search(note["message"])
    assert noted is not None and int(noted.group(1)) == int(said["events"]) > 0, (note, said)
    assert not re.search(r'File "[^"]*/ctmon/', err), err  # no traceback of ctmon's (a failing job prints its own)
    return events, in_file


# ------------------------------------------------------------ full disk


@pytest.fixture
def full_tmpfs(tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A 4 MiB tmpfs, filled but for 64 KiB."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {p.stderr.strip()}")
    try:
        filler = mnt / "filler"
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 16))
                    f.flush()
            except OSError:
                pass
        with open(filler, "r+b") as f:
            f.truncate(os.path.getsize(filler) - (64 << 10))
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.slow
def test_disk_full_to_the_end_summary_and_report_say_what_the_file_holds(full_tmpfs, rt) -> None:  # type: ignore[no-untyped-def]
    n = 1500
    rec = os.path.join(full_tmpfs, "r.jsonl")
    run = _record(rec, ["--steps", str(n), "--step-ms", "1", "--print-every", "1", "--line-bytes", "300"], rt)
    assert run.returncode == 0, run.stderr  # no gate: the job's exit code
    assert "FAULTS_JOB" in run.stdout  # its output passed through, all of it
    events, in_file = _check_truth(rec, run.stderr, n, "No space left on device")
    assert f"ctmon: {in_file} steps (api)" in run.stderr  # the summary counts the file's steps, not memory's
    assert events[-1]["code"] == 0

    # the file alone says it: report, its JSON, its gate
    rep = subprocess.run(
        [PY, "-m", "ctmon", "report", "--json", rec], cwd=ROOT, env=env_with(), capture_output=True, text=True
    )
    assert rep.returncode == 0, rep.stderr
    assert "ctmon: warning: this recording is INCOMPLETE" in rep.stderr
    report = json.loads(rep.stdout)
    assert report["steps"]["count"] == in_file and report["exit_code"] == 0
    gated = subprocess.run(
        [PY, "-m", "ctmon", "report", rec, "--fail-on", "steps<1"],
        cwd=ROOT,
        env=env_with(),
        capture_output=True,
        text=True,
    )
    assert gated.returncode == gate.RECORDING_EXIT, gated.stderr  # as record's own gate
    assert f"budget unverified: steps = {in_file} counts only what the recording holds" in gated.stderr


# ------------------------------------------------------ file-size limit


@pytest.mark.slow
def test_file_size_limit_gate_exits_4(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    n = 800
    rec = str(tmp_path / "r.jsonl")
    args = ["--steps", str(n), "--step-ms", "1", "--print-every", "1", "--line-bytes", "400"]
    run = _record(rec, args, rt, ["--fail-on", "recompiles>100"], fsize=True)
    assert run.returncode == gate.RECORDING_EXIT, run.stderr
    _check_truth(rec, run.stderr, n, "File too large")
    assert (
        "ctmon: budget unverified: recompiles = 0 counts only what the recording holds, and it is incomplete "
        "(File too large)" in run.stderr
    )
    assert f"ctmon: recording {rec} is INCOMPLETE" in run.stderr


@pytest.mark.parametrize(
    "options, end, rc",
    [
        (["-q"], "ok", 0),  # no gate: exits as the job did, and still says what is missing
        (["-q", "--fail-on", "recompiles>100"], "exception", 1),  # the job's failure wins over the gate's
    ],
)
@pytest.mark.slow
def test_file_size_limit_quiet_exit_is_the_jobs(tmp_path, rt, options, end, rc) -> None:  # type: ignore[no-untyped-def]
    n = 800
    rec = str(tmp_path / "r.jsonl")
    args = ["--steps", str(n), "--step-ms", "1", "--print-every", "1", "--line-bytes", "400", "--end", end]
    run = _record(rec, args, rt, options, fsize=True)
    assert run.returncode == rc, run.stderr
    events, _ = _check_truth(rec, run.stderr, n, "File too large")
    assert events[-1]["code"] == rc
    assert "steps (api):" not in run.stderr  # quiet: no summary, only what is missing


# ------------------------------------------------------------- recorder

RECORDER_SCRIPT = textwrap.dedent(
    """
    import json, os, resource, sys
    from ctmon.launch.recorder import Recorder

    path, limit = sys.argv[1], int(sys.argv[2])
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    rec = Recorder(path, None, new_files=False)
    rec.open()
    rec.empty()
    lines = [(json.dumps({"kind": "note", "t": 1.0, "message": f"{i:03d}" + "x" * 70}) + "\\n").encode() for i in range(200)]
    for line in lines:
        rec.append(line)
    said_full = rec.flush()
    error = rec.error
    size_full = os.path.getsize(path)
    with open(path, "rb") as f:
        whole = f.read().endswith(b"\\n")
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # room again
    said_room = rec.flush()
    with open(path, "rb") as f:
        data = f.read()
    print(json.dumps({
        "said_full": said_full, "size_full": size_full, "whole": whole, "error": error,
        "said_room": said_room, "same": data == b"".join(lines), "pending": len(rec.pending),
    }))
    """
)


def test_recorder_rolls_back_a_cut_line_and_completes_it_when_room_comes_back(tmp_path) -> None:  # type: ignore[no-untyped-def]
    limit = 10_050  # not a multiple of the line length: the limit cuts a line
    p = subprocess.run(
        [PY, "-c", RECORDER_SCRIPT, str(tmp_path / "r.jsonl"), str(limit)],
        cwd=ROOT,
        env=env_with(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["said_full"] == ["stuck", 0] and out["error"] == "File too large"
    assert out["whole"] and out["size_full"] < limit  # the cut line was taken back
    assert out["said_room"] == ["resumed", 0] and out["pending"] == 0
    assert out["same"]  # every line, in order, once
