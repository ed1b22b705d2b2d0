"""`ctmon diff` of two day-long recordings, beside one `ctmon report` of one.

  python benchmarks/diff_day.py [--hours H] [--runs N] [--dir DIR]

Writes two recordings shaped like a day of training (jobs/recordings.py:
day_events; seeds 0 and 1, so their steps, compiles and breaks differ), then,
interleaved run by run: `ctmon report BASE --json` and `ctmon diff BASE NEW
--json`, each in its own process (wall seconds, peak RSS). The goal: the diff
in no more than twice the report's time, in memory as bounded as the
report's (each side is folded into its own store, as a report folds one).
"""

from __future__ import annotations

import json
import os
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
    args = ap.parse_args()
    where = args.dir or tempfile.mkdtemp(prefix="ctmon-diff-bench-")
    os.makedirs(where, exist_ok=True)
    paths = [os.path.join(where, f"day{seed}.jsonl") for seed in (0, 1)]
    for seed, path in enumerate(paths):
        if not os.path.exists(path):
            t0 = time.perf_counter()
            recordings.write(recordings.day_events(args.hours, seed=seed), path)
            print(f"wrote {path}: {os.path.getsize(path) / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s", flush=True)
    figs: dict[str, list[float]] = {"report_s": [], "report_rss_mb": [], "diff_s": [], "diff_rss_mb": []}
    for _ in range(args.runs):
        wall, rss, _ = harness.usage(harness.ctmon_cmd("report", paths[0], "--json"))
        figs["report_s"].append(wall)
        figs["report_rss_mb"].append(rss / 2**20)
        wall, rss, out = harness.usage(harness.ctmon_cmd("diff", paths[0], paths[1], "--json"))
        figs["diff_s"].append(wall)
        figs["diff_rss_mb"].append(rss / 2**20)
        json.loads(out)  # the diff is whole JSON
    result = {
        "hours": args.hours,
        "file_mb": round(os.path.getsize(paths[0]) / 1e6, 1),
        "runs": args.runs,
        **{k: harness.spread(v) for k, v in figs.items()},
        "diff_over_report": round(statistics.median(figs["diff_s"]) / statistics.median(figs["report_s"]), 2),
        "machine": harness.machine(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
