"""The typed report model (ctmon/report/model.py, diff_model.py) says what
the built report holds: every fixture recording's report, and the diff of
two of them, has exactly the keys its TypedDicts declare, section by
section. The type checker cannot see this where a section comes from a
plain dict (the findings, the summed compile and cache counts, a frame's
runtime): a key added there and not to the model fails here."""

from __future__ import annotations

import os
from typing import Any

import pytest
from golden import recordings

from ctmon.read.recording import read_recording
from ctmon.report import diff_model, model
from ctmon.report.build import build_report
from ctmon.report.diff import compare, run_summary
from ctmon.store import Session


def _keys(shape: Any) -> set[str]:
    return set(shape.__annotations__)


def _session(path: str) -> Session:
    return Session().apply_all(list(read_recording(path)))


def _has_exactly(obj: dict[str, Any], shape: Any, where: str, only_some: frozenset[str] = frozenset()) -> None:
    """Every key the shape declares, and no other; ``only_some``: the keys it
    declares NotRequired that this object may lack (with ``from __future__
    import annotations`` the TypedDict itself cannot tell them apart)."""
    missing, extra = _keys(shape) - set(obj) - only_some, set(obj) - _keys(shape)
    assert not missing and not extra, f"{where}: missing {sorted(missing)}, not declared {sorted(extra)}"


@pytest.mark.parametrize("recording", recordings(), ids=os.path.basename)
def test_every_section_has_the_keys_its_model_declares(recording: str) -> None:
    r: Any = build_report(_session(recording))
    _has_exactly(r, model.Report, "report")
    _has_exactly(r["compile"], model.CompileTotals, "compile")
    # the store counts these caches from the start; a cache it learns of later is added beside them
    assert _keys(model.Cache) <= set(r["cache"]), sorted(_keys(model.Cache) - set(r["cache"]))
    for f in r["findings"]:
        _has_exactly(f, model.Finding, "finding")
    for f in r["frames"]:
        _has_exactly(f, model.Frame, "frame")
        if f["runtime"] is not None:
            _has_exactly(f["runtime"], model.FrameRuntime, "frame runtime")
    for c in r["compiles"]:
        _has_exactly(c, model.Compile, "compile")
    for b in r["graph_breaks"]:
        _has_exactly(b, model.GraphBreak, "graph break")
    for x in r["ranks"]:
        _has_exactly(x, model.Rank, "rank")
        _has_exactly(x["steps"], model.RankSteps, "rank steps")
        _has_exactly(x["compile"], model.RankCompile, "rank compile")
    if r["steps"] is not None:
        _has_exactly(r["steps"], model.Steps, "steps")
        if r["steps"]["runtime"] is not None:
            _has_exactly(r["steps"]["runtime"], model.StepRuntime, "step runtime")
    if r["system"] is not None:
        _has_exactly(r["system"], model.System, "system")
        for g in r["system"]["gpus"]:
            _has_exactly(g, model.Gpu, "gpu")
    if r["generation"] is not None:
        _has_exactly(r["generation"], model.Generation, "generation")


def test_a_diff_has_the_keys_its_model_declares() -> None:
    found = {os.path.basename(p): p for p in recordings()}
    sides = []
    for name in ("guard_recompiles.jsonl", "graph_break_zoo.jsonl"):
        session = _session(found[name])
        sides.append(run_summary(name, session, build_report(session, lean=True)))
    for side in sides:
        # StepBlocks' device_timed is absent where a run has no steady step
        _has_exactly(dict(side), diff_model.RunSummary, "run summary", frozenset({"paths"}))  # paths: merged sides
    doc: Any = compare(sides[0], sides[1])
    _has_exactly(doc, diff_model.DiffDoc, "diff")
    _has_exactly(doc["base"], diff_model.Side, "side", frozenset({"paths", "modes"}))  # merged sides; bench outputs
    entries = [e for name in ("regressions", "improvements", "changed", "unchanged") for e in doc[name]]
    assert entries
    for e in entries:
        assert {"kind", "subject", "what", "base", "new"} <= set(e) <= _keys(diff_model.DiffEntry), sorted(e)
