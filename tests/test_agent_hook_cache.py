"""FX graph and AOTAutograd caches: a second process starts warm and hits."""

from __future__ import annotations

import os
import random

import pytest
from helpers import assert_matches_torch_trace, record, workload

pytestmark = pytest.mark.slow  # real jobs under ctmon record, Inductor included


def test_warm_restart_hits_fx_and_aot_autograd_caches(tmp_path):
    # A width no other test uses: the first process must miss, even though
    # the Inductor cache dir is shared across the test session.
    width = random.Random(os.getpid()).randrange(1000, 9000)
    cold = record(tmp_path / "cold", [workload("cache_model.py"), str(width)])
    assert cold.returncode == 0, cold.proc.stderr
    cold_rep = cold.report()
    assert_matches_torch_trace(cold_rep, cold.trace())
    fx, aot = cold_rep["cache"]["fx_graph"], cold_rep["cache"]["aot_autograd"]
    assert fx["miss"] >= 2 and fx["hit"] == 0, fx  # forward and backward graphs
    assert aot["miss"] == 1 and aot["hit"] == 0, aot

    warm = record(tmp_path / "warm", [workload("cache_model.py"), str(width)])
    assert warm.returncode == 0, warm.proc.stderr
    warm_rep = warm.report()
    assert_matches_torch_trace(warm_rep, warm.trace())
    aot = warm_rep["cache"]["aot_autograd"]
    assert aot["hit"] == 1 and aot["miss"] == 0, aot
    # an AOTAutograd hit loads the compiled graphs straight from the FX cache
    assert warm_rep["cache"]["fx_graph"]["miss"] == 0
    assert warm_rep["cache"]["time_saved_s"] > 0
    assert warm_rep["compile"]["total_time_s"] < cold_rep["compile"]["total_time_s"]


def test_the_first_trace_record_is_not_lost_without_torch_trace(tmp_path):
    """Without TORCH_TRACE, PyTorch's lazy trace handler detaches itself while
    handling the process's first structured-trace record, and logging then
    skips the handler after it for that record. ctmon's handler goes first,
    so a cache result that happens to be the first record still arrives."""
    run = record(tmp_path, [workload("faults_job.py"), "--steps", "5", "--trace-records", "1"], torch_trace=False)
    assert run.proc.returncode == 0, run.proc.stderr
    cache = [e for e in run.events() if e["kind"] == "cache"]
    assert [(e["cache"], e["result"], e.get("key")) for e in cache] == [("fx_graph", "miss", "faults-job")]
    assert run.report()["cache"]["fx_graph"]["miss"] == 1
