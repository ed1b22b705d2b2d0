"""Reading a large PyTorch trace: time, throughput and peak memory.

Builds a TORCH_TRACE log of about SIZE MB by repeating the records of a real
one (a compiled training step with graph breaks and recompiles, run here
with TORCH_TRACE), then times ``ctmon report LOG --json`` in a fresh process
and reads its peak RSS (ru_maxrss of the child). The store keeps counts and
per-frame records, not the trace: memory must stay flat as the file grows.

Usage:
  python benchmarks/trace_read.py [--sizes 50,200,500] [--reps 3]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile

import harness

SEED = os.path.join(harness.ROOT, "tests", "workloads", "graph_breaks.py")


def seed_log(tmp: str) -> str:
    trace = os.path.join(tmp, "seed")
    harness.run([sys.executable, SEED], harness.env(TORCH_TRACE=trace), check=True)
    (name,) = os.listdir(trace)
    return os.path.join(trace, name)


def build(seed: str, mb: int, out: str) -> int:
    with open(seed, "rb") as f:
        chunk = f.read()
    want = mb << 20
    with open(out, "wb") as f:
        written = 0
        while written < want:
            f.write(chunk)
            written += len(chunk)
    return written


def read_once(path: str) -> tuple[float, int, int]:
    """Wall seconds, peak RSS in bytes and the compiles found, of one ``ctmon report LOG --json``."""
    dt, rss, out = harness.usage(harness.ctmon_cmd("report", path, "--json"))
    return dt, rss, json.loads(out)["compile"]["compiles"]


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--sizes", default="50,200,500")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctmon-trace-read-")
    seed = seed_log(tmp)
    rows = []
    for mb in (int(x) for x in a.sizes.split(",")):
        path = os.path.join(tmp, f"dedicated_log_torch_trace_{mb}mb.log")
        size = build(seed, mb, path)
        times, peaks = [], []
        compiles = 0
        for _ in range(a.reps):
            dt, rss, compiles = read_once(path)
            times.append(dt)
            peaks.append(rss)
        os.unlink(path)
        rows.append(
            {
                "mb": round(size / (1 << 20)),
                "seconds_median": round(statistics.median(times), 2),
                "seconds_range": [round(min(times), 2), round(max(times), 2)],
                "mb_per_s": round(size / (1 << 20) / statistics.median(times), 1),
                "peak_rss_mb_max": round(max(peaks) / (1 << 20)),
                "compiles": compiles,
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
