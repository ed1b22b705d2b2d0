"""Recordings made on an H100 (torch 2.11, CUDA 13), replayed where CI has no GPU.

They were recorded by `ctmon record` running benchmarks/gpu/check.py's
reduce-overhead workload and demos/inference_buckets.py --device cuda
--mode reduce-overhead --fix: what only a GPU produces (device-timed steps,
Triton autotuning, a cudagraph skip, NVML samples) must come out of the
store and the report as it did there.
"""

from __future__ import annotations

import os

from helpers import ROOT, ctmon

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "gpu")


def report(name: str) -> dict:
    import json

    out = ctmon("report", os.path.join(FIXTURES, name), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_reduce_overhead_run_shows_cudagraph_skip_autotune_and_device_timing():
    rep = report("h100_reduce_overhead.jsonl")
    assert rep["devices"] and rep["devices"][0]["name"].startswith("NVIDIA H100")
    assert rep["steps"]["device_timed"] is True and rep["steps"]["count"] == 30
    assert rep["cache"]["autotune"]["kernels"] > 0
    (skip,) = rep["cudagraphs"]["skips"]
    assert "mutated inputs" in skip["reason"]
    finding = next(f for f in rep["findings"] if f["rule"] == "cudagraphs")
    assert finding["severity"] == "warning"
    assert finding["file"].endswith("modes.py") and finding["line"] == 18
    assert "in place" in finding["fix"]


def test_inference_buckets_on_gpu_is_device_timed_with_gpu_samples():
    rep = report("h100_inference_buckets.jsonl")
    st = rep["steps"]
    assert st["device_timed"] is True and st["count"] > 100
    assert 0.5 < st["p50_ms"] < 50
    # six buckets, warmed up before serving: all compiles happen before the
    # first request is timed, so none is "late"
    assert rep["compile"]["compiles"] == 6
    assert not any(f["rule"] == "late-compiles" for f in rep["findings"])
