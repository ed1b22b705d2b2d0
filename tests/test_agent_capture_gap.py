"""Compile capture survives the job's own logging set-up, and says when it was off.

The agent listens on PyTorch's ``torch.__trace`` logger. A job that runs
``logging.config.dictConfig`` after ``import torch`` (default
``disable_existing_loggers=True``), or clears the logger's handlers, used to
switch compile capture off without a word, and a ``--fail-on`` gate passed on
the lower counts.
"""

from __future__ import annotations

import json
import logging

import pytest
from helpers import record, workload

from ctmon.agent import trace
from ctmon.report import gate

JOB = workload("logging_reconfig.py")


def capture_notes(run) -> list[dict]:  # type: ignore[no-untyped-def]
    return [e for e in run.events() if e["kind"] == "note" and e.get("source") == "capture"]


@pytest.mark.parametrize("how, what", [("dictconfig", "disabled"), ("clear", "removed ctmon's handler from")])
@pytest.mark.slow
def test_capture_is_restored_and_the_gap_is_noted(tmp_path, how, what) -> None:  # type: ignore[no-untyped-def]
    run = record(tmp_path, [JOB, how], torch_trace=False, options=["--fail-on", "recompiles>5"], timeout=180)
    assert "done" in run.proc.stdout, run.proc.stderr
    # the compile after the pause (size 16) is recorded: capture came back
    sizes = [e for e in run.events() if e["kind"] == "compile"]
    assert len(sizes) >= 2, run.proc.stderr
    assert any("16" in (e.get("recompile_reason") or "") for e in sizes), sizes
    (note,) = capture_notes(run)
    assert what in note["message"] and "ctmon re-enabled it" in note["message"]
    err = run.proc.stderr
    if note["level"] == "warning":  # the compile of size 8 started while the logger was off
        assert note["missing_compiles"] == 1
        assert run.returncode == gate.BUDGET_EXIT, err
        assert "ctmon: budget unverified: recompiles" in err
        assert "ctmon: warning: the job's logging configuration" in err
    else:  # the sender thread happened to repair it first: nothing lost, nothing gated
        assert note["missing_compiles"] == 0
        assert run.returncode == 0, err
    assert "Traceback" not in err


@pytest.mark.slow
def test_restoring_does_not_send_trace_records_to_the_users_handlers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Configuring the ``torch`` logger resets its children (propagate on):
    ctmon puts propagate back off, so the job's stdout handler never sees a
    structured-trace record, exactly as without ctmon."""
    run = record(tmp_path, [JOB, "torch_logger"], torch_trace=False, timeout=180)
    assert run.returncode == 0, run.proc.stderr
    assert "LOG torch.__trace" not in run.proc.stdout
    assert capture_notes(run)


class _Handler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        pass


def test_watch_is_silent_while_all_is_well_and_repairs_each_change(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    counter = iter([0, 0, 3, 3, 3])
    monkeypatch.setattr(trace, "compiles_started", lambda: next(counter))
    lg = logging.Logger("ctmon.test.trace")
    lg.propagate = False
    lg.setLevel(logging.DEBUG)
    h = _Handler()
    other = _Handler()
    lg.addHandler(other)
    trace.attach_first(lg, h)
    assert lg.handlers == [h, other]
    watch = trace.TraceWatch(lg, h)
    assert watch() == []
    lg.disabled = True
    lg.handlers.clear()
    lg.propagate = True
    lg.setLevel(logging.WARNING)
    (note,) = watch()
    assert not lg.disabled and lg.handlers[0] is h and not lg.propagate and lg.level == logging.DEBUG
    assert note["level"] == "warning" and note["missing_compiles"] == 3 and note["source"] == gate.CAPTURE_SOURCE
    assert json.dumps(note)  # a plain event
    assert watch() == []


def test_gate_fails_compile_budgets_only_when_compiles_were_lost() -> None:
    report = {
        "compile": {"recompiles": 0, "compiles": 1},
        "steps": {"count": 3},
        "notes": [{"level": "warning", "source": "capture", "message": "off"}],
    }
    budgets = [gate.parse("recompiles>0"), gate.parse("steps>10")]
    (line,) = gate.broken(budgets, report)
    assert line.startswith("budget unverified: recompiles = 0")
    report["notes"][0]["level"] = "info"
    assert gate.broken(budgets, report) == []
    report["notes"][0]["message"] = "\x1b]0;pwned\x07x"
    assert gate.capture_lines(report) == ["note: ?]0;pwned?x"]


def test_a_job_that_keeps_reconfiguring_is_noted_a_bounded_number_of_times(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(trace, "compiles_started", lambda: 0)
    lg = logging.Logger("ctmon.test.trace2")
    lg.propagate = False
    h = _Handler()
    trace.attach_first(lg, h)
    watch = trace.TraceWatch(lg, h)
    notes = []
    for _ in range(50):
        lg.disabled = True
        notes += watch()
        assert not lg.disabled
    assert len(notes) == trace.NOTES_MAX
