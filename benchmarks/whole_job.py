"""What ctmon costs (and keeps of) a whole job: the same job run plainly and
under ``ctmon record``, in alternating order, as separate processes.

  e2e       a compiled training loop (jobs/train_loop.py) times its own steady
            steps, plainly and under ``ctmon record``, several pairs; the
            figure is the median over pairs of (ctmon - plain) / plain, with
            every pair's. Alone, the layer width is sized so a step takes
            about ``--step-ms``. With ``--ranks N`` the job is started by
            torchrun and each rank times the same loop on its own (no
            collective in the timed region, so one rank's noise does not
            become the other's): the figure per rank. Two runs of one job
            differ by a few percent on their own, so this bounds the cost
            rather than resolving it (``hook_cost.py`` resolves it).
  compile   compile-time cost: a compile-heavy script (jobs/compile_heavy.py:
            a compile and two recompiles; with ``--demo``, demos/gpt_baseline.py
            for 3 steps, whose first step is its compile) with no hook, under
            ``ctmon record``, and with TORCH_TRACE, in rotating order, every
            run compiling for real (Inductor's caches off); compares the
            script's own time to its first result.
  firehose  a loop calling ``ctmon.step()`` as fast as it can under
            ``ctmon record`` (jobs/step_firehose.py): the recording must keep
            every step.

Each prints JSON with the machine it ran on.

Usage:
  python benchmarks/whole_job.py e2e      [--device cpu|cuda] [--ranks N] [--pairs P] [--steps S]
                                          [--width W | --step-ms 1]
  python benchmarks/whole_job.py compile  [--device cpu|cuda] [--reps 5] [--demo]
  python benchmarks/whole_job.py firehose [--steps 1000000]
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tempfile
import time
from typing import Any

import harness

# ---------------------------------------------------------------------- e2e


def loop_step_ms(args: Any, steps: int, width: int, under_ctmon: bool, tmp: str) -> dict[int, float]:
    """One run of the loop: each rank's (or the one process's) mean step."""
    cmd = [harness.job("train_loop.py"), args.device, str(steps), str(width)]
    cmd = [*(harness.torchrun(args.ranks) if args.ranks else [sys.executable]), *cmd]
    if under_ctmon:
        cmd = harness.record_cmd(os.path.join(tmp, "rec.jsonl"), cmd)
    out = harness.run(cmd, timeout=900)
    got = {r["rank"]: float(r["step_ms"]) for r in harness.tagged(out.stdout)}
    if len(got) != max(1, args.ranks):
        raise SystemExit(f"the loop failed ({'ctmon' if under_ctmon else 'plain'}): {out.stderr[-2000:]}")
    return got


def sized_width(args: Any, tmp: str) -> int:
    """The layer width whose step takes about ``--step-ms``."""
    width = 256
    for _ in range(6):
        t = loop_step_ms(args, 50, width, False, tmp)[0]
        if 0.8 * args.step_ms <= t <= 1.25 * args.step_ms:
            break
        width = max(64, int(width * (args.step_ms / t) ** 0.5) // 64 * 64)
    return width


def e2e(args: Any) -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="ctmon-bench-")
    width = args.width or (128 if args.ranks else sized_width(args, tmp))
    steps = args.steps or (1500 if args.ranks else max(200, int(3000 / args.step_ms)))
    pairs = args.pairs or (6 if args.ranks else 4)
    runs = harness.interleaved(
        {
            "plain": lambda: loop_step_ms(args, steps, width, False, tmp),
            "ctmon": lambda: loop_step_ms(args, steps, width, True, tmp),
        },
        pairs,
    )
    per_rank = []
    for r in range(max(1, args.ranks)):
        plain = [run[r] for run in runs["plain"]]
        mon = [run[r] for run in runs["ctmon"]]
        rel = [harness.rel_pct(m, p) for m, p in zip(mon, plain, strict=True)]
        per_rank.append(
            {
                "rank": r,
                "plain_step_ms_median": round(statistics.median(plain), 4),
                "ctmon_step_ms_median": round(statistics.median(mon), 4),
                "overhead_pct_median": round(statistics.median(rel), 3),
                "overhead_pct_range": [round(min(rel), 3), round(max(rel), 3)],
                "overhead_pct_all": [round(x, 3) for x in rel],
            }
        )
    return {"device": args.device, "ranks": args.ranks, "width": width, "steps": steps, "per_rank": per_rank}


# ------------------------------------------------------------------ compile


def compile_cost(args: Any) -> dict[str, Any]:
    """Time to first result (or, with --demo, the first step of demo 1, which
    its compile dominates) with no hook, ctmon, and TORCH_TRACE."""
    tmp = tempfile.mkdtemp(prefix="ctmon-bench-")
    script = os.path.join(harness.ROOT, "demos", "gpt_baseline.py") if args.demo else harness.job("compile_heavy.py")
    script_args = ["--device", args.device, "--steps", "3"] if args.demo else [args.device]
    kinds = ("plain", "ctmon", "torch_trace")
    times: dict[str, list[float]] = {k: [] for k in kinds}
    walls: dict[str, list[float]] = {}
    for i, order in enumerate(harness.orders(kinds, args.reps, "rotate")):
        for kind in order:
            environ = harness.env(TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")  # every run compiles for real
            cmd = [sys.executable, script, *script_args]
            if kind == "ctmon":
                cmd = harness.record_cmd(os.path.join(tmp, "rec.jsonl"), cmd)
            if kind == "torch_trace":
                environ["TORCH_TRACE"] = os.path.join(tmp, f"trace{i}")
            t0 = time.perf_counter()
            out = harness.run(cmd, environ)
            wall = time.perf_counter() - t0
            if args.demo:
                # the demo's own first step (its compile), so ctmon's supervisor
                # start-up is not counted as compile cost; the wall time is kept too
                m = re.search(r"first step ([\d.]+) (ms|s)\b", out.stdout)
                if out.returncode != 0 or m is None:
                    raise SystemExit(f"{kind} failed: {out.stderr[-2000:]}")
                times[kind].append(float(m.group(1)) / (1000 if m.group(2) == "ms" else 1))
                walls.setdefault(kind, []).append(round(wall, 2))
                continue
            got = harness.tagged(out.stdout)
            if not got:
                raise SystemExit(f"{kind} failed: {out.stderr[-2000:]}")
            times[kind].append(got[0]["compile_s"])
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "device": args.device,
        "reps": args.reps,
        "workload": "demos/gpt_baseline.py --steps 3: its first step (compile)"
        if args.demo
        else "jobs/compile_heavy.py (time to first result)",
        "wall_s": walls or None,
        "median_s": {k: round(v, 3) for k, v in med.items()},
        "ctmon_vs_plain_pct": round(harness.rel_pct(med["ctmon"], med["plain"]), 2),
        "torch_trace_vs_plain_pct": round(harness.rel_pct(med["torch_trace"], med["plain"]), 2),
        "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
    }


# ----------------------------------------------------------------- firehose


def firehose(args: Any) -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="ctmon-bench-")
    rec = os.path.join(tmp, "rec.jsonl")
    out = harness.run(harness.record_cmd(rec, [sys.executable, harness.job("step_firehose.py"), str(args.steps)]))
    rate = next((float(ln.split()[2]) for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    report = harness.report(rec)
    return {
        "steps_called": args.steps,
        "steps_per_s": rate,
        "steps_recorded": report["steps"]["count"],
        "dropped": report["drops"]["steps"],
        "recording_bytes": os.path.getsize(rec),
    }


def main() -> None:
    ap = harness.parser(__doc__)
    sub = ap.add_subparsers(dest="what", required=True)
    e = sub.add_parser("e2e")
    e.add_argument("--ranks", type=int, default=0, help="run under torchrun with this many ranks")
    e.add_argument("--pairs", type=int, help="plain/ctmon pairs (default 4; 6 with --ranks)")
    e.add_argument("--steps", type=int, help="timed steps a run (default 3000 ms / --step-ms; 1500 with --ranks)")
    e.add_argument("--width", type=int, help="the layers' width (default: sized to --step-ms; 128 with --ranks)")
    e.add_argument("--step-ms", type=float, default=1.0)
    c = sub.add_parser("compile")
    c.add_argument("--reps", type=int, default=5)
    c.add_argument("--demo", action="store_true", help="time demo 1 (gpt_baseline) instead")
    for p in (e, c):
        p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    f = sub.add_parser("firehose")
    f.add_argument("--steps", type=int, default=1_000_000)
    a = ap.parse_args()
    res = {"e2e": e2e, "compile": compile_cost, "firehose": firehose}[a.what](a)
    print(json.dumps({"machine": harness.machine(with_torch=True), a.what: res}, indent=2))


if __name__ == "__main__":
    main()
