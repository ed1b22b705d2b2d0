"""A job's first events reach the recording however soon it ends.

The agent says hello (its ``process`` event) synchronously, before any user
code runs, and the supervisor reads every connection it accepted until it
closes: a job that compiles once and exits at once -- through atexit or
through ``os._exit``, which runs none -- still has its hello, its torch event
and its compile in the recording, and no ``no-process-reported`` finding.
"""

from __future__ import annotations

import pytest
from helpers import record

JOB = """
import os
import sys

import torch

f = torch.compile(lambda x: x.sin() + 1, backend="eager")
f(torch.ones(3))
print("compiled", flush=True)
if sys.argv[1] == "os_exit":
    os._exit(0)
"""


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["return", "os_exit"])
def test_a_job_that_compiles_once_and_exits_at_once_is_recorded_whole(tmp_path, ending):
    script = tmp_path / "once.py"
    script.write_text(JOB)
    run = record(tmp_path, [str(script), ending], torch_trace=False, timeout=240)
    assert run.returncode == 0, run.proc.stderr
    assert "compiled" in run.proc.stdout
    events = run.events()
    # an import or connect failure of the hook shows only as a line of the job's output
    said = [e["data"] for e in events if e["kind"] == "output" and "ctmon:" in e.get("data", "")]
    assert not said, said
    session = next(e for e in events if e["kind"] == "session")
    agents = [e for e in events if e["kind"] not in ("session", "sample", "output", "exit", "steps")]
    assert agents and agents[0]["kind"] == "process", [e["kind"] for e in agents[:5]]
    assert agents[0]["pid"] == session["job_pid"]
    assert any(e["kind"] == "torch" for e in agents)
    rep = run.report()
    assert rep["compile"]["compiles"] == 1
    assert "no-process-reported" not in [f["id"] for f in rep["findings"]]
