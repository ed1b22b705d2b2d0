"""FX graph and AOTAutograd caches: a second process starts warm and hits."""

from __future__ import annotations

import os
import random

from helpers import assert_matches_torch_trace, record, workload


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
