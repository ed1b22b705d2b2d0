"""What ctmon's hook costs a step, resolved to a fraction of a percent.

Whole-run A/B tests (``hook_overhead.py e2e``) cannot resolve this: two runs
of the same job differ by a few percent on their own. Here one job runs
under ``ctmon record`` and times many short rounds in three arms -- nothing
of ctmon running, the step path, the step path plus the hotness sampler --
in a fresh random order within each block of three (hook_cost_job.py). The
figure is the median over blocks of each arm's paired difference from
``off`` in the same block, with a distribution-free 95 % interval (the order
statistics that Binomial(n, 1/2) puts around the median), and the mean with
its 95 % interval beside it. Host-bound and GPU-bound loops are run apart:
where the GPU sets the pace the host's extra time is hidden.

With ``--ranks N`` the job is started by torchrun and every rank runs its
rounds at the same time (no collective in a round): the cost per rank.

Usage:
  python benchmarks/hook_cost.py [--loop host|gpu|both] [--device cpu|cuda]
      [--task train|infer] [--mode MODE] [--size N]
      [--step-ms 1] [--round-ms 150] [--blocks 200] [--ranks N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "benchmarks", "hook_cost_job.py")


def median_ci(xs: list[float]) -> tuple[float, float, float]:
    """Median and its distribution-free 95 % interval."""
    d = sorted(xs)
    n, k, tail = len(d), 0, 0.0
    while k < n // 2 and tail + math.comb(n, k) / 2**n <= 0.025:
        tail += math.comb(n, k) / 2**n
        k += 1
    lo, hi = (d[k - 1], d[n - k]) if k else (d[0], d[-1])
    return statistics.median(d), lo, hi


def mean_ci(xs: list[float]) -> tuple[float, float, float]:
    m = statistics.fmean(xs)
    half = 1.96 * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else math.inf
    return m, m - half, m + half


def summarise(res: dict[str, object]) -> dict[str, object]:
    out = paired(res, "rounds")
    cpu = paired(res, "cpu_rounds")
    sender: dict[str, float] = res["sender_cpu_us_per_step"]  # type: ignore[assignment]
    for arm, figures in cpu.items():
        if isinstance(figures, dict) and isinstance(out.get(arm), dict):
            out[arm]["main_thread_cpu"] = figures  # type: ignore[index]
            out[arm]["sender_cpu_us_per_step"] = round(sender[arm], 2)  # type: ignore[index]
    out["cpu_step_ms_off"] = cpu["step_ms_off"]
    out["cpu_round_spread_pct"] = cpu["round_spread_pct"]
    return out


def paired(res: dict[str, object], key: str) -> dict[str, object]:
    rounds: dict[str, list[float]] = res[key]  # type: ignore[assignment]
    off = rounds["off"]
    out: dict[str, object] = {
        k: res.get(k)
        for k in (
            "rank",
            "loop",
            "task",
            "mode",
            "device",
            "size",
            "steps_per_round",
            "issue_share",
            "pinned_core",
            "graphs_timed",
        )
    }
    out["blocks"] = len(off)
    out["step_ms_off"] = round(statistics.median(off), 4)
    out["round_spread_pct"] = round(statistics.stdev(off) / statistics.fmean(off) * 100, 2)
    for arm in [a for a in rounds if a != "off"]:  # each arm beside 'off' of its block
        rel = [(a - b) / b * 100 for a, b in zip(rounds[arm], off, strict=True)]
        med, lo, hi = median_ci(rel)
        mean, mlo, mhi = mean_ci(rel)
        out[arm] = {
            "step_ms": round(statistics.median(rounds[arm]), 4),
            "cost_pct_median": round(med, 3),
            "cost_pct_median_ci95": [round(lo, 3), round(hi, 3)],
            "cost_pct_mean": round(mean, 3),
            "cost_pct_mean_ci95": [round(mlo, 3), round(mhi, 3)],
            "cost_us_median": round(med / 100 * statistics.median(off) * 1000, 2),
        }
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(args: argparse.Namespace, loop: str, tmp: str) -> list[dict[str, object]]:
    job = [JOB, "--loop", loop, "--device", args.device, "--step-ms", str(args.step_ms)]
    job += ["--round-ms", str(args.round_ms), "--blocks", str(args.blocks), "--arms", args.arms, "--task", args.task]
    job += ["--mode", args.mode] if args.mode else []
    job += ["--size", str(args.size)] if args.size else []
    if args.ranks:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.ranks)]
        launcher += ["--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
    else:
        launcher = [sys.executable]
    rec = os.path.join(tmp, f"{loop}.jsonl")
    cmd = [sys.executable, "-m", "ctmon", "record", "-q", "-o", rec, "--", *launcher, *job]
    if args.pin:
        job.append("--pin")
    if args.plain:
        cmd = [*launcher, *job, "--plain"]
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    got = [json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if len(got) != max(1, args.ranks) or out.returncode:
        raise SystemExit(f"hook_cost: the {loop} job failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    with open(os.path.join(tmp, f"{loop}-rounds.json"), "w") as f:
        json.dump(got, f)  # every round, for a second look
    return [summarise(r) for r in sorted(got, key=lambda r: r["rank"])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loop", choices=["host", "gpu", "both"], default="host")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--task", choices=["train", "infer"], default="train", help="see hook_cost_job.py")
    ap.add_argument("--mode", help="torch.compile's mode for the loop (default: its default)")
    ap.add_argument("--size", type=int, help="the loop's depth (host) or batch (gpu), instead of sizing it")
    ap.add_argument("--step-ms", type=float, default=1.0)
    ap.add_argument("--round-ms", type=float, default=150.0)
    ap.add_argument("--blocks", type=int, default=200)
    ap.add_argument("--arms", default="off,hooks,steps,all", help="which arms (off first): see hook_cost_job.py")
    ap.add_argument("--ranks", type=int, default=0, help="run under torchrun with this many ranks")
    ap.add_argument("--pin", action="store_true", help="each job's thread alone on a core (4 cores or more)")
    ap.add_argument("--plain", action="store_true", help="no ctmon: two arms that differ in name only (the noise)")
    ap.add_argument("--out", help="a folder for the raw rounds (default: a fresh temporary one)")
    args = ap.parse_args()
    loops = ["host", "gpu"] if args.loop == "both" else [args.loop]
    tmp = args.out or tempfile.mkdtemp(prefix="ctmon-hook-cost-")
    os.makedirs(tmp, exist_ok=True)
    results = []
    for loop in loops:
        t0 = time.monotonic()
        results += run(args, loop, tmp)
        print(f"{loop}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "ranks": args.ranks, "results": results}, indent=2))
    for r in results:
        for arm in [a for a in r if a in ("off2", "graphs", "hooks", "steps", "wake", "walk", "all")]:
            a = r[arm]
            print(
                f"| {r['loop']} {r['task']} {r['mode'] or ''} | rank {r['rank']} | {arm} | {r['step_ms_off']} ms | "
                f"{a['cost_pct_median']:+.2f} % [{a['cost_pct_median_ci95'][0]:+.2f}, {a['cost_pct_median_ci95'][1]:+.2f}] | "
                f"{a['cost_pct_mean']:+.2f} % [{a['cost_pct_mean_ci95'][0]:+.2f}, {a['cost_pct_mean_ci95'][1]:+.2f}] | "
                f"{a['cost_us_median']} µs |"
            )


if __name__ == "__main__":
    main()
