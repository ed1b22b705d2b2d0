"""The job's std streams under ctmon behave as under plain python: a reader
that goes away, closed fds, children that outlive the job."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import env_with

CTMON = f"{sys.executable} -m ctmon record -q"


def _sh(cmd: str, cwd: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True, env=env_with(), timeout=timeout)


def _events(path: str) -> list[dict]:
    with open(path, "rb") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_a_reader_that_goes_away_stops_the_job_as_under_python(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(
        "import os, sys, time\n"
        "for i in range(300):\n    print('line', i, flush=True)\n    time.sleep(0.01)\n"
        "open(os.environ['DONE'], 'w').close()\n"
    )
    done_py, done_ct = tmp_path / "done_py", tmp_path / "done_ct"
    rec = tmp_path / "r.jsonl"
    plain = _sh(f'DONE={done_py} {sys.executable} {job} | head -1; echo "rc=${{PIPESTATUS[0]}}"', str(tmp_path))
    t0 = time.monotonic()
    run = _sh(f'DONE={done_ct} {CTMON} -o {rec} {job} | head -1; echo "rc=${{PIPESTATUS[0]}}"', str(tmp_path))
    took = time.monotonic() - t0
    assert plain.stdout == run.stdout == "line 0\n" + plain.stdout.splitlines()[-1] + "\n"
    assert plain.stdout.splitlines()[-1] == run.stdout.splitlines()[-1]  # the same exit status
    assert not done_py.exists() and not done_ct.exists()  # neither ran to its end
    assert "BrokenPipeError" in run.stderr and "BrokenPipeError" in plain.stderr
    assert took < 2.5  # not 300 lines x 10 ms
    notes = [e["message"] for e in _events(str(rec)) if e["kind"] == "note"]
    assert any("broken pipe" in m for m in notes), notes


PROBE = (
    "import os, sys, json\n"
    "def fd_kind(fd):\n"
    "    try:\n        import stat\n        m = os.fstat(fd).st_mode\n    except OSError:\n        return 'closed'\n"
    "    return 'socket' if stat.S_ISSOCK(m) else 'open'\n"
    "seen = {'fds': [fd_kind(fd) for fd in (0, 1, 2)],\n"
    "        'streams': [getattr(sys, n) is None for n in ('stdin', 'stdout', 'stderr')]}\n"
    "open(os.environ['OUT'], 'w').write(json.dumps(seen))\n"
    "print('to stdout')\nprint('to stderr', file=sys.stderr)\n"
)


@pytest.mark.slow
def test_closed_std_streams_are_closed_for_the_job_and_cost_ctmon_nothing(tmp_path):
    job = tmp_path / "probe.py"
    job.write_text(PROBE)
    for redirect in ("<&-", "2>&-", ">&-", "<&- >&- 2>&-"):
        py_out, ct_out = tmp_path / "py.json", tmp_path / "ct.json"
        plain = _sh(f"OUT={py_out} {sys.executable} {job} {redirect}", str(tmp_path))
        run = _sh(
            f"exec 3>{tmp_path}/rc; OUT={ct_out} {CTMON} -o {tmp_path}/r.jsonl {job} {redirect}; echo $? >&3",
            str(tmp_path),
        )
        assert plain.returncode == 0
        assert (tmp_path / "rc").read_text().strip() == "0", (redirect, run.stderr)
        assert json.loads(ct_out.read_text()) == json.loads(py_out.read_text()), redirect
        assert "Traceback" not in run.stderr


@pytest.mark.slow
def test_a_child_that_outlives_the_job_keeps_printing(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(
        "import os, sys, time\n"
        "print('job', flush=True)\n"
        "if os.fork() == 0:\n"
        "    time.sleep(1.0)\n"
        "    print('child after the job', flush=True)\n"
        "    print('child on stderr', file=sys.stderr, flush=True)\n"
        "    open(os.environ['OK'], 'w').write('ok')\n"
        "    os._exit(0)\n"
    )
    ok, out, err = tmp_path / "ok", tmp_path / "out.txt", tmp_path / "err.txt"
    t0 = time.monotonic()
    run = _sh(f"OK={ok} {CTMON} -o {tmp_path}/r.jsonl {job} >{out} 2>{err}", str(tmp_path))
    took = time.monotonic() - t0
    assert run.returncode == 0
    assert not ok.exists()  # ctmon returned when the job exited, as python does
    deadline = time.monotonic() + 15
    while not ok.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ok.read_text() == "ok"  # the child's print did not fail
    time.sleep(0.2)
    assert out.read_text() == "job\nchild after the job\n"
    assert err.read_text() == "child on stderr\n"
    assert took < 5
    notes = [e["message"] for e in _events(str(tmp_path / "r.jsonl")) if e["kind"] == "note"]
    assert any("still holds" in m for m in notes), notes
