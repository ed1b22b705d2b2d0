"""``--pid`` of a CPython 3.14+ process: joined by ``sys.remote_exec``
(ctmon/launch/join_remote.py), without gdb and without stopping it.

The 3.14 interpreter is ``python3.14`` on PATH, or CTMON_TEST_PYTHON314
(.ci/run fetches one: .ci/python314.sh). The tests that need it are skipped
without it; the others run everywhere."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

WAIT_S = 120.0
PY314 = os.environ.get("CTMON_TEST_PYTHON314") or shutil.which("python3.14")
needs_314 = pytest.mark.skipif(
    not PY314, reason="no Python 3.14 (python3.14 on PATH, or CTMON_TEST_PYTHON314): .ci/python314.sh fetches one"
)
# A job in pure Python: the 3.14 interpreter has no torch; the agent needs none.
LOOP = """
import os, sys, time
print("READY", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)  # back in the interpreter 20 times a second: where a scheduled call runs
print("DONE", flush=True)
"""


def _wait(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _events(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for ln in lines:
        try:
            out.append(json.loads(ln))
        except ValueError:
            continue  # a line being written
    return out


def _no_gdb_env() -> dict[str, str]:
    """PATH without gdb: sys.remote_exec needs none."""
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not os.path.exists(os.path.join(d, "gdb"))]
    return {**os.environ, "PATH": os.pathsep.join(keep)}


def _start(python: str, stop: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    job = subprocess.Popen(
        [python, "-c", LOOP, str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert job.stdout is not None and job.stdout.readline().strip() == "READY"
    return job


def _finish(job: subprocess.Popen[str], stop: Path) -> tuple[int, str, str]:
    stop.touch()
    out, err = job.communicate(timeout=WAIT_S)
    return job.returncode, out, err


def _scripts() -> list[str]:
    from ctmon.launch.runtime import runtime_dir

    return sorted(f for f in os.listdir(runtime_dir()) if f.startswith("join-") and f.endswith(".py"))


@needs_314
@pytest.mark.slow
def test_a_314_process_is_joined_by_remote_exec_without_gdb_and_left_as_it_was(tmp_path: Path) -> None:
    """Joined with no gdb on PATH; the note says how and that the process
    was not stopped; leaving (SIGINT) lets it go on; its output and exit are
    a plain run's; the file sys.remote_exec ran is gone."""
    assert PY314 is not None
    plain = _start(PY314, tmp_path / "plain-stop")
    want = _finish(plain, tmp_path / "plain-stop")
    before = _scripts()

    job = _start(PY314, tmp_path / "stop")
    rec = tmp_path / "joined.jsonl"
    ctmon = subprocess.Popen(
        [sys.executable, "-m", "ctmon", "record", "--pid", str(job.pid), "-o", str(rec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_no_gdb_env(),
    )
    try:
        kinds = lambda: {e.get("kind") for e in _events(rec)}  # noqa: E731
        _wait(lambda: "joined" in kinds() or ctmon.poll() is not None, "the joined event")
        assert ctmon.poll() is None, ctmon.communicate()
        ctmon.send_signal(signal.SIGINT)
        _, err = ctmon.communicate(timeout=WAIT_S)
    finally:
        if ctmon.poll() is None:
            ctmon.kill()
    assert ctmon.returncode == 0, err
    assert f"left process {job.pid} running" in err and "Traceback" not in err
    assert _finish(job, tmp_path / "stop") == want  # output, errors and exit code: a plain run's
    notes = [e["message"] for e in _events(rec) if e.get("kind") == "note"]
    assert any(
        n.startswith(f"joining process {job.pid}: sys.remote_exec scheduled ctmon's agent in ")
        and n.endswith("(the process was not stopped)")
        for n in notes
    ), notes
    assert [e["pid"] for e in _events(rec) if e.get("kind") == "process"] == [job.pid]
    assert _scripts() == before  # read by the process, then removed


@needs_314
def test_a_314_process_with_remote_debugging_off_needs_gdb(tmp_path: Path) -> None:
    """PYTHON_DISABLE_REMOTE_DEBUG: sys.remote_exec would be refused in the
    process, so gdb is what joins it; without gdb, the usual line."""
    assert PY314 is not None
    job = _start(PY314, tmp_path / "stop", {**os.environ, "PYTHON_DISABLE_REMOTE_DEBUG": "1"})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ctmon", "record", "--pid", str(job.pid)],
            capture_output=True,
            text=True,
            env=_no_gdb_env(),
            timeout=WAIT_S,
        )
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "needs gdb: apt-get install gdb" in done.stderr
        assert job.poll() is None
    finally:
        _finish(job, tmp_path / "stop")


def test_an_older_python_is_joined_by_gdb(tmp_path: Path) -> None:
    """This interpreter (3.13 or older here) has no sys.remote_exec: None,
    by its name or by asking it."""
    from ctmon.launch.join_remote import remote_exec_python

    if sys.version_info >= (3, 14):
        pytest.skip("this interpreter has sys.remote_exec")
    job = _start(sys.executable, tmp_path / "stop")
    try:
        assert remote_exec_python(job.pid) is None
    finally:
        _finish(job, tmp_path / "stop")
    assert remote_exec_python(job.pid) is None  # gone: nothing to run
