"""`ctmon diff` of two day-long recordings, beside one `ctmon report` of one.

  python benchmarks/diff_day.py [--hours H] [--runs N] [--dir DIR]

Writes two recordings shaped like a day of training (jobs/recordings.py:
day_events; seeds 0 and 1, so their steps, compiles and breaks differ), then,
interleaved run by run: `ctmon report BASE --json` and `ctmon diff BASE NEW
--json`, each in its own process (wall seconds, peak RSS). The goal: the diff
in no more than twice the report's time, in memory as bounded as the
report's (each side is folded into its own store, as a report folds one).
CPU seconds (the child's user + system time) are given beside wall seconds:
on a shared machine they move far less with the load than wall time does.
``--other-checkout DIR`` also times that checkout's `ctmon diff`, interleaved
with this one's (a change measured before and after under the same load).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import tempfile
import time

import harness
from jobs import recordings


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the recordings go (default: a temporary directory)")
    ap.add_argument("--other-checkout", default=None, help="also time `ctmon diff` from this checkout's ctmon")
    args = ap.parse_args()
    where = args.dir or tempfile.mkdtemp(prefix="ctmon-diff-bench-")
    os.makedirs(where, exist_ok=True)
    paths = [os.path.join(where, f"day{seed}.jsonl") for seed in (0, 1)]
    for seed, path in enumerate(paths):
        if not os.path.exists(path):
            t0 = time.perf_counter()
            recordings.write(recordings.day_events(args.hours, seed=seed), path)
            print(f"wrote {path}: {os.path.getsize(path) / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s", flush=True)
    names = ["report", "diff"] + (["other_diff"] if args.other_checkout else [])
    figs: dict[str, list[float]] = {f"{n}_{u}": [] for n in names for u in ("s", "cpu_s", "rss_mb")}
    other_env = harness.env(PYTHONPATH=os.path.abspath(args.other_checkout or "."))
    for _ in range(args.runs):
        _time(figs, "report", harness.ctmon_cmd("report", paths[0], "--json"))
        json.loads(_time(figs, "diff", harness.ctmon_cmd("diff", paths[0], paths[1], "--json")))
        if args.other_checkout:
            _time(figs, "other_diff", harness.ctmon_cmd("diff", paths[0], paths[1], "--json"), other_env)
    result = {
        "hours": args.hours,
        "file_mb": round(os.path.getsize(paths[0]) / 1e6, 1),
        "runs": args.runs,
        **{k: harness.spread(v) for k, v in figs.items()},
        "diff_over_report": round(statistics.median(figs["diff_s"]) / statistics.median(figs["report_s"]), 2),
        "diff_over_report_cpu": round(
            statistics.median(figs["diff_cpu_s"]) / statistics.median(figs["report_cpu_s"]), 2
        ),
        "machine": harness.machine(),
    }
    print(json.dumps(result, indent=2))


def _time(figs: dict[str, list[float]], name: str, cmd: list[str], environ: dict[str, str] | None = None) -> bytes:
    """One child: its wall and CPU seconds and peak RSS into ``figs``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, rss, out = harness.usage(cmd, environ)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    figs[f"{name}_s"].append(wall)
    figs[f"{name}_cpu_s"].append(cpu)
    figs[f"{name}_rss_mb"].append(rss / 2**20)
    return out


if __name__ == "__main__":
    main()
