"""What ctmon's hook costs the monitored job.

Four measurements, each printed as JSON and as a Markdown table row:

  steady     in-process, hook on vs off, interleaved: the per-step cost of the
             step hooks (optimizer post-hook, compiled-call enter hook,
             ctmon.step()) writing into a real shared-memory ring. Each round
             times many steps; rounds alternate on/off; the figure is the
             median of per-pair differences.
  train      in-process, a compiled training loop (~1 ms or ~10 ms a step),
             hook on vs off between rounds (on CUDA with the device timer
             recording CUDA events), rounds synchronised at their ends only.
  e2e        end to end: a compiled training loop run plainly and under
             `ctmon record`, alternating, several pairs; compares the loop's own
             steady step time (device-synchronised at the end on CUDA).
  compile    compile-time cost: the same compile-heavy script with no hook,
             under ctmon, and with TORCH_TRACE, interleaved; compares the
             script's own time-to-first-result.
  firehose   a loop calling ctmon.step() as fast as it can under
             `ctmon record`: the recording must keep every step.

Usage:
  python benchmarks/hook_overhead.py steady   [--device cpu|cuda] [--pairs 9]
  python benchmarks/hook_overhead.py train    [--device cpu|cuda] [--pairs 9] [--step-ms 1]
  python benchmarks/hook_overhead.py e2e      [--device cpu|cuda] [--pairs 5] [--step-ms 1]
  python benchmarks/hook_overhead.py compile  [--device cpu|cuda] [--reps 5]
  python benchmarks/hook_overhead.py firehose [--steps 1000000]
  python benchmarks/hook_overhead.py all      [--device ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _machine() -> dict[str, object]:
    import platform

    import torch

    info: dict[str, object] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


# ----------------------------------------------------------------- steady


def steady(device: str, pairs: int, steps_per_round: int) -> dict[str, object]:
    import torch

    from ctmon.agent.core import Agent
    from ctmon.agent.torch_hooks import install
    from ctmon.wire.ring import StepRing

    tmp = tempfile.mkdtemp(prefix="ctmon-bench-")
    agent = Agent(None)  # no supervisor: events are dropped, hooks run for real
    agent.clock.attach_ring(StepRing.create(os.path.join(tmp, "steps.ring")))
    install(agent, torch)
    from ctmon.agent.torch_hooks import dynamo_enter_hooks

    dev = torch.device(device)
    results: dict[str, object] = {"device": device, "pairs": pairs, "steps_per_round": steps_per_round}

    # 1. optimizer.step() on a tiny parameter: the hook's absolute cost.
    p = torch.nn.Parameter(torch.zeros(1, device=dev))
    p.grad = torch.zeros(1, device=dev)
    opt = torch.optim.SGD([p], lr=0.0)

    def opt_round(n: int) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter_ns() - t0) / n

    def set_opt_hook(on: bool) -> None:
        _set_optimizer_hook(agent, on)

    results["optimizer_step_ns"] = _pairs(opt_round, set_opt_hook, pairs, steps_per_round)

    # 2. a compiled function called at top level (inference loops).
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    compiled = torch.compile(f, backend="eager")  # ctmon's enter hook is in its context's list
    hooks = dynamo_enter_hooks(compiled)
    assert hooks is not None
    ours = hooks[-1]
    x = torch.zeros(1, device=dev)
    compiled(x)

    def call_round(n: int) -> float:
        fn = compiled
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn(x)
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter_ns() - t0) / n

    def set_call(on: bool) -> None:
        agent.clock.rank = -1
        if on and ours not in hooks:
            hooks.append(ours)
        elif not on and ours in hooks:
            hooks.remove(ours)

    set_opt_hook(False)
    agent.clock.rank, agent.clock.count = -1, 0
    results["compiled_call_ns"] = _pairs(call_round, set_call, pairs, max(1000, steps_per_round // 10))

    # 3. ctmon.step() itself (the explicit API).
    import ctmon
    from ctmon import _api

    impl = agent.clock.api_step

    def api_round(n: int) -> float:
        step = ctmon.step
        t0 = time.perf_counter_ns()
        for _ in range(n):
            step()
        return (time.perf_counter_ns() - t0) / n

    def set_api(on: bool) -> None:
        _api._step_impl = impl if on else None

    results["ctmon_step_ns"] = _pairs(api_round, set_api, pairs, steps_per_round)

    # 4. The hooks' own work, called directly: exactly what a step pays on the
    # host, without the 15-30 us of an optimizer step's noise around it.
    clock = agent.clock
    clock.rank, clock.count, clock._opt_key = -1, 0, None
    hook = clock.optimizer_hook()  # what torch calls after each optimizer.step()
    no_args: tuple[()] = ()
    no_kwargs: dict[str, object] = {}

    def direct(fn, n: int) -> float:  # type: ignore[no-untyped-def]
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        return (time.perf_counter_ns() - t0) / n

    def empty() -> None:
        return None

    def call_hook() -> None:
        hook(opt, no_args, no_kwargs)

    enter = clock.call_hook(12345)  # what PyTorch's wrapper runs around each compiled call

    def enter_and_leave() -> None:
        enter()()

    rounds = {"optimizer_hook": [], "compiled_call_hook": [], "baseline_call": []}
    for _ in range(pairs):
        rounds["baseline_call"].append(direct(empty, 200_000))
        rounds["optimizer_hook"].append(direct(call_hook, 200_000))
        clock.rank, clock.count = -1, 0
        rounds["compiled_call_hook"].append(direct(enter_and_leave, 200_000))
        clock.rank = 1
    base = statistics.median(rounds["baseline_call"])
    results["direct_ns"] = {
        "optimizer_hook_call": round(statistics.median(rounds["optimizer_hook"]), 1),
        # enter + leave, both counted: the call's own cost is in them
        "compiled_call_hook": round(statistics.median(rounds["compiled_call_hook"]), 1),
        "python_call_baseline": round(base, 1),
    }
    return results


def _set_optimizer_hook(agent, on: bool) -> None:  # type: ignore[no-untyped-def]
    from torch.optim.optimizer import register_optimizer_step_post_hook

    clock = agent.clock
    if on and agent.optimizer_hook is None:
        agent.optimizer_hook = register_optimizer_step_post_hook(clock.optimizer_hook())
        clock.set_global_hook(agent.optimizer_hook.hooks_dict_ref(), agent.optimizer_hook.id)
    elif not on and agent.optimizer_hook is not None:
        clock.set_global_hook(None)
        agent.optimizer_hook.remove()
        agent.optimizer_hook = None


def _pairs(run_round, toggle, pairs: int, n: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    toggle(True)
    run_round(n)  # warm-up
    toggle(False)
    run_round(n)
    on_t, off_t, diffs = [], [], []
    for i in range(pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        got = {}
        for state in order:
            toggle(state)
            got[state] = run_round(n)
        on_t.append(got[True])
        off_t.append(got[False])
        diffs.append(got[True] - got[False])
    toggle(True)
    return {
        "off_median": round(statistics.median(off_t), 4),
        "on_median": round(statistics.median(on_t), 4),
        "cost_median": round(statistics.median(diffs), 4),
        "cost_min": round(min(diffs), 4),
        "cost_max": round(max(diffs), 4),
    }


# ------------------------------------------------------------------ train


def train(device: str, pairs: int, step_ms: float) -> dict[str, object]:
    import torch

    from ctmon.agent.core import Agent
    from ctmon.agent.torch_hooks import install
    from ctmon.wire.ring import StepRing

    tmp = tempfile.mkdtemp(prefix="ctmon-bench-")
    agent = Agent(None)
    agent.clock.attach_ring(StepRing.create(os.path.join(tmp, "steps.ring")))
    install(agent, torch)
    torch.manual_seed(0)
    backend = "inductor" if device == "cuda" else "aot_eager"

    def build(width: int, batch: int):  # type: ignore[no-untyped-def]
        layers: list[torch.nn.Module] = []
        for _ in range(4):
            layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
        model = torch.nn.Sequential(*layers).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if device == "cuda" else {}))
        cmodel = torch.compile(model, backend=backend)
        x = torch.randn(batch, width, device=device)

        def step() -> None:
            if device == "cuda":
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = cmodel(x).float().pow(2).mean()
            else:
                loss = cmodel(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    def timed(step, n: int) -> float:  # type: ignore[no-untyped-def]
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n * 1000

    # calibrate once: step time grows about linearly with the batch
    width, batch = (1024, 4096) if device == "cuda" else (128, 64)
    step = build(width, batch)
    for _ in range(5):
        step()
    t = timed(step, 20)
    if not 0.8 * step_ms <= t <= 1.25 * step_ms:
        batch = max(8, int(batch * step_ms / t))
        step = build(width, batch)
        for _ in range(5):
            step()
    n = max(50, int(1500 / step_ms))

    def set_hook(on: bool) -> None:
        _set_optimizer_hook(agent, on)

    res = _pairs(lambda k: timed(step, k), set_hook, pairs, n)
    timer = agent.clock.timer
    return {
        "device": device,
        "width": width,
        "batch": batch,
        "steps_per_round": n,
        "step_ms_off": res["off_median"],
        "step_ms_on": res["on_median"],
        "overhead_pct_median": round(res["cost_median"] / res["off_median"] * 100, 3),
        "overhead_pct_range": [
            round(res["cost_min"] / res["off_median"] * 100, 3),
            round(res["cost_max"] / res["off_median"] * 100, 3),
        ],
        "device_timer_active": timer is not None,
    }


# -------------------------------------------------------------------- e2e

E2E_LOOP = r"""
import json, sys, time, torch
device, steps, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
layers = []
for _ in range(4):
    layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
backend = "inductor" if device == "cuda" else "aot_eager"
cmodel = torch.compile(model, backend=backend)
x = torch.randn(max(256, 2 * width) if device == "cuda" else 256, width, device=device)
def step():
    cmodel(x).float().pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
for _ in range(20):
    step()
if device == "cuda":
    torch.cuda.synchronize()
# Steady state: no sync inside the timed region (as a real loop), one at the end.
t0 = time.perf_counter()
for _ in range(steps):
    step()
if device == "cuda":
    torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / steps * 1000
print("RESULT " + json.dumps({"step_ms": dt}))
"""


def e2e(device: str, pairs: int, step_ms: float) -> dict[str, object]:
    tmp = tempfile.mkdtemp(prefix="ctmon-bench-")
    script = os.path.join(tmp, "loop.py")
    with open(script, "w") as f:
        f.write(E2E_LOOP)
    width = _calibrate_width(script, device, step_ms)
    steps = max(200, int(3000 / step_ms))
    plain_t, ctmon_t, rel = [], [], []
    for i in range(pairs):
        order = ("plain", "ctmon") if i % 2 == 0 else ("ctmon", "plain")
        got = {}
        for kind in order:
            got[kind] = _run_loop(script, device, steps, width, kind, tmp)
        plain_t.append(got["plain"])
        ctmon_t.append(got["ctmon"])
        rel.append((got["ctmon"] - got["plain"]) / got["plain"] * 100)
    return {
        "device": device,
        "width": width,
        "steps": steps,
        "plain_step_ms_median": round(statistics.median(plain_t), 4),
        "ctmon_step_ms_median": round(statistics.median(ctmon_t), 4),
        "overhead_pct_median": round(statistics.median(rel), 3),
        "overhead_pct_all": [round(r, 3) for r in rel],
    }


def _run_loop(script: str, device: str, steps: int, width: int, kind: str, tmp: str) -> float:
    args = [script, device, str(steps), str(width)]
    if kind == "ctmon":
        cmd = [sys.executable, "-m", "ctmon", "record", "-q", "-o", os.path.join(tmp, "rec.jsonl"), *args]
    else:
        cmd = [sys.executable, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return float(json.loads(line[7:])["step_ms"])
    raise RuntimeError(f"loop failed ({kind}): {out.stderr[-2000:]}")


def _calibrate_width(script: str, device: str, step_ms: float) -> int:
    """Pick the layer width whose step takes about step_ms."""
    tmp = os.path.dirname(script)
    width = 256
    for _ in range(6):
        t = _run_loop(script, device, 50, width, "plain", tmp)
        if 0.8 * step_ms <= t <= 1.25 * step_ms:
            break
        scale = (step_ms / t) ** 0.5
        width = max(64, int(width * scale) // 64 * 64)
    return width


# ---------------------------------------------------------------- compile

COMPILE_SCRIPT = r"""
import json, sys, time, torch
device = sys.argv[1]
backend = "inductor" if device == "cuda" else "aot_eager"
torch.manual_seed(0)
class Block(torch.nn.Module):
    def __init__(s, d):
        super().__init__()
        s.ln = torch.nn.LayerNorm(d); s.fc1 = torch.nn.Linear(d, 4 * d); s.fc2 = torch.nn.Linear(4 * d, d)
    def forward(s, x):
        return x + s.fc2(torch.nn.functional.gelu(s.fc1(s.ln(x))))
model = torch.nn.Sequential(*[Block(256) for _ in range(6)]).to(device)
opt = torch.optim.AdamW(model.parameters())
cmodel = torch.compile(model, backend=backend, dynamic=False)
t0 = time.perf_counter()
for seq in (64, 96, 128):            # three shapes: a compile and two recompiles
    x = torch.randn(8, seq, 256, device=device)
    cmodel(x).sum().backward()
    opt.step(); opt.zero_grad()
if device == "cuda":
    torch.cuda.synchronize()
print("RESULT " + json.dumps({"compile_s": time.perf_counter() - t0}))
"""


def compile_cost(device: str, reps: int, demo: bool = False) -> dict[str, object]:
    """Time to first result (or, with demo=True, the whole run of demo 1 for 3
    steps, which its compile dominates) with no hook, ctmon, and TORCH_TRACE."""
    tmp = tempfile.mkdtemp(prefix="ctmon-bench-")
    script = os.path.join(tmp, "compile.py")
    with open(script, "w") as f:
        f.write(COMPILE_SCRIPT)
    if demo:
        script = os.path.join(ROOT, "demos", "gpt_baseline.py")
    kinds = ("plain", "ctmon", "torch_trace")
    times: dict[str, list[float]] = {k: [] for k in kinds}
    walls: dict[str, list[float]] = {}
    for i in range(reps):
        order = kinds[i % 3 :] + kinds[: i % 3]
        for kind in order:
            env = _env()
            env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"  # every run compiles for real
            args = ["--device", device, "--steps", "3"] if demo else [device]
            if kind == "ctmon":
                cmd = [
                    sys.executable,
                    "-m",
                    "ctmon",
                    "record",
                    "-q",
                    "-o",
                    os.path.join(tmp, "rec.jsonl"),
                    script,
                    *args,
                ]
            else:
                cmd = [sys.executable, script, *args]
            if kind == "torch_trace":
                env["TORCH_TRACE"] = os.path.join(tmp, f"trace{i}")
            t0 = time.perf_counter()
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
            wall = time.perf_counter() - t0
            if demo:
                # the demo's own first step (its compile), so ctmon's supervisor
                # start-up is not counted as compile cost; the wall time is kept too
                m = re.search(r"first step ([\d.]+) (ms|s)\b", out.stdout)
                if out.returncode != 0 or m is None:
                    raise RuntimeError(f"{kind} failed: {out.stderr[-2000:]}")
                times[kind].append(float(m.group(1)) / (1000 if m.group(2) == "ms" else 1))
                walls.setdefault(kind, []).append(round(wall, 2))
                continue
            for line in out.stdout.splitlines():
                if line.startswith("RESULT "):
                    times[kind].append(json.loads(line[7:])["compile_s"])
                    break
            else:
                raise RuntimeError(f"{kind} failed: {out.stderr[-2000:]}")
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "device": device,
        "reps": reps,
        "workload": "demos/gpt_baseline.py --steps 3: its first step (compile)"
        if demo
        else "compile script (time to first result)",
        "wall_s": walls or None,
        "median_s": {k: round(v, 3) for k, v in med.items()},
        "ctmon_vs_plain_pct": round((med["ctmon"] - med["plain"]) / med["plain"] * 100, 2),
        "torch_trace_vs_plain_pct": round((med["torch_trace"] - med["plain"]) / med["plain"] * 100, 2),
        "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
    }


# --------------------------------------------------------------- firehose

FIREHOSE = r"""
import sys, time, ctmon
n = int(sys.argv[1])
step = ctmon.step
t0 = time.perf_counter()
for _ in range(n):
    step()
dt = time.perf_counter() - t0
print(f"RESULT {n} {n / dt:.0f}")
"""


def firehose(steps: int) -> dict[str, object]:
    tmp = tempfile.mkdtemp(prefix="ctmon-bench-")
    script = os.path.join(tmp, "firehose.py")
    with open(script, "w") as f:
        f.write(FIREHOSE)
    rec = os.path.join(tmp, "rec.jsonl")
    out = subprocess.run(
        [sys.executable, "-m", "ctmon", "record", "-q", "-o", rec, script, str(steps)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    rate = None
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            rate = float(line.split()[2])
    rep = subprocess.run(
        [sys.executable, "-m", "ctmon", "report", rec, "--json"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    report = json.loads(rep.stdout)
    return {
        "steps_called": steps,
        "steps_per_s": rate,
        "steps_recorded": report["steps"]["count"],
        "dropped": report["drops"]["steps"],
        "recording_bytes": os.path.getsize(rec),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["steady", "train", "e2e", "compile", "firehose", "all"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--steps-per-round", type=int, default=20000)
    ap.add_argument("--step-ms", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--demo", action="store_true", help="compile: time demo 1 (gpt_baseline) instead")
    a = ap.parse_args()
    out: dict[str, object] = {"machine": _machine()}
    if a.what in ("steady", "all"):
        out["steady"] = steady(a.device, a.pairs, a.steps_per_round)
    if a.what in ("train", "all"):
        out["train"] = train(a.device, a.pairs, a.step_ms)
    if a.what in ("e2e", "all"):
        out["e2e"] = e2e(a.device, max(3, a.pairs // 2), a.step_ms)
    if a.what in ("compile", "all"):
        out["compile"] = compile_cost(a.device, a.reps, a.demo)
    if a.what in ("firehose", "all"):
        out["firehose"] = firehose(a.steps)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
