"""Each rank's figures from ``ctmon report --json`` of a recording, beside an
independent count over that rank's own TORCH_TRACE file of the same run, and
the GPU samples the recording holds per device.

    python benchmarks/ranks_vs_trace.py REC.jsonl TRACE_DIR [--json OUT.json]

Prints one line per rank and "agree" or "DIFFER"; exit status 1 when a
rank's counts differ from its trace file.
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys


def trace_counts(trace_dir: str, rank: int) -> dict[str, int]:
    """Compiles, recompiles and graph breaks as PyTorch logged them for one
    rank: one ``compilation_metrics`` record per frame compile (the backward
    has its own ``bwd_compilation_metrics``), one ``dynamo_graph_break_reason``
    artifact per break."""
    got = {"compiles": 0, "recompiles": 0, "graph_breaks": 0}
    for path in glob.glob(f"{trace_dir}/*_rank_{rank}_*.log"):
        with open(path, errors="replace") as f:
            for line in f:
                head = line[:400]
                if '"compilation_metrics"' in head and '"bwd_compilation_metrics"' not in head:
                    got["compiles"] += 1
                    if '"recompile_reason": "' in line or '"recompile_reason":"' in line:
                        got["recompiles"] += 1
                if '"dynamo_graph_break_reason"' in head:
                    got["graph_breaks"] += 1
    return got


def gpu_samples(recording: str) -> dict[int, dict[str, float]]:
    """Per GPU index: how many samples, mean utilisation, peak memory used,
    and the job's processes seen on it (a rank's own memory is its pid's)."""
    per: dict[int, list[tuple[float, float]]] = {}
    pids: dict[int, set[int]] = {}
    with open(recording, errors="replace") as f:
        for line in f:
            if '"kind":"sample"' not in line or '"gpus"' not in line:
                continue
            for g in json.loads(line).get("gpus") or []:
                per.setdefault(g.get("index", 0), []).append((g.get("util") or 0.0, g.get("mem_used") or 0))
                pids.setdefault(g.get("index", 0), set()).update(int(p) for p in (g.get("pid_mem") or {}))
    return {
        i: {
            "samples": len(v),
            "util_mean": round(sum(u for u, _ in v) / len(v), 1),
            "mem_peak": max(m for _, m in v),
            "pids": sorted(pids[i]),
        }
        for i, v in sorted(per.items())
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("recording")
    ap.add_argument("trace_dir")
    ap.add_argument("--json", dest="out")
    args = ap.parse_args()
    done = subprocess.run(
        [sys.executable, "-m", "ctmon", "report", args.recording, "--json"], capture_output=True, text=True
    )
    rep = json.loads(done.stdout or "{}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rep, f, indent=1)
    differ = False
    for r in rep.get("ranks") or []:
        mine = {k: r["compile"][k] for k in ("compiles", "recompiles", "graph_breaks")}
        theirs = trace_counts(args.trace_dir, r["rank"])
        differ |= mine != theirs
        print(
            f"rank {r['rank']} pid {r['pid']} exit {r['exit_code']}: ctmon {mine} trace {theirs} "
            f"{'agree' if mine == theirs else 'DIFFER'}; steps {r['steps']}; gpu_mem_peak {r.get('gpu_mem_peak_bytes')}"
        )
    print("job: exit", rep.get("exit_code"), rep.get("exit_signal") or "", "compile", rep.get("compile"))
    print("gpu samples per device:", gpu_samples(args.recording))
    for f in rep.get("findings") or []:
        print(f"finding [{f['severity']}] {f['title']}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
