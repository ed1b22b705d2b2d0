"""Step boundaries found with no code change, checked against the script's own clock."""

from __future__ import annotations

import statistics

from helpers import assert_matches_torch_trace, record, workload


def test_training_loop_steps_match_the_scripts_own_timing(tmp_path):
    run = record(tmp_path, [workload("train_loop.py"), "60"])
    assert run.returncode == 0, run.proc.stderr
    rep = run.report()
    assert_matches_torch_trace(rep, run.trace())
    own = run.self_timing()
    steps = rep["steps"]
    assert steps["source"] == "optimizer"
    assert steps["count"] == own["steps"] == 60
    own_p50 = statistics.median(own["intervals_ms"])
    assert abs(steps["p50_ms"] - own_p50) / own_p50 < 0.05, (steps["p50_ms"], own_p50)
    own_mean = statistics.fmean(own["intervals_ms"])
    assert abs(steps["mean_ms"] - own_mean) / own_mean < 0.05, (steps["mean_ms"], own_mean)


def test_inference_loop_counts_top_level_compiled_calls(tmp_path):
    run = record(tmp_path, [workload("inference_loop.py")])
    assert run.returncode == 0, run.proc.stderr
    rep = run.report()
    assert_matches_torch_trace(rep, run.trace())
    own = run.self_timing()
    steps = rep["steps"]
    assert steps["source"] == "compiled_call"
    assert steps["count"] == own["steps"] == 50
    own_p50 = statistics.median(own["intervals_ms"])
    assert abs(steps["p50_ms"] - own_p50) / own_p50 < 0.05, (steps["p50_ms"], own_p50)


def test_explicit_ctmon_step_takes_precedence(tmp_path):
    script = tmp_path / "explicit.py"
    script.write_text(
        "import torch, ctmon\n"
        "m = torch.nn.Linear(4, 4)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "cm = torch.compile(m, backend='eager')\n"
        "for epoch in range(3):\n"
        "    for micro in range(4):\n"
        "        cm(torch.randn(2, 4)).sum().backward()\n"
        "        opt.step(); opt.zero_grad()\n"
        "    ctmon.step()\n"
        "print('active', ctmon.active())\n"
    )
    run = record(tmp_path, [str(script)], torch_trace=False)
    assert run.returncode == 0, run.proc.stderr
    assert "active True" in run.proc.stdout
    rep = run.report()
    assert rep["steps"]["source"] == "api"
    assert rep["steps"]["count"] == 3


def test_ctmon_step_is_a_noop_without_ctmon(tmp_path):
    import subprocess
    import sys

    from helpers import env_with

    out = subprocess.run(
        [sys.executable, "-c", "import ctmon, sys; ctmon.step(); print(ctmon.active(), 'torch' in sys.modules)"],
        capture_output=True, text=True, env=env_with(),
    )
    assert out.returncode == 0 and out.stdout.strip() == "False False"


def test_recording_keeps_every_step_of_a_firehose(tmp_path):
    """Far above 100k steps/s: every boundary reaches the recording, none dropped."""
    n = 400_000
    script = tmp_path / "firehose.py"
    script.write_text(
        "import sys, time, ctmon\n"
        "n = int(sys.argv[1])\n"
        "t0 = time.perf_counter()\n"
        "for _ in range(n):\n"
        "    ctmon.step()\n"
        "print('RATE', n / (time.perf_counter() - t0))\n"
    )
    run = record(tmp_path, [str(script), str(n)], torch_trace=False)
    assert run.returncode == 0, run.proc.stderr
    rate = float(run.proc.stdout.split("RATE")[1])
    assert rate > 100_000, rate  # the premise: this loop really is a firehose
    rep = run.report()
    assert rep["steps"]["count"] == n
    assert rep["drops"]["steps"] == 0
    batches = [e for e in run.events() if e["kind"] == "steps"]
    assert sum(len(e["ns"]) for e in batches) == n
    assert max(len(e["ns"]) for e in batches) <= 8192
