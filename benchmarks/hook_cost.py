"""What ctmon's hook costs a compiled step, resolved to a fraction of a percent.

Whole-run A/B tests (``whole_job.py e2e``) cannot resolve this: two runs of
the same job differ by a few percent on their own. Both methods here run one
job under ``ctmon record`` and switch ctmon's parts in and out inside it.
Host-bound and GPU-bound loops are run apart: where the GPU sets the pace the
host's extra time is hidden.

``rounds``: the job (jobs/hook_cost_job.py) times many short rounds (~150 ms
of steps, synchronised at their ends only) in arms -- nothing of ctmon
running (``off``), the step path (``hooks``), with the sender waking at its
own pace (``steps``), with the hotness sampler (``all``: what a job under
``ctmon record`` pays); also ``graphs``, ``wake``, ``walk`` -- in a fresh
random order within each block. The figure is the median over blocks of each
arm's paired difference from ``off`` in the same block, with its
distribution-free 95 % interval, and the mean with its interval beside it.
With ``--ranks N`` the job is started by torchrun and every rank runs its
rounds at the same time (no collective in a round): the cost per rank.
``--plain`` runs no ctmon: two arms that differ in name only (the machine's
own noise); ``--pin`` puts the job's thread alone on a core.

``fine``: where rounds are too noisy (a virtual machine whose rounds differ
by 10 % or more on their own leaves ``rounds`` at ±1 % after hundreds of
blocks), the job (jobs/hook_cost_fine_job.py) measures the parts of the cost
apart, each against its own neighbourhood, so slow drift cancels:

* **The step path** (the hooks, the device timer, the graphs' timing
  wrappers; the sender asleep). Phase 1 switches it in and out every
  ``--chunk`` steps, with no synchronisation, and compares each chunk's
  mean step time with the adjacent chunk's (the first two steps of a chunk
  are left out: the switch's own transient). Two figures: the mean of
  those paired differences over the mean step, with its interval (what a
  run's total time pays, rare costs included: the figure the total takes),
  and the median of the pairs' ratios with its distribution-free 95 %
  interval (narrower, but blind to a cost that comes rarely and large).
  ``--parts`` also switches parts of the path alone, each beside its own
  ``off`` chunk: ``hook`` (the step hooks), ``timer`` (the hooks and the
  device timer), ``graphs`` (the graphs' counters, as outside a timing
  window), ``timed`` (their timing wrappers, as inside one), ``counting``
  and ``timing`` (the step hooks with the clock held in a counting stretch,
  or kept out of one), ``floor``: a post-hook that does nothing, what any
  Python hook costs, and ``c_counting``: what a stretch would cost were its
  count kept in C (not what ctmon does: docs/PERFORMANCE.md). In ``path``
  and ``hook`` the step clock times TIMED_NS and counts the next COUNT_NS,
  and in ``path`` the graphs' timing windows are open as in a fast loop
  (this loop's arms would otherwise dilute the rates that decide it).
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
  asks after a CUDA event), logged in phase 2 and costed as a wake is, at
  the pace it keeps in a real run. A moment whose steps a wake's excess
  already holds (a stretch ends at the boundary after the flush that ended
  it) is counted once, in the wake's cost.
* **Rare costs**: phase 1 logs every garbage collection and every CUDA
  event the device timer records; per part, the slow steps (over 300 µs
  above the median) and collections per thousand steps, and the path's
  mean again with the steps either touched left out.

The total is the step path's mean, the wakes and the occasional work. Step
times are the host's (a step ends when the host has issued it): where the GPU
sets the pace these are upper bounds on what the step time pays. ``--out DIR``
keeps the raw step times (``fine``) or rounds (``rounds``) for a second look
or for pooling runs of one machine.

Usage:
  python benchmarks/hook_cost.py rounds [--loop host|gpu|both] [--device cpu|cuda]
      [--task train|infer] [--mode MODE] [--size N] [--step-ms 1] [--round-ms 150]
      [--blocks 200] [--arms off,hooks,steps,all] [--ranks N] [--plain] [--pin] [--out DIR]
  python benchmarks/hook_cost.py fine [--loop host|gpu] [--device cpu|cuda]
      [--task train|infer] [--mode MODE] [--size N] [--step-ms 1] [--seconds 60]
      [--path-share 0.5] [--parts path,hook,counting,timing,timer,graphs,timed,floor,c_counting]
      [--chunk 16] [--after 2] [--stretch-s 6] [--out DIR]
"""

from __future__ import annotations

import bisect
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any

import harness

ROUNDS_JOB = harness.job("hook_cost_job.py")
FINE_JOB = harness.job("hook_cost_fine_job.py")


# ---- rounds ----


def summarise_rounds(res: dict[str, Any]) -> dict[str, Any]:
    out = paired(res, "rounds")
    cpu = paired(res, "cpu_rounds")
    sender: dict[str, float] = res["sender_cpu_us_per_step"]
    for arm, figures in cpu.items():
        if isinstance(figures, dict) and isinstance(out.get(arm), dict):
            out[arm]["main_thread_cpu"] = figures
            out[arm]["sender_cpu_us_per_step"] = round(sender[arm], 2)
    out["cpu_step_ms_off"] = cpu["step_ms_off"]
    out["cpu_round_spread_pct"] = cpu["round_spread_pct"]
    return out


def paired(res: dict[str, Any], key: str) -> dict[str, Any]:
    """Each arm's rounds beside ``off``'s of the same block: the median of the
    paired relative differences with its interval, and the mean with its."""
    rounds: dict[str, list[float]] = res[key]
    off = rounds["off"]
    keep = ("rank", "loop", "task", "mode", "device", "size", "steps_per_round", "issue_share", "pinned_core")
    out: dict[str, Any] = {k: res.get(k) for k in (*keep, "graphs_timed")}
    out["blocks"] = len(off)
    out["step_ms_off"] = round(statistics.median(off), 4)
    out["round_spread_pct"] = round(statistics.stdev(off) / statistics.fmean(off) * 100, 2)
    for arm in [a for a in rounds if a != "off"]:
        rel = [harness.rel_pct(a, b) for a, b in zip(rounds[arm], off, strict=True)]
        med, lo, hi = harness.median_ci(rel)
        mean, mlo, mhi = harness.mean_ci(rel)
        out[arm] = {
            "step_ms": round(statistics.median(rounds[arm]), 4),
            "cost_pct_median": round(med, 3),
            "cost_pct_median_ci95": [round(lo, 3), round(hi, 3)],
            "cost_pct_mean": round(mean, 3),
            "cost_pct_mean_ci95": [round(mlo, 3), round(mhi, 3)],
            "cost_us_median": round(med / 100 * statistics.median(off) * 1000, 2),
        }
    return out


def run_rounds(args: Any, loop: str, tmp: str) -> list[dict[str, Any]]:
    job = [ROUNDS_JOB, "--loop", loop, "--device", args.device, "--step-ms", str(args.step_ms)]
    job += ["--round-ms", str(args.round_ms), "--blocks", str(args.blocks), "--arms", args.arms, "--task", args.task]
    job += ["--mode", args.mode] if args.mode else []
    job += ["--size", str(args.size)] if args.size else []
    launcher = harness.torchrun(args.ranks) if args.ranks else [sys.executable]
    cmd = harness.record_cmd(os.path.join(tmp, f"{loop}.jsonl"), [*launcher, *job])
    if args.pin:
        job.append("--pin")
    if args.plain:
        cmd = [*launcher, *job, "--plain"]
    out = harness.run(cmd, timeout=3600)
    got = harness.tagged(out.stdout)
    if len(got) != max(1, args.ranks) or out.returncode:
        raise SystemExit(f"hook_cost: the {loop} job failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    with open(os.path.join(tmp, f"{loop}-rounds.json"), "w") as f:
        json.dump(got, f)  # every round, for a second look
    return [summarise_rounds(r) for r in sorted(got, key=lambda r: r["rank"])]


def rounds(args: Any) -> None:
    loops = ["host", "gpu"] if args.loop == "both" else [args.loop]
    tmp = args.out or tempfile.mkdtemp(prefix="ctmon-hook-cost-")
    os.makedirs(tmp, exist_ok=True)
    results = []
    for loop in loops:
        t0 = time.monotonic()
        results += run_rounds(args, loop, tmp)
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


# ---- fine: the statistics ----


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
    first = bisect.bisect_right(ends, s, lo_i, hi_i)  # the first step ending after s
    last = min(bisect.bisect_left(ends, e, lo_i, hi_i) + after, hi_i - 1)
    if first - 50 < lo_i + 1 or last + 50 >= hi_i or first >= hi_i:
        return None
    near = [ends[i] - ends[i - 1] for r in (range(first - 50, first - 10), range(last + 11, last + 51)) for i in r]
    base = statistics.median(near)
    return sum(ends[i] - ends[i - 1] - base for i in range(first, last + 1))


def _overlaps(spans: list[tuple[int, int]], s: int, e: int) -> bool:
    """Whether [s, e] overlaps any of ``spans`` (sorted by start)."""
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


def summarise_fine(res: dict[str, Any], chunk: int, after: int) -> dict[str, Any]:
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
        med, lo, hi = harness.median_ci([(on / off - 1) * 100 for on, off in pairs])
        per = 100 / statistics.fmean(off for _, off in pairs)
        mean, mlo, mhi = harness.mean_ci([(on - off) * per for on, off in pairs])
        out[part] = {
            "pairs": len(pairs),
            "cost_pct_median": round(med, 3),
            "cost_pct_median_ci95": [round(lo, 3), round(hi, 3)],
            "cost_us_median": round(med / 100 * step * 1000, 2),
            "cost_pct_mean": round(mean, 3),
            "cost_pct_mean_ci95": [round(mlo, 3), round(mhi, 3)],
            "cost_us_mean": round(statistics.fmean(on - off for on, off in pairs) / 1e3, 2),
        }
    out["rare"] = rare_costs(res, chunk)
    out["wakes"] = moment_costs(res, after, "wake", ("all",))
    out["wakes"]["sender_us"] = {
        k: {q: round(x, 1) for q, x in _quantiles(v).items()} for k, v in res["sender_parts_us"].items() if v
    }
    # The job thread's own occasional work (the once-a-second check, a
    # counting stretch's end, a CUDA event's record): the chunks' median
    # leaves it out, as it leaves out any rare cost, so it is measured as the
    # wakes are, in the stretches where everything runs at its own pace
    # (the quiet ones park the sender, which ends the counting stretches).
    out["job"] = {k: moment_costs(res, after, k, ("all",)) for k in res["job_moments"]}
    if "path" in out:
        p = out["path"]
        parts = [(p["cost_pct_mean"], *p["cost_pct_mean_ci95"])]
        parts += [(m["cost_pct"], *m["cost_pct_ci95"]) for m in (out["wakes"], *out["job"].values())]
        out["total_pct"] = round(sum(x for x, _, _ in parts), 3)
        out["total_pct_ci95"] = [round(sum(lo for _, lo, _ in parts), 3), round(sum(hi for _, _, hi in parts), 3)]
    return out


# ---- fine: rare costs in phase 1 ----
# The step path's mean can sit well above its median. That could be a rare
# large cost of the path -- now and then a step hundreds of µs slower with
# ctmon's path in than out -- and two things in the job's thread could make
# one: Python's garbage collector and the device timer's CUDA events. Phase 1
# logs both, in every chunk, on and off alike, so each slow step can be put
# beside what ran inside it. (On the H100 hosts neither was it: their steps
# spread ±300 µs on their own, and the path moves that whole spread up by a
# few µs: docs/PERFORMANCE.md.)

SLOW_NS = 300_000  # a step this much over the median is slow


def _touched(spans: list[tuple[int, int]], s: int, e: int) -> bool:
    """Whether [s, e] overlaps any of ``spans`` (sorted by start, short)."""
    i = bisect.bisect_right(spans, (e, 1 << 62))
    return any(b >= s for _, b in spans[max(0, i - 4) : i])


def rare_costs(res: dict[str, Any], chunk: int) -> dict[str, Any]:
    """Per part (each against its off chunks): collections by generation
    and slow steps, per thousand steps, and the path's mean with the steps
    a collection or a CUDA event touched left out."""
    ends, arms = res["path_ends"], res["path_arms"]
    gcs = sorted((s, e) for s, e, _ in res.get("path_gc", []))
    gens = {(s, e): g for s, e, g in res.get("path_gc", [])}
    events = sorted((t, t) for t in res.get("path_events", []))
    median = statistics.median(b - a for a, b in zip(ends, ends[1:], strict=False))
    side: dict[str, dict[str, float]] = {}
    chunks: list[tuple[str, list[tuple[int, bool, bool]]]] = []
    for c, arm in enumerate(arms):
        lo, hi = c * chunk + 2, (c + 1) * chunk
        if hi >= len(ends):
            break
        steps = []
        for i in range(lo + 1, hi + 1):
            s, e = ends[i - 1], ends[i]
            steps.append((e - s, _touched(gcs, s, e), _touched(events, s, e)))
        chunks.append((arm, steps))
    for arm, steps in chunks:
        d = side.setdefault(arm, {"steps": 0, "slow": 0, "slow_gc": 0, "slow_event": 0})
        for dt, g, ev in steps:
            d["steps"] += 1
            if dt - median > SLOW_NS:
                d["slow"] += 1
                d["slow_gc"] += g
                d["slow_event"] += ev
    for (s, e), g in gens.items():  # each collection to the side whose chunk holds it
        c = (bisect.bisect_right(ends, s) - 1) // chunk
        if 0 <= c < len(chunks):
            d = side[chunks[c][0]]
            d[f"gen{g}"] = d.get(f"gen{g}", 0) + 1
            d[f"gen{g}_us"] = d.get(f"gen{g}_us", 0) + (e - s) / 1e3
    per_k = {}
    for name, d in side.items():
        k = d["steps"] / 1000
        row: dict[str, Any] = {"steps": int(d["steps"])}
        row["slow_per_k"] = round(d["slow"] / k, 2)
        row["slow_with_gc_per_k"] = round(d["slow_gc"] / k, 2)
        row["slow_with_event_per_k"] = round(d["slow_event"] / k, 2)
        for g in range(3):
            n = d.get(f"gen{g}", 0)
            row[f"gen{g}_per_k"] = round(n / k, 2)
            row[f"gen{g}_us_each"] = round(d.get(f"gen{g}_us", 0) / n, 1) if n else None
        per_k[name] = row
    out: dict[str, Any] = {"median_step_us": round(median / 1e3, 1), **per_k}
    for part in side:
        if part == "off":
            continue
        for label, keep in (
            ("all", lambda g, ev: True),
            ("without_gc", lambda g, ev: not g),
            ("without_gc_or_event", lambda g, ev: not g and not ev),
        ):
            out[part][f"mean_{label}"] = _paired_mean(chunks, part, keep)
    return out


def _paired_mean(chunks: list[tuple[str, list[tuple[int, bool, bool]]]], part: str, keep: Any) -> dict[str, Any]:
    """The mean of the (part, off) pairs' differences of chunk means, over
    the steps ``keep`` lets in, as a share of the off chunks' mean step."""
    means: list[tuple[str, float]] = []
    for arm, steps in chunks:
        kept = [dt for dt, g, ev in steps if keep(g, ev)]
        means.append((arm, statistics.fmean(kept) if kept else float("nan")))
    pairs = []
    for (a1, m1), (a2, m2) in zip(means[::2], means[1::2], strict=False):
        if part not in (a1, a2):
            continue
        on, off = (m1, m2) if a1 == part else (m2, m1)
        if on == on and off == off:  # not NaN: both kept some steps
            pairs.append((on, off))
    if len(pairs) < 2:
        return {"pairs": len(pairs)}
    per = 100 / statistics.fmean(off for _, off in pairs)
    m, lo, hi = harness.mean_ci([(on - off) * per for on, off in pairs])
    return {
        "pairs": len(pairs),
        "cost_pct": round(m, 3),
        "cost_pct_ci95": [round(lo, 3), round(hi, 3)],
        "cost_us": round(statistics.fmean(on - off for on, off in pairs) / 1e3, 2),
    }


# ---- fine: the driver ----


def fine(args: Any) -> None:
    tmp = args.out or tempfile.mkdtemp(prefix="ctmon-hook-cost-fine-")
    os.makedirs(tmp, exist_ok=True)
    dump = os.path.join(tmp, f"{args.loop}-{args.task}-steps.json")
    passed = ["--loop", args.loop, "--device", args.device, "--task", args.task, "--step-ms", str(args.step_ms)]
    passed += ["--seconds", str(args.seconds), "--stretch-s", str(args.stretch_s), "--chunk", str(args.chunk)]
    passed += ["--parts", args.parts, "--path-share", str(args.path_share)]
    passed += (["--mode", args.mode] if args.mode else []) + (["--size", str(args.size)] if args.size else [])
    cmd = harness.record_cmd(os.path.join(tmp, "job.jsonl"), [sys.executable, FINE_JOB, "--dump", dump, *passed])
    got = harness.run(cmd, timeout=3600)
    if got.returncode or "DONE" not in got.stdout:
        raise SystemExit(f"hook_cost fine: the job failed (exit {got.returncode}):\n{got.stderr[-3000:]}")
    with open(dump) as f:
        res = json.load(f)
    out = summarise_fine(res, args.chunk, args.after)
    out["date"] = time.strftime("%Y-%m-%d")
    print(json.dumps(out, indent=2))
    where = f"| {out['loop']} {out['task']} {out['mode'] or ''} | {out['step_ms']} ms"
    for part in args.parts.split(","):
        if part in out:
            p = out[part]
            lo, hi = p["cost_pct_mean_ci95"]
            mlo, mhi = p["cost_pct_median_ci95"]
            print(
                f"{where} | {part} | "
                f"mean {p['cost_pct_mean']:+.3f} % [{lo:+.3f}, {hi:+.3f}] ({p['cost_us_mean']} µs), "
                f"median {p['cost_pct_median']:+.3f} % [{mlo:+.3f}, {mhi:+.3f}] | {p['pairs']} pairs |"
            )
    for name, w in [("wakes", out["wakes"]), *out["job"].items()]:
        if "cost_us_each" not in w:
            beside = f"{w.get('beside_wakes', 0)} beside a wake, in its cost" if w.get("beside_wakes") else "none"
            print(f"{where} | {name} | {beside} |")
            continue
        lo, hi = w["cost_pct_ci95"]
        print(
            f"{where} | {name} | {w['cost_pct']:+.3f} % [{lo:+.3f}, {hi:+.3f}] | "
            f"{w['cost_us_each']} µs x {w['per_s']}/s (held p50 {w['hold_us']['p50']} µs) | {w['moments']} |"
        )
    print("rare costs: " + json.dumps(out["rare"]))
    if "total_pct" in out:
        lo, hi = out["total_pct_ci95"]
        print(
            f"| total (path + wakes + the job's occasional work) | {out['total_pct']:+.3f} % [{lo:+.3f}, {hi:+.3f}] |"
        )


def main() -> None:
    ap = harness.parser(__doc__)
    sub = ap.add_subparsers(dest="method", required=True)
    r = sub.add_parser("rounds", help="interleaved rounds of ~150 ms, arms switched per round")
    f = sub.add_parser("fine", help="the step path, the wakes and the occasional work apart, step by step")
    for p in (r, f):
        p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
        p.add_argument("--task", choices=["train", "infer"], default="train", help="see jobs/hook_cost_job.py")
        p.add_argument("--mode", help="torch.compile's mode for the loop (default: its default)")
        p.add_argument("--size", type=int, help="the loop's depth (host) or batch (gpu), instead of sizing it")
        p.add_argument("--step-ms", type=float, default=1.0)
        p.add_argument("--out", help="a folder for the raw rounds or step times (default: a fresh temporary one)")
    r.add_argument("--loop", choices=["host", "gpu", "both"], default="host")
    r.add_argument("--round-ms", type=float, default=150.0)
    r.add_argument("--blocks", type=int, default=200)
    r.add_argument("--arms", default="off,hooks,steps,all", help="which arms (off first): see jobs/hook_cost_job.py")
    r.add_argument("--ranks", type=int, default=0, help="run under torchrun with this many ranks")
    r.add_argument("--pin", action="store_true", help="each job's thread alone on a core (4 cores or more)")
    r.add_argument("--plain", action="store_true", help="no ctmon: two arms that differ in name only (the noise)")
    f.add_argument("--loop", choices=["host", "gpu"], default="host")
    f.add_argument("--seconds", type=float, default=60.0, help="both phases together")
    f.add_argument("--stretch-s", type=float, default=6.0, help="phase 2: seconds per stretch")
    f.add_argument("--chunk", type=int, default=16, help="phase 1: steps per chunk")
    f.add_argument(
        "--parts",
        default="path",
        help="phase 1: what is switched, of path,hook,timer,graphs,timed,counting,timing,floor,c_counting",
    )
    f.add_argument("--path-share", type=float, default=0.5, help="phase 1's share of the seconds")
    f.add_argument("--after", type=int, default=2, help="phase 2: steps after a wake counted with it")
    args = ap.parse_args()
    (rounds if args.method == "rounds" else fine)(args)


if __name__ == "__main__":
    main()
