"""Step numbers as the user's own log says them (issue 38, item 5).

ctmon's count is 1-based ("step 1" is the first step), and an optimizer's
boundary ends a step, so the first interval it times is step 2; where the
job numbers its steps itself -- its optimizer's step count (a resumed run's
goes on from the checkpoint's), or ``ctmon.step(n)`` -- those numbers are
used, and every report says which numbering it shows. The first step, which
compiles, is timed from the first compiled call's start where there was one,
else said to be untimed. Real jobs under ``ctmon record``; old recordings
(which hold no ``step_number`` event) read as ctmon's count from 1."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest
from golden import FIXTURES
from helpers import ctmon, record

from ctmon.read.load import load
from ctmon.report.build import build_report
from ctmon.report.text import full_text
from ctmon.store import Session, snapshots
from ctmon.store.steps import step_number
from ctmon.wire import events as E

# Compiled forward (eager backend: the compiles are Dynamo's, quick), an
# optimizer, a 1-based loop that prints its step; the batch grows at step 7,
# which recompiles there: the slow step the findings name must be the log's 7.
SHAPE_AT_7 = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
cmodel = torch.compile(model, backend="eager", dynamic=False)
opt = torch.optim.{optimizer}(model.parameters(), lr=0.01)
{resume}
for step in range(1, 13):
    x = torch.randn(8 if step < 7 else 9, 4)
    cmodel(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    print(f"step {{step}}", flush=True)
"""
# A run resumed from a checkpoint: Adam's state says 1000 steps were taken.
RESUMED = """\
cmodel(torch.randn(8, 4)).sum().backward()  # its gradients shape the state, as a checkpoint's
opt.load_state_dict({
    "state": {i: {"step": torch.tensor(1000.0), "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
              for i, p in enumerate(model.parameters())},
    "param_groups": opt.state_dict()["param_groups"],
})
opt.zero_grad()
"""
CTMON_STEP_N = """\
import ctmon
import torch

f = torch.compile(lambda x: x.sin().sum(), backend="eager")
for batch in range(50, 60):
    f(torch.randn(8))
    ctmon.step(batch)
    print(f"batch {batch}", flush=True)
ctmon.step(torch.tensor(3))  # a tensor is not read (on a GPU that would be a sync): ignored, no error
"""


def _report(tmp_path: Any, script: str) -> tuple[dict[str, Any], str]:
    job = tmp_path / "job.py"
    job.write_text(script)
    run = record(tmp_path / "out", [str(job)], torch_trace=False)
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    got = ctmon("report", run.recording, "--json")
    assert got.returncode == 0, got.stderr
    text = ctmon("report", run.recording)
    return json.loads(got.stdout), text.stdout


def _step_evidence(r: dict[str, Any]) -> list[str]:
    return [e for f in r["findings"] if f["rule"] == "step-spikes" for e in f["evidence"]]


@pytest.mark.slow
def test_ctmons_count_is_1_based_and_the_recompiling_step_is_the_logs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r, text = _report(tmp_path, SHAPE_AT_7.format(optimizer="SGD", resume=""))
    st = r["steps"]
    assert st["count"] == 12 and st["source"] == "optimizer"
    assert st["numbers"] == {"by": "ctmon", "first": 1, "last": 12}  # SGD keeps no step count
    assert "step numbers 1–12, counted by ctmon from 1" in text
    # the recompile at the log's step 7 made step 7 slow, and is named so
    slow = [e for e in _step_evidence(r) if "compile: 0/1" in e]
    assert slow and slow[0].startswith("step 7: "), _step_evidence(r)
    # the first step (its compile) timed from the compiled model's first call, and said apart
    assert st["first_step_ms"] is not None and st["first_step_ms"] > 0
    assert re.search(r"step 1, the first, took [\d.]+ (ms|s) from the first compiled call's start", text), text


@pytest.mark.slow
def test_a_resumed_optimizers_count_numbers_the_steps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r, text = _report(tmp_path, SHAPE_AT_7.format(optimizer="Adam", resume=RESUMED))
    st = r["steps"]
    assert st["count"] == 12
    assert st["numbers"] == {"by": "job", "first": 1001, "last": 1012}
    assert "step numbers 1001–1012, the job's own (its optimizer's step count)" in text
    slow = [e for e in _step_evidence(r) if "compile: 0/1" in e]
    assert slow and slow[0].startswith("step 1007: "), _step_evidence(r)


@pytest.mark.slow
def test_ctmon_step_n_numbers_the_steps_as_the_job_does(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r, text = _report(tmp_path, CTMON_STEP_N)
    st = r["steps"]
    # the tensor's call is a step all the same, numbered on from the job's last
    assert st["source"] == "api" and st["count"] == 11
    assert st["numbers"] == {"by": "job", "first": 50, "last": 60}
    assert "step numbers 50–60, the job's own (ctmon.step(n))" in text


# ---------------------------------------------------------------- the store, without a job


def _steps(src: str, i0: int, t: float, *ms: float) -> E.Steps:
    return E.Steps(t=t, src=src, i0=i0, ns=[int(x * 1e6) for x in ms])


def test_step_number_follows_the_source_and_the_jobs_numbers() -> None:
    assert [step_number("optimizer", k) for k in range(3)] == [1, 2, 3]  # boundary k ends step k+1
    assert [step_number("api", k) for k in range(3)] == [1, 2, 3]
    assert [step_number("compiled_call", k) for k in range(1, 4)] == [1, 2, 3]  # boundary k begins step k+1
    numbers = [(0, 1001), (5, 2000)]  # the job's: a jump at boundary 5
    assert [step_number("optimizer", k, numbers) for k in (0, 4, 5, 6)] == [1001, 1005, 2000, 2001]


@pytest.mark.parametrize("number_first", [True, False], ids=["number-first", "boundaries-first"])
def test_the_store_takes_the_jobs_numbers_in_either_order(number_first: bool) -> None:
    number = E.StepNumber(t=10.0, src="optimizer", i=0, n=41)
    steps = [_steps("compiled_call", 0, 9.0, 0), _steps("optimizer", 0, 10.5, 0, 20, 20)]
    events: list[Any] = [number, *steps] if number_first else [*steps, number]
    for s in (Session().apply_all(events), _one_by_one(events)):
        series = s.steps.current
        assert series is not None and series.source == "optimizer"
        assert [series.number(k) for k in range(3)] == [41, 42, 43]
        assert series.first_step_ms() == pytest.approx(1500.0)  # from the compiled call's start at 9.0 s
        r = build_report(s)
        assert r["steps"]["numbers"] == {"by": "job", "first": 41, "last": 43}
        assert r["steps"]["first_step_ms"] == pytest.approx(1500.0)


def _one_by_one(events: list[Any]) -> Session:
    s = Session()
    for ev in events:
        s.apply(ev)
    return s


def test_without_a_compiled_call_the_first_step_is_said_untimed() -> None:
    s = Session().apply_all([_steps("optimizer", 0, 10.0, 0, 20, 20)])
    r = build_report(s)
    assert r["steps"]["first_step_ms"] is None and r["steps"]["numbers"]["first"] == 1
    assert "step 1, the first, is untimed (nothing marked its start) and not in the figures below" in full_text(r)


def test_after_several_compiled_calls_the_first_steps_start_is_not_known() -> None:
    # a warm-up before the loop, or gradient accumulation's micro-batches: which call began step 1?
    s = Session().apply_all([_steps("compiled_call", 0, 5.0, 0, 100, 100), _steps("optimizer", 0, 10.0, 0, 20)])
    series = s.steps.current
    assert series is not None and series.source == "optimizer" and series.first_step_ms() is None


def test_a_replay_snapshot_keeps_the_numbers() -> None:
    s = Session().apply_all([_steps("compiled_call", 0, 9.0, 0), _steps("optimizer", 0, 10.0, 0, 20)])
    s.apply(E.StepNumber(t=10.1, src="optimizer", i=0, n=7))
    restored = snapshots.restored(snapshots.snapshot(s))
    series = restored.steps.current
    assert series is not None and series.number(1) == 8 and series.first_step_ms() == pytest.approx(1000.0)


def test_old_recordings_read_as_ctmons_count_from_1() -> None:
    s, _ = load(os.path.join(FIXTURES, "recordings", "healthy.jsonl"))
    r = build_report(s)
    assert r["steps"]["numbers"] == {"by": "ctmon", "first": 1, "last": 240}
    assert r["steps"]["first_step_ms"] is not None  # its compiled model's first call began the first step


# ---------------------------------------------------------------- the agent's side


def test_the_optimizers_own_count_is_read_only_where_it_is_cheap() -> None:
    torch = pytest.importorskip("torch")
    from ctmon.agent.optimizer_count import optimizer_step_count

    p = torch.nn.Parameter(torch.zeros(2))
    sgd = torch.optim.SGD([p], lr=0.1)
    adam = torch.optim.Adam([p], lr=0.1)
    assert optimizer_step_count(adam) is None  # not stepped yet
    for opt in (sgd, adam):
        p.grad = torch.ones(2)
        opt.step()
    assert optimizer_step_count(sgd) is None  # SGD keeps no count
    assert optimizer_step_count(adam) == 1
    adam.state[p]["step"] = torch.tensor(99.0, device="meta")  # not on the CPU: never read
    assert optimizer_step_count(adam) is None
    assert optimizer_step_count(object()) is None
