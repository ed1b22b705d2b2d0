"""generate() on a model compiled for training runs eager: ctmon says so, and
its advice, applied, compiles generate()'s forward.

A tiny GPT-2 (built from a config) is trained through ``cmodel =
torch.compile(model)``, then generates for about two seconds under
``ctmon record``: through ``cmodel.generate()`` (the compiled wrapper hands
the attribute to the original module) and ``model.generate()``. Both run
every decode step eager, and PyTorch's trace says nothing of it. The same
workload with the finding's fix applied (``model.forward =
torch.compile(model.forward, ...)`` before generate()) must have no such
finding, and generate()'s forward calls must be compiled graph calls; with
a static cache (transformers' own compile, on a GPU only) a CPU still runs
eager, as the advice says. The
store's rule is also driven with events alone (severity, a model the job
never compiled).
"""

from __future__ import annotations

import os
import re
import time
import types
from typing import Any

import pytest
from helpers import WORKLOADS, record

from ctmon.findings import analyze
from ctmon.findings.generate_eager import WARN_S
from ctmon.read.load import load
from ctmon.store import Session
from ctmon.wire import events as E
from ctmon.wire import events_compile as EC

SCRIPT = os.path.join(WORKLOADS, "generate_eager.py")
FORMS = ("cmodel", "model", "fixed", "static")


def _line_of(mark: str, form: str) -> int:
    """The workload's line holding ``mark`` that ``form`` runs."""
    with open(SCRIPT, encoding="utf-8") as f:
        lines = f.read().splitlines()
    hits = [i + 1 for i, text in enumerate(lines) if mark in text]
    if mark == "# GENERATE":
        return hits[0] if form == "cmodel" else hits[1]  # "model" and "static" call model.generate()
    return hits[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: Any) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("generate-eager")
    out: dict[str, Any] = {}
    for form in FORMS:
        run = record(base / form, [SCRIPT, "--form", form], torch_trace=False, options=["-q"])
        assert run.returncode == 0, run.proc.stderr[-3000:]
        session, _ = load(run.recording)
        out[form] = types.SimpleNamespace(run=run, rep=run.report(), session=session)
    return out


def _eager_findings(rep: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in rep["findings"] if f["rule"] == "generate-eager"]


def _graph_calls(session: Session) -> int:
    return sum(row[0] for row in session.hotness.graphs.values())


@pytest.mark.slow
@pytest.mark.parametrize("form", ["cmodel", "model"])
def test_generate_on_the_original_module_is_told_eager(runs: dict[str, Any], form: str) -> None:
    r = runs[form]
    assert int(re.findall(r"generated (\d+) tokens", r.run.proc.stdout)[0]) > 0
    (finding,) = _eager_findings(r.rep)
    assert finding["severity"] == "info"  # ~2 s of eager decode: below WARN_S
    assert "1 generate() call on GPT2LMHeadModel ran eager" in finding["title"]
    # the user's generate() line, not transformers' or torch's
    assert finding["file"] == SCRIPT and finding["line"] == _line_of("# GENERATE", form)
    assert any(f"{SCRIPT}:{_line_of('# TRAIN-COMPILE', form)}" in e for e in finding["evidence"])
    # the fix names the original module (not the compiled wrapper) and keeps the user's backend
    want = 'model.forward = torch.compile(model.forward, backend="eager", dynamic=True)'
    assert want in finding["fix"]
    (fix,) = finding["fixes"]
    assert fix["kind"] == "code" and fix["code"] == want
    assert (fix["file"], fix["line"]) == (SCRIPT, _line_of("# GENERATE", form))
    (ev,) = r.session.generation.eager
    assert ev.looks >= 2 and ev.model_name == "model"
    # every field the agent wrote is one the types know (a rename would drift silently)
    (raw,) = [e for e in r.run.events() if e["kind"] == "generation"]
    assert set(raw) <= set(E.Generation.__struct_fields__) | {"kind"}, raw
    assert raw["eager"] is True and raw["code"].startswith("out = ")
    # nothing of the eager calls is read as tokens or steps of a compiled generate()
    assert r.rep["generation"] is None
    # the training's compiled calls only: 3 forwards and 3 losses
    assert _graph_calls(r.session) == 6


@pytest.mark.slow
def test_the_advice_applied_compiles_generates_forward(runs: dict[str, Any]) -> None:
    fixed, before = runs["fixed"], runs["model"]
    assert int(re.findall(r"generated (\d+) tokens", fixed.run.proc.stdout)[-1]) > 0
    assert _eager_findings(fixed.rep) == []
    assert fixed.session.generation.eager_count == 0
    # generate()'s forward calls are compiled calls now: many more than training's
    assert _graph_calls(fixed.session) > _graph_calls(before.session) + 10


@pytest.mark.slow
def test_a_static_cache_on_a_cpu_still_runs_eager_as_the_advice_says(runs: dict[str, Any]) -> None:
    """The fix's prose offers transformers' own compile (a static cache) on a
    GPU only: on a CPU it compiles nothing, and the finding stays."""
    r = runs["static"]
    (finding,) = _eager_findings(r.rep)
    assert 'cache_implementation="static"' in finding["fix"] and "not on a CPU" in finding["fix"]
    assert finding["line"] == _line_of("# GENERATE", "static")
    assert _graph_calls(r.session) == 6


# ---- the rule, driven with events alone ----


def _session(seen_ms: list[float], model: str = "GPT2LMHeadModel", name: str | None = "model") -> Session:
    s = Session()
    t = time.time()
    s.apply(
        EC.CompileCall(
            t=t, target="GPT2LMHeadModel", target_module="transformers", file="/w/t.py", line=3, backend="inductor"
        )
    )
    for ms in seen_ms:
        s.apply(
            E.Generation(
                t=t, eager=True, seen_ms=ms, looks=4, model=model, model_name=name, file="/w/t.py", line=9, code="g()"
            )
        )
    return s


def _rule(s: Session) -> list[Any]:
    return [f for f in analyze(s, strict=True) if f.rule == "generate-eager"]


def test_long_eager_generation_is_a_warning_and_short_info() -> None:
    (short,) = _rule(_session([1000.0, 1200.0]))
    assert short.severity == "info" and short.title.startswith("2 generate() calls on GPT2LMHeadModel")
    (long,) = _rule(_session([WARN_S * 1000 / 2, WARN_S * 1000 / 2 + 1]))
    assert long.severity == "warning"
    # inductor is torch.compile's default: the fix leaves it out
    assert long.fixes[0].text == "model.forward = torch.compile(model.forward, dynamic=True)"


def test_a_model_the_job_never_compiled_gets_no_finding() -> None:
    assert _rule(_session([9000.0], model="T5ForConditionalGeneration")) == []


def test_an_unnamed_model_and_a_bad_event() -> None:
    (f,) = _rule(_session([800.0], name=None))
    assert "model.forward = torch.compile(model.forward" in f.fix
    s = _session([])
    s.apply(E.Generation(t=time.time(), eager=True, seen_ms=None, model="GPT2LMHeadModel"))
    assert s.generation.eager_count == 0 and _rule(s) == []
