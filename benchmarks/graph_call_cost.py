"""What counting and timing the compiled graphs' calls costs a step.

ctmon puts a counter, and in its timing windows a timing wrapper around
that, in the place of each graph function Dynamo installs
(ctmon/agent/graph_calls.py). This runs a compiled loop under ``ctmon
record`` and, in one process, alternates short blocks of steps with the
graphs plain, counted, and counted and timed in the module globals (in a fresh random order per pair of blocks), timing every
step's host time (no device sync inside a block: what the host spends
issuing it). Medians per step are robust to the rounds' noise that hides
a µs-sized effect in round means; the paired per-block differences of
medians get a bootstrap 95 % interval.

    python benchmarks/graph_call_cost.py [--device cuda] [--task train|infer] [--mode MODE] [--size N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def job(args: argparse.Namespace) -> None:
    import torch

    sys.path.insert(0, HERE)
    from hook_cost_job import build, graph_calls

    step, _ = build(args.loop, args.device, args.size, args.task, args.mode)
    for _ in range(30):
        step()
    import ctmon

    clock = ctmon._api._step_impl.__self__  # type: ignore[union-attr]
    calls = graph_calls(clock)
    graphs = list(calls.graphs) if calls is not None else []
    if not graphs:
        raise SystemExit("graph_call_cost: no counted graphs (run it under ctmon record, hotness on)")
    clock.each_second = None  # the arms, not ctmon's timing windows, say what is in place
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    rnd = random.Random(0)
    per_block: dict[str, list[float]] = {"plain": [], "counted": [], "wrapped": []}
    every: dict[str, list[int]] = {"plain": [], "counted": [], "wrapped": []}
    clock = time.perf_counter_ns
    for _ in range(args.blocks):
        arms = ["plain", "counted", "wrapped"]
        rnd.shuffle(arms)
        for arm in arms:
            for g in graphs:
                g.scope[g.name] = {"plain": g.counted.__wrapped__, "counted": g.counted, "wrapped": g.timed}[arm]
            for _ in range(5):
                step()
            sync()
            times = []
            for _ in range(args.steps):
                t0 = clock()
                step()
                times.append(clock() - t0)
            sync()
            per_block[arm].append(statistics.median(times) / 1000)
            every[arm] += times
    print(
        "RESULT "
        + json.dumps(
            {
                "graphs": len(graphs),
                "per_block_median_us": per_block,
                "median_us": {a: statistics.median(v) / 1000 for a, v in every.items()},
            }
        ),
        flush=True,
    )


def median_ci(values: list[float], rnd: random.Random, n: int = 2000) -> tuple[float, float, float]:
    boots = sorted(statistics.median(rnd.choices(values, k=len(values))) for _ in range(n))
    return statistics.median(values), boots[int(0.025 * n)], boots[int(0.975 * n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--loop", default="gpu", choices=["host", "gpu"])
    ap.add_argument("--task", default="train", choices=["train", "infer"])
    ap.add_argument("--mode", default=None)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--blocks", type=int, default=200)
    ap.add_argument("--steps", type=int, default=50, help="steps per block")
    args = ap.parse_args()
    if args.job:
        job(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "ctmon", "record", "-q", "-o", os.path.join(tmp, "rec.jsonl"), "--"]
        cmd += [sys.executable, __file__, "--job", "--device", args.device, "--loop", args.loop, "--task", args.task]
        cmd += ["--size", str(args.size), "--blocks", str(args.blocks), "--steps", str(args.steps)]
        cmd += ["--mode", args.mode] if args.mode else []
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(out.stdout[-2000:] + out.stderr[-3000:])
    res = json.loads(line[len("RESULT ") :])
    blocks = res["per_block_median_us"]
    plain = blocks["plain"]
    base = statistics.median(plain)
    costs = {}
    for arm in ("counted", "wrapped"):
        med, lo, hi = median_ci([w - p for w, p in zip(blocks[arm], plain, strict=True)], random.Random(1))
        costs[arm] = {
            "us_median": round(med, 3),
            "us_ci95": [round(lo, 3), round(hi, 3)],
            "pct": round(med / base * 100, 3),
        }
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "device": args.device,
        "loop": args.loop,
        "task": args.task,
        "mode": args.mode,
        "size": args.size,
        "graphs_wrapped": res["graphs"],
        "blocks": args.blocks,
        "steps_per_block": args.steps,
        "host_us_per_step_plain": round(base, 2),
        "block_spread_pct": round(statistics.stdev(plain) / statistics.fmean(plain) * 100, 2),
        "cost_counted": costs["counted"],  # the graphs' counters (outside a timing window)
        "cost_wrapped": costs["wrapped"],  # counter and timing wrapper (inside one)
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
