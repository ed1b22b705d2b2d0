"""A job ctmon did not start opts in from inside: ``ctmon.install()``.

The process runs under plain python (as under srun, in a pod or a
notebook), calls ``ctmon.install()`` and is from then on recorded -- its
counts equal its own TORCH_TRACE file -- and listed by ``ctmon watch`` while
it runs. ``CTMON_INSTALL=1`` does the same at ``import ctmon``. Under ctmon
already, install() does nothing; when monitoring cannot start, one line says
so and the job runs on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from helpers import ctmon, env_with, read_torch_trace, workload

pytestmark = pytest.mark.slow  # real compiled jobs that install ctmon themselves

SCRIPT = workload("installs_itself.py")


def _start(tmp_path, *args: str, **env: str) -> subprocess.Popen[str]:
    e = env_with(TORCH_TRACE=str(tmp_path / "trace"), **env)
    return subprocess.Popen(
        [sys.executable, SCRIPT, *args], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _listed(pid: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = ctmon("watch", "--list", "--json")
        for s in json.loads(out.stdout or "[]"):
            if s.get("job_pid") == pid and s.get("state") == "running":
                return s
        time.sleep(0.2)
    raise AssertionError(f"pid {pid} never listed: {out.stdout} {out.stderr}")


def _report(path: str, timeout: float = 20) -> dict:
    # the supervisor ends a moment after the job: the recording is complete once it says exit
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rep = json.loads(ctmon("report", path, "--json").stdout)
        if rep["state"] == "exited":
            return rep
        time.sleep(0.2)
    raise AssertionError(f"{path} never ended: {rep['state']}")


def test_an_installed_job_is_recorded_and_listed_while_it_runs(tmp_path):
    rec, hold = str(tmp_path / "rec.jsonl"), str(tmp_path / "hold")
    proc = _start(tmp_path, "--recording", rec, "--hold", hold)
    try:
        listed = _listed(proc.pid)
        assert listed["state"] == "running" and listed["recording"] == rec
    finally:
        open(hold, "w").close()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"install returned {rec}" in out and "again True" in out and "done" in out
    rep = _report(rec)
    trace = read_torch_trace(str(tmp_path / "trace"))
    assert (rep["compile"]["compiles"], rep["compile"]["recompiles"]) == (trace.compiles, trace.recompiles) == (2, 1)
    assert rep["steps"]["count"] == 4 and rep["pid"] == proc.pid
    assert rep["exit_code"] is None  # not ctmon's child: its status is not known, and not called a failure
    assert not [f for f in rep["findings"] if f["rule"] == "job-failed"]
    assert "Ended (exit status not known to ctmon)" in ctmon("report", rec).stdout


def test_the_environment_variable_installs_at_import(tmp_path):
    rec = str(tmp_path / "env.jsonl")
    proc = _start(tmp_path, "--env", CTMON_INSTALL="1", CTMON_RECORDING=rec)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "install returned None" in out  # import ctmon did it already: nothing more to do
    assert _report(rec)["compile"]["compiles"] == 2


def test_under_ctmon_already_install_does_nothing(tmp_path):
    rec = str(tmp_path / "rec.jsonl")
    out = ctmon("record", "-q", "-o", rec, SCRIPT, "--recording", str(tmp_path / "other.jsonl"))
    assert out.returncode == 0, out.stderr
    assert "install returned None" in out.stdout and not os.path.exists(tmp_path / "other.jsonl")
    assert json.loads(ctmon("report", rec, "--json").stdout)["compile"]["compiles"] == 2


def test_when_monitoring_cannot_start_one_line_says_so_and_the_job_runs_on(tmp_path):
    (tmp_path / "a-file").write_text("")
    bad = str(tmp_path / "a-file" / "rec.jsonl")  # under a file: no one can write there
    proc = _start(tmp_path, "--recording", bad)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "done" in out and "again True" in out  # tried once, said once
    lines = [ln for ln in err.splitlines() if ln.startswith("ctmon:")]
    assert len(lines) == 1 and lines[0].startswith("ctmon: not monitoring this process: "), err
    assert "Traceback" not in err
