"""A recording shaped like a 24-hour training run, and what reading it costs.

  write FILE [--hours H]   write the recording: one H100 training job at ~119
                           steps/s (10.3M step boundaries a day, in batches of 12
                           as the supervisor drains its ring), 1 Hz GPU/CPU
                           samples, ~200k lines of output, a few thousand compiles
                           with their cache results and recompile reasons, and
                           graph breaks; 1.16M lines, ~215 MB for 24 hours.
  measure FILE [--root DIR ...] [--runs N]
                           for each ctmon checkout (default: this one), interleaved
                           run by run: `ctmon report FILE --json` (wall seconds,
                           peak RSS of that process), and `ctmon replay FILE` in a
                           real terminal (tmux): seconds until its first screen
                           shows the run, and until it has loaded all of it;
                           beside them, a bare stdlib `json.loads` pass over the
                           same lines, the yardstick the goal names.

The generator (jobs/recordings.py: day_events) is deterministic (seeded), so
two checkouts read the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import harness
from jobs import recordings


def write(path: str, hours: float) -> tuple[int, int]:
    lines = recordings.write(recordings.day_events(hours), path)
    return lines, os.path.getsize(path)


# ---------------------------------------------------------------- measuring


def bare_json_pass(path: str) -> float:
    """The yardstick: read the lines and json.loads each, nothing else (in a child, like the others)."""
    code = "import json,sys\nwith open(sys.argv[1],'rb') as f:\n    for line in f:\n        json.loads(line)\n"
    return harness.usage([sys.executable, "-c", code, path])[0]


def replay_to_screen(root: str, path: str, timeout: float = 300.0) -> tuple[float, float]:
    """`ctmon replay FILE` in a 120x40 tmux pane: seconds until its first screen
    shows the run (a step count in the Steps panel title; the header may still
    say it is loading), and until it has loaded the whole recording (the
    header's "loading N events" is gone)."""
    nan = float("nan")
    if shutil.which("tmux") is None:
        return nan, nan
    sock = tempfile.mktemp(prefix="bench-tmux-", dir="/tmp")
    cmd = f"env PYTHONPATH={root} {sys.executable} -m ctmon replay {path}"
    t0 = time.perf_counter()
    subprocess.run(["tmux", "-S", sock, "new-session", "-d", "-x", "120", "-y", "40", cmd], check=True)
    first = nan
    try:
        while time.perf_counter() - t0 < timeout:
            out = subprocess.run(["tmux", "-S", sock, "capture-pane", "-p"], capture_output=True, text=True).stdout
            shown = "Steps · " in out and "Frames" in out
            if shown and first != first:
                first = time.perf_counter() - t0
            if shown and "loading" not in out:
                return first, time.perf_counter() - t0
            time.sleep(0.02)
        return first, nan
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True)


def measure(path: str, roots: list[str], runs: int) -> dict[str, Any]:
    results: dict[str, dict[str, list[float]]] = {
        r: {"report_s": [], "report_rss_mb": [], "replay_first_s": [], "replay_loaded_s": []} for r in roots
    }
    bare: list[float] = []
    for _ in range(runs):
        bare.append(bare_json_pass(path))
        for root in roots:
            env = dict(os.environ, PYTHONPATH=root)
            wall, rss, _ = harness.usage(harness.ctmon_cmd("report", path, "--json"), env)
            results[root]["report_s"].append(wall)
            results[root]["report_rss_mb"].append(rss / 2**20)
            first, loaded = replay_to_screen(root, path)
            results[root]["replay_first_s"].append(first)
            results[root]["replay_loaded_s"].append(loaded)
    out: dict[str, Any] = {"file_mb": os.path.getsize(path) / 1e6, "runs": runs, "bare_json_s": harness.spread(bare)}
    for root, figs in results.items():
        out[root] = {k: harness.spread(v) for k, v in figs.items()}
    return out


def main() -> None:
    ap = harness.parser(__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("file")
    w.add_argument("--hours", type=float, default=24.0)
    m = sub.add_parser("measure")
    m.add_argument("file")
    m.add_argument("--root", action="append", help="a ctmon checkout to measure (repeatable)")
    m.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if args.cmd == "write":
        t0 = time.perf_counter()
        lines, size = write(args.file, args.hours)
        print(f"{args.file}: {lines} lines, {size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s")
    else:
        roots = args.root or [harness.ROOT]
        print(json.dumps(measure(args.file, roots, args.runs), indent=2))


if __name__ == "__main__":
    main()
