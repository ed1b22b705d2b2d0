"""The timing and recompile-budget advice, applied (issue: every template is
proven by a test that applies it, or says what is known without claiming a
fix).

* recompile-budget: a frame close to its limit, no cause repeated; the limit
  its ``fixes`` gives, applied on the script's own setting line: the finding
  is gone, and a second frame the old limit refused compiles every version.
* recompile-limit, each cause seen once: the limit its own ``fixes`` gives,
  applied the same way: no frame refused, the finding gone. (A cause that
  keeps taking new values still gets "raising only postpones": unit-tested.)
* spikes:other, spikes:other-rank: no change is proven for these (the cause
  of a slow step is not in the recording, or is another rank's finding): the
  advice says what is known, links PyTorch's page, and claims no fix.

The other templates of this group are proven beside their fixtures:
late-compiles and spikes:compile in tests/test_findings.py's ``late``
section (warming up applied), eager-glue in tests/test_agent_hotness.py (the same
loop with its eager work gone: no finding).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from golden import FIXTURES, report_of
from helpers import WORKLOADS
from test_findings import Recorded, record_all
from test_findings_unit import LIMIT_REASON, Run, by_id, storm

from ctmon.findings.model import CONFIG
from ctmon.findings.pages import TUNING_PAGE

BUDGET = os.path.join(WORKLOADS, "advice", "recompile_budget.py")


def _finding(rep: dict[str, Any], fid: str) -> dict[str, Any]:
    (f,) = [f for f in rep["findings"] if f["id"] == fid]
    return f


def _frame(r: Recorded, name: str) -> dict[str, Any]:
    (fr,) = [fr for fr in r.rep["frames"] if fr["name"] == name]
    return fr


def _ids(r: Recorded, prefix: str) -> list[str]:
    return [f["id"] for f in r.findings if f["id"].startswith(prefix)]


# ------------------------------------------------------------ recompile-budget


@pytest.fixture(scope="module")
def budget(tmp_path_factory: Any) -> dict[str, Recorded | None]:
    """recompile_budget.py at its own limit (4), then, side by side, with the
    limit its recompile-budget finding suggests ("raised") and with the one
    its recompile-limit finding suggests ("limit"; None if it offers none),
    each set on the script's own line."""
    base = tmp_path_factory.mktemp("budget")
    low = record_all(base, {"low": {"target": [BUDGET]}})["low"]
    limits = {"raised": _limit_fix(low, "recompile-budget:0"), "limit": _limit_fix(low, LIMIT)}
    jobs = {name: {"target": [BUDGET, "--limit", str(fix["value"])]} for name, fix in limits.items() if fix}
    return {"low": low, "limit": None, **record_all(base, jobs)}


LIMIT = "recompile-limit:1"  # shift's


def _limit_fix(r: Recorded, fid: str) -> dict[str, Any] | None:
    """The finding's fix that sets the recompile limit, if it has one."""
    got = [x for x in _finding(r.rep, fid)["fixes"] if x["name"] == "recompile_limit"]
    assert all((x["kind"], x["module"]) == (CONFIG, "torch._dynamo.config") for x in got)
    return got[0] if got else None


@pytest.mark.slow
def test_the_suggested_recompile_limit_applied_leaves_no_frame_refused(budget: dict[str, Recorded | None]) -> None:
    low, raised = budget["low"], budget["raised"]
    assert low is not None and raised is not None
    f = _finding(low.rep, "recompile-budget:0")
    assert f["title"] == "scale has used 3 of its 4 recompiles" and f["severity"] == "warning"
    assert "raise torch._dynamo.config.recompile_limit above 5" in f["fix"] and f["fixes"][0]["value"] == 6
    # the warning is right: shift, one more new input than scale, was refused at 4
    assert _ids(low, "recompile-limit:") == ["recompile-limit:1"]
    assert (_frame(low, "shift")["entries"], _frame(low, "shift")["compiles"]) == (4, 5)
    # applied: no budget finding for scale, no frame refused, every version compiled
    assert "recompile-budget:0" not in _ids(raised, "recompile-budget:")
    assert _ids(raised, "recompile-limit:") == []
    assert (_frame(raised, "scale")["entries"], _frame(raised, "shift")["entries"]) == (3, 5)
    assert raised.rep["compile"]["limit_hits"] == 0 < low.rep["compile"]["limit_hits"]


@pytest.mark.slow
def test_the_limit_findings_own_limit_applied_compiles_every_version(budget: dict[str, Recorded | None]) -> None:
    """shift's causes each appeared once: a bounded set of versions, so the
    limit finding offers the limit that holds them (not "only postpones",
    which the budget run above disproves), and applied, it works."""
    low, applied = budget["low"], budget["limit"]
    assert low is not None
    f = _finding(low.rep, LIMIT)
    assert f["severity"] == "critical" and "only postpones" not in f["fix"]
    assert "each for a different cause seen once" in f["fix"] and "recompile_limit to at least 5" in f["fix"]
    assert [x["value"] for x in f["fixes"] if x["name"] == "recompile_limit"] == [7]
    assert applied is not None
    # applied: no frame refused, the finding gone, shift's 5 versions compiled
    assert applied.rep["compile"]["limit_hits"] == 0 and _ids(applied, "recompile-limit:") == []
    assert _frame(applied, "shift")["entries"] == 5


def test_a_shape_series_at_the_limit_still_only_postpones_and_offers_no_limit() -> None:
    """One dim taking a new size on every call keeps taking new ones: a
    higher limit only postpones the refusal, so none is offered."""
    lim = by_id(storm(3).findings())["recompile-limit:0"]
    assert "recompile_limit only postpones" in lim.fix and "each for a different cause" not in lim.fix
    assert all(fix.name != "recompile_limit" for fix in lim.fixes)
    assert lim.fixes, "the shape's own fix (mark_dynamic) stays"


def test_a_number_read_out_of_the_graph_seen_once_is_still_a_series() -> None:
    """A value read back from the previous graph (.item(), time.time())
    takes a new value on most calls: seen once at the limit, no limit offered."""
    r = Run().steps(1).compile(0, "step_fn", limit=2)
    r.compile(0, "step_fn", limit=2, reason="0/0: tensor 'x' dtype mismatch. expected Float, actual Double")
    item = "0/1: ___stack0 == 104.26  # return x / scale  # t.py:9 in torch_dynamo_resume_in_step_fn_at_8"
    r.compile(0, "step_fn", limit=2, reason=item, fail=LIMIT_REASON, co_name=False)
    lim = by_id(r.steps(3).findings())["recompile-limit:0"]
    assert "only postpones" in lim.fix and all(fix.name != "recompile_limit" for fix in lim.fixes)


# ------------------------------------------------------------ what is known


def test_spikes_other_says_what_is_known_and_claims_no_fix() -> None:
    rep = report_of(os.path.join(FIXTURES, "gpu", "h100_inference_buckets.jsonl"))
    f = _finding(rep, "spikes:other")
    assert f["fixes"] == [] and TUNING_PAGE in f["fix"]
    assert f["fix"].startswith("ctmon sees that these steps were slow, not why")
    for claim in ("num_workers", "pin_memory", "gc.freeze", "Check the"):
        assert claim not in f["fix"], claim


def test_spikes_other_rank_points_at_the_other_ranks_finding_and_claims_no_fix() -> None:
    rep = report_of(os.path.join(FIXTURES, "recordings", "two_ranks.jsonl"))
    f = _finding(rep, "spikes:other-rank")
    assert f["fixes"] == [] and f["fix"].startswith("Nothing to change on this rank")
    assert "rank-divergence" in f["fix"] and "warm every shape" not in f["fix"]
    # the finding it points at is in the same report, with its own (proven) fix
    assert any(x["id"].startswith("rank-divergence:") for x in rep["findings"])
