"""The cache advice, proven or said as what is known.

Applied on real jobs in tests/test_findings.py's ``caches`` section:
cache:disabled (the variable unset, the same second start hits:
``test_unsetting_the_disable_variable_gets_the_hits``), cache:bypass's
allow_in_graph form (``test_removing_allow_in_graph_as_the_bypass_fix_says_caches_the_graph``)
and cache:cold-tmp's TORCHINDUCTOR_CACHE_DIR
(``test_a_persistent_cache_dir_as_cold_tmp_says_hits_on_the_next_start``).

Here, on event-built sessions: cache:guard-miss and the bypass reasons no
workload has been fixed for say what is known, link PyTorch's page on the
compile caches, and carry no fix as data; cache:cold-tmp names the proven
directory first and the portable artifacts only as PyTorch's.
"""

from __future__ import annotations

import pytest
from test_findings_unit import Run, by_id, only

from ctmon.findings.pages import CACHING_PAGE


def _inductor_run() -> Run:
    return Run().torch().steps(1).compile(0, inductor_compile_time_s=0.5)


def test_guard_misses_say_what_is_known_and_claim_no_fix() -> None:
    r = _inductor_run().cache("fx_graph", "miss", detail="guard_miss").cache("fx_graph", "miss", detail="guard_miss")
    f = by_id(r.steps(3).findings())["cache:guard-miss:fx_graph"]
    assert f.fix.startswith("What is known:") and CACHING_PAGE in f.fix and f.fixes == []
    assert "Warm the cache" not in f.fix and "keep sizes stable" not in f.fix


@pytest.mark.parametrize(
    "reason",
    [
        "Cannot cache a graph with freezing enabled",
        "Can't cache HigherOrderOperator: flex_attention",
        "Cannot produce stable cache key for unpicklable type Foo",
        "Can't cache torchbind objects",
        "Some reason PyTorch adds later",
    ],
)
def test_a_bypass_no_workload_was_fixed_for_says_what_is_known(reason: str) -> None:
    f = only(_inductor_run().cache("fx_graph", "bypass", reason=reason).steps(3).findings(), "caches")
    assert f.fixes == [] and CACHING_PAGE in f.fix
    assert "ctmon knows no change proven to make it cacheable" in f.fix
    assert "turn freezing off" not in f.fix and "custom operator" not in f.fix


def test_a_cache_turned_off_is_told_to_enable_it_and_no_setting_is_a_fix() -> None:
    reason = "FX graph cache is not enabled"
    f = only(_inductor_run().cache("fx_graph", "bypass", reason=reason).steps(3).findings(), "caches")
    assert "unset TORCHINDUCTOR_FORCE_DISABLE_CACHES" in f.fix and f.fixes == []


def test_cold_tmp_names_the_persistent_dir_and_links_the_portable_artifacts() -> None:
    r = _inductor_run().cache("fx_graph", "miss").steps(3)
    f = by_id(r.findings())["cache:cold-tmp"]
    assert f.fix.startswith("Set TORCHINDUCTOR_CACHE_DIR to a directory that persists") and f.fixes == []
    assert "save_cache_artifacts" in f.fix and CACHING_PAGE in f.fix
