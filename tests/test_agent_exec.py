"""A job that os.execv's: into Python it is followed, into anything else the
recording says so."""

from __future__ import annotations

import sys

import pytest
from helpers import record

FIRST = """
import os, sys, time
import torch
import ctmon

@torch.compile(backend="eager")
def f(x):
    return x * 2

f(torch.ones(3))
ctmon.step(); ctmon.step()
print("about to exec", flush=True)
os.execv(sys.executable, [sys.executable, os.path.join(os.path.dirname(__file__), "second.py")])
"""

SECOND = """
import torch
import ctmon

@torch.compile(backend="eager")
def g(x):
    return x + 1

for n in (3, 4, 5):
    g(torch.ones(n))
    ctmon.step()
print("second done")
"""


@pytest.mark.slow
def test_exec_into_python_is_followed(tmp_path):
    (tmp_path / "first.py").write_text(FIRST)
    (tmp_path / "second.py").write_text(SECOND)
    run = record(tmp_path, [str(tmp_path / "first.py")], timeout=240)
    assert run.returncode == 0, run.proc.stderr
    assert "second done" in run.proc.stdout
    events = run.events()
    procs = [e for e in events if e["kind"] == "process"]
    assert len(procs) == 2 and procs[0]["pid"] == procs[1]["pid"]
    assert procs[1]["argv"][0].endswith("second.py")
    assert all("step_ring" in p for p in procs) and procs[0]["step_ring"] != procs[1]["step_ring"]
    rep = run.report()
    # f once; g for 3, then a recompile for the new size (dynamic from then on)
    assert rep["compile"]["compiles"] == run.trace().compiles >= 3
    assert rep["steps"]["count"] == 5
    assert not [e for e in events if e["kind"] == "note" and "cannot follow" in e.get("message", "")]


@pytest.mark.slow
def test_exec_into_another_program_is_noted(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "import os, time\nprint('before', flush=True)\ntime.sleep(0.2)\n"
        "os.execv('/bin/sh', ['/bin/sh', '-c', 'sleep 4; echo after-exec'])\n"
    )
    run = record(tmp_path, [str(script)], torch_trace=False, timeout=120)
    assert run.returncode == 0, run.proc.stderr
    assert "after-exec" in run.proc.stdout
    notes = [e["message"] for e in run.events() if e["kind"] == "note"]
    assert any("cannot follow" in m and "/bin/sh" in m for m in notes), notes
    assert sys.executable  # (the job ran under the same interpreter ctmon did)


def test_events_queued_at_the_exec_are_sent_first(tmp_path):
    # A record the agent's sender would only send on its next 50 ms tick.
    (tmp_path / "job.py").write_text(
        "import gc, os\n"
        "from ctmon.agent.channel import Channel\n"
        "channel = next(o for o in gc.get_objects() if isinstance(o, Channel))\n"
        "channel.put(('event', {'kind': 'note', 't': 0.0, 'level': 'info', 'source': 'job', 'message': 'queued'}))\n"
        "os.execv('/bin/true', ['/bin/true'])\n"
    )
    run = record(tmp_path, [str(tmp_path / "job.py")], torch_trace=False, timeout=120)
    assert run.returncode == 0, run.proc.stderr
    assert [e["message"] for e in run.events() if e["kind"] == "note" and e.get("source") == "job"] == ["queued"]


def test_a_job_that_exits_is_not_taken_for_an_exec(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The command line read right after the fork can still be ctmon's own;
    the one the agent runs under is what an exec would change."""
    from ctmon.launch import execwatch

    now = {"cmdline": b"python\0-m\0ctmon\0attach\0job.py"}  # the child before it exec'd python
    monkeypatch.setattr(execwatch, "cmdline", lambda pid: now["cmdline"])
    watch = execwatch.ExecWatch(123)
    now["cmdline"] = b"python\0job.py"
    assert watch.check([123], alive=True) is None  # the job's agent connected
    watch.agent_closed(123)  # the job is exiting
    assert watch.check([], alive=True) is None
    now["cmdline"] = b""  # a zombie
    assert watch.check([], alive=False) is None
