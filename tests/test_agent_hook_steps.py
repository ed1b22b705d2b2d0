"""Step boundaries found with no code change, checked against the script's own clock."""

from __future__ import annotations

import statistics

import pytest
from helpers import assert_matches_torch_trace, record, workload

pytestmark = pytest.mark.slow  # real compiled jobs under ctmon record


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
        capture_output=True,
        text=True,
        env=env_with(),
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


def test_a_compiled_call_is_one_step_whatever_runs_inside_it(tmp_path):
    """A compiled training step that calls another compiled function and steps
    the optimizer (both after a graph break, so they run through PyTorch's
    wrappers and hooks) is one boundary per call, from the outer call."""
    script = tmp_path / "nested.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(4, 4)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "inner = torch.compile(lambda y: y * 2, backend='eager')\n"
        "@torch.compile(backend='eager')\n"
        "def train_step(x):\n"
        "    loss = m(x).sum()\n"
        "    torch._dynamo.graph_break()\n"
        "    loss = inner(loss)\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
        "for _ in range(7):\n"
        "    train_step(torch.randn(2, 4))\n"
    )
    run = record(tmp_path, [str(script)])
    assert run.returncode == 0, run.proc.stderr
    rep = run.report()
    assert_matches_torch_trace(rep, run.trace())
    assert rep["steps"]["source"] == "compiled_call"
    assert rep["steps"]["count"] == 7


def test_a_compiled_optimizer_step_is_the_optimizers_step(tmp_path):
    """torch.compile(opt.step): its calls are that optimizer's steps (the
    optimizer source), counted once each though the step also runs hooks."""
    run = record(tmp_path, [workload("unchanged.py"), "opt_step", "9"])
    assert run.returncode == 0, run.proc.stderr
    rep = run.report()
    assert_matches_torch_trace(rep, run.trace())
    assert rep["steps"]["source"] == "optimizer"
    assert rep["steps"]["count"] == 9


def test_a_compiled_call_that_raises_leaves_the_optimizer_hook_in_place(tmp_path):
    """The compiled call's exit hook runs however the call ends: after one
    raised, optimizer steps are counted again."""
    script = tmp_path / "raises.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(4, 4)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "@torch.compile(backend='eager')\n"
        "def check(x):\n"
        "    if x.sum() > -1e9:\n"
        "        raise ValueError('bad batch')\n"
        "try:\n"
        "    check(torch.zeros(2))\n"
        "except ValueError:\n"
        "    pass\n"
        "for _ in range(5):\n"
        "    m(torch.randn(2, 4)).sum().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
    )
    steps = _recorded_steps(script)
    assert steps["source"] == "optimizer"
    assert steps["count"] == 5


def test_only_calls_that_may_step_an_optimizer_hand_its_hook_off(tmp_path):
    """A compiled function may trace ``opt.step``: for its call ctmon's
    optimizer hook is out of torch's dict (Dynamo sees the plain program's).
    A compiled module's forward steps no optimizer, so its calls leave the
    dict alone, and its hook retires once the optimizer is the clock (the
    cheaper step path); steps are counted the same."""
    script = tmp_path / "hand_off.py"
    script.write_text(
        "import torch\n"
        "from torch.optim.optimizer import _global_optimizer_post_hooks as hooks\n"
        "seen = {}\n"
        "@torch._dynamo.disable\n"
        "def probe(name):\n"
        "    seen[name] = len(hooks)\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        probe('module')\n"
        "        return self.lin(x)\n"
        "@torch.compile(backend='eager')\n"
        "def function(x):\n"
        "    probe('function')\n"
        "    return x * 2\n"
        "net = Net()\n"
        "model = torch.compile(net, backend='eager')\n"
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "for _ in range(6):\n"
        "    model(function(torch.randn(2, 4))).sum().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
        "print('SEEN', seen['module'], seen['function'], len(hooks))\n"
        "from ctmon.agent.torch_hooks import dynamo_enter_hooks\n"
        "def ours(c):\n"
        "    return sum('call_hook' in h.__qualname__ for h in dynamo_enter_hooks(c))\n"
        "print('HOOKS', ours(model), ours(function))\n"
    )
    run = record(tmp_path, [str(script)], torch_trace=False)
    assert run.returncode == 0, run.proc.stderr
    assert "SEEN 1 0 1" in run.proc.stdout, run.proc.stdout
    # once the optimizer is the clock, the module's enter hook has taken
    # itself out; the function's stays (it may yet trace an optimizer step)
    assert "HOOKS 0 1" in run.proc.stdout, run.proc.stdout
    steps = run.report()["steps"]
    assert steps["source"] == "optimizer"
    assert steps["count"] == 6


def test_a_forked_child_writes_no_step(tmp_path):
    """A forked child shares the parent's step ring: its steps (a worker
    that runs an optimizer, say) must not be counted as the job's."""
    script = tmp_path / "forks.py"
    script.write_text(
        "import os, time, torch, ctmon\n"
        "m = torch.nn.Linear(4, 4)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "def steps(n):\n"
        "    for _ in range(n):\n"
        "        m(torch.randn(2, 4)).sum().backward()\n"
        "        opt.step(); opt.zero_grad()\n"
        "steps(4)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    steps(20); ctmon.step()\n"
        "    time.sleep(1.0)  # the monitor reads the ring meanwhile\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "steps(3)\n"
    )
    steps = _recorded_steps(script)
    assert steps["source"] == "optimizer"
    assert steps["count"] == 7


def _recorded_steps(script):
    """The report's steps of ``script`` recorded (it must exit 0)."""
    run = record(script.parent, [str(script)], torch_trace=False)
    assert run.returncode == 0, run.proc.stderr
    return run.report()["steps"]
