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
