"""What ctmon's hook costs a step, step by step, where rounds are too noisy.

``hook_cost.py`` compares rounds of ~150 ms. On a virtual machine whose
rounds differ by 10 % or more on their own, hundreds of blocks leave its
interval at ±1 %. This measures the two parts of the cost apart, each
against its own neighbourhood, so slow drift (the host's other tenants,
clocks) cancels:

* **The step path** (the hooks, the device timer, the graphs' timing
  wrappers; the sender asleep). Phase 1 switches it in and out every
  ``--chunk`` steps, with no synchronisation, and compares each chunk's
  mean step time with the adjacent chunk's (the first two steps of a chunk
  are left out: the switch's own transient). Two figures: the mean of
  those paired differences over the mean step, with its interval (what a
  run's total time pays, rare costs included: the figure the total takes),
  and the median of the pairs' ratios with its distribution-free 95 %
  interval (narrower, but blind to a cost that comes rarely and large).
  ``--parts`` also switches parts of the path
  alone, each beside its own ``off`` chunk: ``hook`` (the step hooks),
  ``timer`` (the hooks and the device timer), ``graphs`` (the graphs'
  counters, as outside a timing window), ``timed`` (their timing wrappers,
  as inside one), ``counting`` and ``timing`` (the step hooks with the
  clock held in a counting stretch, or kept out of one), ``floor``: a
  post-hook that does nothing, what any Python hook costs, and
  ``c_counting``: what a stretch would cost were its count kept in C (not
  what ctmon does: docs/PERFORMANCE.md). In ``path`` and
  ``hook`` the step clock times TIMED_NS and counts the next COUNT_NS,
  and in ``path`` the graphs' timing windows are open a WINDOW_EVERY-th of
  the time, as in a fast loop (this loop's arms
  would otherwise dilute the rates that decide it).
* **The sender's wakes** (the flush, the hotness sample, the GIL changing
  hands). Phase 2 runs everything (``all``) with each wake's start (the
  sender holding the GIL again) and end logged, between stretches of the
  step path alone. For each wake the excess of the steps it overlaps (and
  the ``--after`` steps after it) over the median of the steps 10-50 away
  on either side is what the wake cost the job. The same excess measured at
  random moments of the stretches without wakes (a wake's length each)
  is the estimator's own bias -- a longer step is likelier to overlap a
  moment -- and is subtracted. Cost per second = cost per wake x wakes per
  second.
* **The job thread's own occasional work** (the clock's once-a-second
  check, a counting stretch's end, a device-timer boundary that records or
  asks after a CUDA event). The chunks' median leaves any rare cost out, and
  in phase 1 such work would crowd into the path's chunks. So phase 2 logs
  each of these moments in the job's thread too, and costs it as a wake is
  costed, at the pace it keeps in a real run. A moment whose steps a wake's
  excess already holds (a stretch ends at the boundary after the flush that
  ended it) is counted once, in the wake's cost.

The total is the step path's mean, the wakes and the occasional work.
Where the mean sits above the median, ``rare_costs.py`` (phase 1's
collections and CUDA events, logged) says what the slow steps held.

Step times are the host's: a step's end is when the host has issued it.
Where the GPU sets the pace, the host's extra time may hide in its slack,
so these are upper bounds on what the step time pays.

Usage (the job runs under ``ctmon record``; the same options as hook_cost.py):
  python benchmarks/hook_cost_fine.py [--loop host|gpu] [--device cpu|cuda]
      [--task train|infer] [--mode MODE] [--size N] [--step-ms 1]
      [--seconds 60] [--path-share 0.5] [--parts path,hook,counting,timing,timer,graphs,timed,floor,c_counting]
      [--chunk 16] [--after 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import rare_costs
from hook_cost import mean_ci, median_ci  # this folder is on the path, as the script's own
from hook_cost_arms import JOB_MOMENTS, PARTS, TimedWake, log_job_moments, put_arm, timed_parts

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ---- statistics (the driver) ----


def chunk_costs(ends: list[int], arms: list[str], chunk: int) -> dict[str, list[tuple[float, float]]]:
    """Per part, per adjacent (part, off) pair of chunks: the part's mean
    step and the off chunk's, in ns."""
    means: list[tuple[str, float]] = []
    for c, arm in enumerate(arms):
        lo, hi = c * chunk + 2, (c + 1) * chunk  # steps lo+1..hi, each ends[i] - ends[i-1]
        if hi >= len(ends):
            break
        means.append((arm, (ends[hi] - ends[lo]) / (hi - lo)))
    out: dict[str, list[tuple[float, float]]] = {}
    for (a1, m1), (a2, m2) in zip(means[::2], means[1::2], strict=False):
        (part, on), off = ((a1, m1), m2) if a2 == "off" else ((a2, m2), m1)
        out.setdefault(part, []).append((on, off))
    return out


def excess(ends: list[int], lo_i: int, hi_i: int, s: int, e: int, after: int) -> float | None:
    """ns the steps overlapping [s, e] (and ``after`` more) took beyond the
    median step 10-50 steps away on both sides, within ends[lo_i:hi_i]."""
    import bisect

    first = bisect.bisect_right(ends, s, lo_i, hi_i)  # the first step ending after s
    last = min(bisect.bisect_left(ends, e, lo_i, hi_i) + after, hi_i - 1)
    if first - 50 < lo_i + 1 or last + 50 >= hi_i or first >= hi_i:
        return None
    near = [ends[i] - ends[i - 1] for r in (range(first - 50, first - 10), range(last + 11, last + 51)) for i in r]
    base = statistics.median(near)
    return sum(ends[i] - ends[i - 1] - base for i in range(first, last + 1))


def _overlaps(spans: list[tuple[int, int]], s: int, e: int) -> bool:
    """Whether [s, e] overlaps any of ``spans`` (sorted by start)."""
    import bisect

    i = bisect.bisect_right(spans, (e, 1 << 62))  # the spans that start by e
    return any(s <= b for _, b in spans[max(0, i - 8) : i])


def moment_costs(res: dict[str, Any], after: int, which: str, arms: tuple[str, ...], seed: int = 0) -> dict[str, Any]:
    """What each logged moment of kind ``which`` cost the job: the excess of
    the steps it overlaps over their neighbours, less the same excess at
    random moments of the ``quiet`` stretches (the estimator's own bias),
    times how often such moments come."""
    rnd = random.Random(seed)
    ends = res["ends"]
    real: list[float] = []
    holds: list[int] = []
    quiet: list[tuple[int, int]] = []  # index ranges of the stretches without wakes
    busy = sorted((s, e) for st in res["stretches"] for s, e, _ in st.get("job", []))  # the job thread's own
    seconds = 0.0
    beside = 0  # moments in a wake's cost
    step = statistics.median(b - a for a, b in zip(ends[:2000], ends[1:2001], strict=False))
    margin = int((after + 2) * step)
    for st in res["stretches"]:
        lo, hi = st["lo"], st["hi"]
        if st["arm"] == "quiet":
            quiet.append((lo, hi))
        if st["arm"] not in arms:
            continue
        seconds += (ends[hi - 1] - ends[lo]) / 1e9
        spans = st["wakes"] if which == "wake" else [(s, e) for s, e, k in st.get("job", []) if k == which]
        if which != "wake":
            # A moment whose steps a wake's excess already holds (a counting
            # stretch ends at the boundary after the flush that ended it) is
            # in the wake's cost: counted once, there.
            wakes = sorted((s, e) for s, e in st["wakes"])
            alone = [(s, e) for s, e in spans if not _overlaps(wakes, s - margin, e + margin)]
            beside += len(spans) - len(alone)
            spans = alone
        for s, e in spans:
            holds.append(e - s)
            x = excess(ends, lo, hi, s, e, after)
            if x is not None:
                real.append(x)
    null: list[float] = []
    for _ in range(min(8000, max(400, 4 * len(holds)))):  # four random moments per moment (400 to 8,000)
        h = rnd.choice(holds) if holds else 0
        lo, hi = rnd.choice(quiet)
        s = rnd.randint(ends[lo], ends[hi - 1])
        if _overlaps(busy, s - 1_000_000, s + h + 5_000_000):
            continue  # a moment beside the job's own logged work measures that, not the bias
        x = excess(ends, lo, hi, s, s + h, after)
        if x is not None:
            null.append(x)
    rate = len(holds) / seconds if seconds else 0.0
    if len(real) < 2 or len(null) < 2:
        return {
            "moments": len(holds),
            "beside_wakes": beside,
            "per_s": round(rate, 2),
            "cost_pct": 0.0,
            "cost_pct_ci95": [0.0, 0.0],
        }
    m_r, v_r = statistics.fmean(real), statistics.variance(real)
    m_n, v_n = statistics.fmean(null), statistics.variance(null)
    per = m_r - m_n
    half = 1.96 * math.sqrt(v_r / len(real) + v_n / len(null))
    return {
        "moments": len(holds),
        "beside_wakes": beside,
        "per_s": round(rate, 2),
        "hold_us": {q: round(v / 1e3, 1) for q, v in _quantiles(holds).items()},
        "excess_us_each": round(m_r / 1e3, 1),
        "null_excess_us": round(m_n / 1e3, 1),
        "cost_us_each": round(per / 1e3, 1),
        "cost_us_each_ci95": [round((per - half) / 1e3, 1), round((per + half) / 1e3, 1)],
        "cost_pct": round(per * rate / 1e7, 3),
        "cost_pct_ci95": [round((per - half) * rate / 1e7, 3), round((per + half) * rate / 1e7, 3)],
        "excess_median_us": round(statistics.median(real) / 1e3, 1),
        "null_median_us": round(statistics.median(null) / 1e3, 1),
    }


def _quantiles(xs: list[Any]) -> dict[str, float]:
    d = sorted(xs)
    return {"p50": d[len(d) // 2], "p90": d[int(len(d) * 0.9)], "max": d[-1]}


def summarise(res: dict[str, Any], chunk: int, after: int) -> dict[str, Any]:
    ends = res["ends"]
    step = statistics.median(b - a for a, b in zip(ends, ends[1:], strict=False)) / 1e6
    out = {k: res[k] for k in ("loop", "task", "mode", "device", "size", "issue_share", "hotness", "graphs_timed")}
    out["step_ms"] = round(step, 4)
    for part, pairs in chunk_costs(res["path_ends"], res["path_arms"], chunk).items():
        # Two figures per part. The median of the pairs' ratios resolves
        # best, but a cost that comes rarely and large (a slow step now and
        # then) moves it little. The mean of their differences over the mean
        # off step is what a run's total time pays, rare costs and all (a
        # mean of ratios would not be: it leans up, as 1/x does). The total
        # takes the mean.
        med, lo, hi = median_ci([(on / off - 1) * 100 for on, off in pairs])
        per = 100 / statistics.fmean(off for _, off in pairs)
        mean, mlo, mhi = mean_ci([(on - off) * per for on, off in pairs])
        out[part] = {
            "pairs": len(pairs),
            "cost_pct_median": round(med, 3),
            "cost_pct_median_ci95": [round(lo, 3), round(hi, 3)],
            "cost_us_median": round(med / 100 * step * 1000, 2),
            "cost_pct_mean": round(mean, 3),
            "cost_pct_mean_ci95": [round(mlo, 3), round(mhi, 3)],
            "cost_us_mean": round(statistics.fmean(on - off for on, off in pairs) / 1e3, 2),
        }
    out["rare"] = rare_costs.summarise(res, chunk)
    out["wakes"] = moment_costs(res, after, "wake", ("all",))
    out["wakes"]["sender_us"] = {
        k: {q: round(x, 1) for q, x in _quantiles(v).items()} for k, v in res["sender_parts_us"].items() if v
    }
    # The job thread's own occasional work (the once-a-second check, a
    # counting stretch's end, a CUDA event's record): the chunks' median
    # leaves it out, as it leaves out any rare cost, so it is measured as the
    # wakes are, in the stretches where everything runs at its own pace
    # (the quiet ones park the sender, which ends the counting stretches).
    out["job"] = {k: moment_costs(res, after, k, ("all",)) for k in JOB_MOMENTS}
    if "path" in out:
        p = out["path"]
        parts = [(p["cost_pct_mean"], *p["cost_pct_mean_ci95"])]
        parts += [(m["cost_pct"], *m["cost_pct_ci95"]) for m in (out["wakes"], *out["job"].values())]
        out["total_pct"] = round(sum(x for x, _, _ in parts), 3)
        out["total_pct_ci95"] = [round(sum(lo for _, lo, _ in parts), 3), round(sum(hi for _, _, hi in parts), 3)]
    return out


# ---- the job (under ctmon record) ----


def job(args: argparse.Namespace) -> None:
    import torch
    from hook_cost_job import Switch, issue_share, sized

    from ctmon.agent import graph_calls, steps

    # The graphs timed a WINDOW_EVERY-th of the time and the steps counted in
    # stretches, as in a fast loop, whatever the arms leave of the rates
    # that decide it and from the start.
    graph_calls.FAST_CALLS_PER_S = 0
    steps.FAST_STEPS_PER_S, steps.WARM_NS = 0, 0
    torch.set_num_threads(1)
    step, cmodel, size, _ = sized(args.loop, args.device, args.step_ms, args.task, args.mode, args.size)
    switch = Switch(cmodel)
    ch = switch.channel
    clock = time.perf_counter_ns

    # Phase 1: the step path, or one part of it, in and out every chunk,
    # the sender asleep (set() wakes it once to take up its pace; a quiet
    # switch after that).
    switch.set("hooks")
    switch.set("off")
    time.sleep(0.1)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    rare_logs, stop_gc_log = rare_costs.install_logs(switch.timer or switch.clock.timer)
    parts = args.parts.split(",")
    path_arms: list[str] = []
    path_ends: list[int] = []
    rnd = random.Random(1)
    t_end = time.monotonic() + args.seconds * args.path_share
    sync()
    path_ends.append(clock())
    while time.monotonic() < t_end:
        part = rnd.choice(parts)
        for arm in [part, "off"] if rnd.random() < 0.5 else ["off", part]:
            put_arm(switch, arm)
            switch.clock.end_count()  # the sender's part, the sender asleep (a chunk's first steps are left out)
            path_arms.append(arm)
            for _ in range(args.chunk):
                step()
                path_ends.append(clock())
    put_arm(switch, "path")
    sync()
    stop_gc_log()

    # Phase 2: stretches of everything (wakes logged) and of the step path
    # alone (the sender asleep), a few seconds each.
    log: list[tuple[int, int]] = []
    job_log = log_job_moments(switch.clock)
    asleep, ch._wake = ch._wake, TimedWake(None)
    asleep.set()  # the sender leaves its old event's wait and takes up the new one
    stretches: list[dict[str, Any]] = []
    ends: list[int] = []
    sender_parts = timed_parts(switch, ch)
    t_end = time.monotonic() + args.seconds * (1 - args.path_share)
    while time.monotonic() < t_end:
        for arm in ("all", "quiet"):
            switch.set("hooks" if arm == "quiet" else "all")
            ch._wake.log = None if arm == "quiet" else log
            for _ in range(20):  # the sender takes up its pace
                step()
            log.clear()
            job_log.clear()
            lo = len(ends)
            stop = time.monotonic() + args.stretch_s
            while time.monotonic() < stop:
                step()
                ends.append(clock())
            wakes = [(s, e) for s, e in log if ends[lo] < s and e < ends[-1]]
            own = [(s, e, k) for s, e, k in job_log if ends[lo] < s and e < ends[-1]]
            stretches.append({"arm": arm, "lo": lo, "hi": len(ends), "wakes": wakes, "job": own})
    sync()
    switch.set("all")
    out = {
        "loop": args.loop,
        "task": args.task,
        "mode": args.mode,
        "device": args.device,
        "size": size,
        "issue_share": issue_share(step, args.device),
        "hotness": switch.sampler is not None,
        "graphs_timed": len(switch.graphs),
        "path_arms": path_arms,
        "path_ends": path_ends,
        "path_gc": rare_logs["gc"],
        "path_events": rare_logs["events"],
        "ends": ends,
        "stretches": stretches,
        "sender_parts_us": {k: [round(x / 1e3, 1) for x in v] for k, v in sender_parts.items()},
    }
    with open(args.dump, "w") as f:
        json.dump(out, f)
    print("DONE", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loop", choices=["host", "gpu"], default="host")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--task", choices=["train", "infer"], default="train")
    ap.add_argument("--mode")
    ap.add_argument("--size", type=int)
    ap.add_argument("--step-ms", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=60.0, help="both phases together")
    ap.add_argument("--stretch-s", type=float, default=6.0, help="phase 2: seconds per stretch")
    ap.add_argument("--chunk", type=int, default=16, help="phase 1: steps per chunk")
    ap.add_argument("--parts", default="path", help="phase 1: what is switched, of " + ",".join(PARTS))
    ap.add_argument("--path-share", type=float, default=0.5, help="phase 1's share of the seconds")
    ap.add_argument("--after", type=int, default=2, help="phase 2: steps after a wake counted with it")
    ap.add_argument("--out", help="a folder for the raw step times")
    ap.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dump", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:
        job(args)
        return
    tmp = args.out or tempfile.mkdtemp(prefix="ctmon-hook-cost-fine-")
    os.makedirs(tmp, exist_ok=True)
    dump = os.path.join(tmp, f"{args.loop}-{args.task}-steps.json")
    passed = ["--loop", args.loop, "--device", args.device, "--task", args.task, "--step-ms", str(args.step_ms)]
    passed += ["--seconds", str(args.seconds), "--stretch-s", str(args.stretch_s), "--chunk", str(args.chunk)]
    passed += ["--parts", args.parts, "--path-share", str(args.path_share)]
    passed += (["--mode", args.mode] if args.mode else []) + (["--size", str(args.size)] if args.size else [])
    cmd = [sys.executable, "-m", "ctmon", "record", "-q", "-o", os.path.join(tmp, "job.jsonl"), "--"]
    cmd += [sys.executable, os.path.abspath(__file__), "--job", "--dump", dump, *passed]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, HERE, env.get("PYTHONPATH", "")])
    got = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if got.returncode or "DONE" not in got.stdout:
        raise SystemExit(f"hook_cost_fine: the job failed (exit {got.returncode}):\n{got.stderr[-3000:]}")
    with open(dump) as f:
        res = json.load(f)
    out = summarise(res, args.chunk, args.after)
    out["date"] = time.strftime("%Y-%m-%d")
    print(json.dumps(out, indent=2))
    for part in PARTS:
        if part in out:
            p = out[part]
            lo, hi = p["cost_pct_mean_ci95"]
            mlo, mhi = p["cost_pct_median_ci95"]
            print(
                f"| {out['loop']} {out['task']} {out['mode'] or ''} | {out['step_ms']} ms | {part} | "
                f"mean {p['cost_pct_mean']:+.3f} % [{lo:+.3f}, {hi:+.3f}] ({p['cost_us_mean']} µs), "
                f"median {p['cost_pct_median']:+.3f} % [{mlo:+.3f}, {mhi:+.3f}] | {p['pairs']} pairs |"
            )
    for name, w in [("wakes", out["wakes"]), *out["job"].items()]:
        if "cost_us_each" not in w:
            beside = f"{w.get('beside_wakes', 0)} beside a wake, in its cost" if w.get("beside_wakes") else "none"
            print(f"| {out['loop']} {out['task']} {out['mode'] or ''} | {out['step_ms']} ms | {name} | {beside} |")
            continue
        lo, hi = w["cost_pct_ci95"]
        print(
            f"| {out['loop']} {out['task']} {out['mode'] or ''} | {out['step_ms']} ms | {name} | "
            f"{w['cost_pct']:+.3f} % [{lo:+.3f}, {hi:+.3f}] | "
            f"{w['cost_us_each']} µs x {w['per_s']}/s (held p50 {w['hold_us']['p50']} µs) | {w['moments']} |"
        )
    print("rare costs (benchmarks/rare_costs.py): " + json.dumps(out["rare"]))
    if "total_pct" in out:
        lo, hi = out["total_pct_ci95"]
        print(
            f"| total (path + wakes + the job's occasional work) | {out['total_pct']:+.3f} % [{lo:+.3f}, {hi:+.3f}] |"
        )


if __name__ == "__main__":
    main()
