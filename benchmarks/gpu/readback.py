"""What the GPU runner (benchmarks/gpu/run.sh) reads back from a run: ctmon's
figures beside an independent count over PyTorch's own TORCH_TRACE logs of
the same run, and what the store said while a job ran. None of it needs a
GPU: it reads files.

  ranks REC TRACE_DIR [--json OUT]
            each rank's compiles, recompiles and graph breaks from ``ctmon
            report --json`` beside a count over that rank's own trace file,
            "agree" or "DIFFER" (exit 1), the GPU samples per device, findings
  follow REC [--every 0.5] [--for 300]
            follow a recording while its job runs and print, with the time
            since the job started, every change in what the ranks view shows
            (``rank_statuses``, the function the TUI's ranks view draws) and
            every critical finding as soon as the store holds it: for machines
            without a terminal to watch the TUI on
  trace DIR OUT
            ``ctmon report DIR --json`` and ``ctmon export --perfetto`` of a
            TORCH_TRACE directory (into OUT) beside a count of its records
  library JOB REC TRACE_DIR OUTPUT OUT.json
            a library job's report (counts, frames, breaks, findings, steps,
            torch.compile calls) beside the trace's counts, with the tail of
            the job's output, into OUT.json
  phases REC TRACE_DIR
            PyTorch's phase timers as ctmon read them live (the recording)
            and from the same run's TORCH_TRACE
  bench JSON
            a ``ctmon bench --json`` result as the bench prints its table
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import time
from collections.abc import Iterable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402


def trace_counts(paths: Iterable[str]) -> dict[str, int]:
    """Records as PyTorch logged them: one ``compilation_metrics`` per frame
    compile (those with a ``recompile_reason`` are recompiles; the backward
    has its own ``bwd_compilation_metrics``), one ``dynamo_start`` per frame
    Dynamo starts on, one ``dynamo_graph_break_reason`` artifact per break,
    the FX graph cache's misses and hits."""
    names = ("compilation_metrics", "bwd_compilation_metrics", "dynamo_start", "dynamo_graph_break_reason")
    names += ("fx_graph_cache_miss", "fx_graph_cache_hit")
    got = dict.fromkeys(names, 0)
    got["recompiles"] = 0
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("\t"):  # a payload's continuation
                    continue
                head = line[:400]
                for name in names:
                    if f'"{name}"' in head:
                        got[name] += 1
                if '"compilation_metrics"' in head and re.search(r'"recompile_reason": ?"', line):
                    got["recompiles"] += 1
    return got


# ------------------------------------------------------------------- ranks


def gpu_samples(recording: str) -> dict[int, dict[str, Any]]:
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


def ranks(rec: str, trace_dir: str, out: str | None) -> int:
    rep = harness.report(rec)
    if out:
        with open(out, "w") as f:
            json.dump(rep, f, indent=1)
    differ = False
    for r in rep.get("ranks") or []:
        mine = {k: r["compile"][k] for k in ("compiles", "recompiles", "graph_breaks")}
        counted = trace_counts(glob.glob(f"{trace_dir}/*_rank_{r['rank']}_*.log"))
        theirs = {
            "compiles": counted["compilation_metrics"],
            "recompiles": counted["recompiles"],
            "graph_breaks": counted["dynamo_graph_break_reason"],
        }
        differ |= mine != theirs
        print(
            f"rank {r['rank']} pid {r['pid']} exit {r['exit_code']}: ctmon {mine} trace {theirs} "
            f"{'agree' if mine == theirs else 'DIFFER'}; steps {r['steps']}; gpu_mem_peak {r.get('gpu_mem_peak_bytes')}"
        )
    print("job: exit", rep.get("exit_code"), rep.get("exit_signal") or "", "compile", rep.get("compile"))
    print("gpu samples per device:", gpu_samples(rec))
    for f in rep.get("findings") or []:
        print(f"finding [{f['severity']}] {f['title']}")
    return 1 if differ else 0


def follow(rec: str, every: float, limit: float) -> int:
    from ctmon.findings import analyze
    from ctmon.read.load import load
    from ctmon.store.rank_status import rank_statuses
    from ctmon.wire.errors import RecordingError

    shown: dict[int, str] = {}
    critical: set[str] = set()
    t_end = time.time() + limit
    first: float | None = None
    while time.time() < t_end:
        time.sleep(every)
        if not os.path.exists(rec):
            continue
        try:
            s, _ = load(rec)
        except RecordingError:
            continue
        now = time.time()
        if first is None:
            first = s.first_t if s.first_t is not None else now
        at = f"{now - first:7.1f} s"
        for st in rank_statuses(s, now):
            line = f"{st.state} {st.detail}".strip()
            # Seconds tick in the detail: print a state when it changes, its
            # detail at most every 5 s.
            key = st.state + "|" + re.sub(r"\d+", "N", st.detail)
            if shown.get(st.rank, "").split("@")[0] != key or now - float(shown[st.rank].split("@")[1]) >= 5:
                shown[st.rank] = f"{key}@{now}"
                print(f"{at}  rank {st.rank}: {line}  (steps {st.steps}, compiles {st.compiles})", flush=True)
        for f in analyze(s):
            if f.severity == "critical" and f.id not in critical:
                critical.add(f.id)
                print(f"{at}  CRITICAL {f.title}", flush=True)
        if s.exit is not None:
            print(f"{at}  job ended: {s.exit}", flush=True)
            return 0
    return 0


# ------------------------------------------------------------------- trace


def trace(trace_dir: str, out: str) -> int:
    rep = harness.report(trace_dir)
    with open(os.path.join(out, "trace_report.json"), "w") as f:
        json.dump(rep, f, indent=1)
    perfetto = os.path.join(out, "trace_perfetto.json")
    harness.run(harness.ctmon_cmd("export", "--perfetto", trace_dir, "-o", perfetto), check=True)
    c = rep["compile"]
    print("ctmon:", c["compiles"], c["backward_compiles"], c["recompiles"], c["graph_breaks"], rep["cache"]["fx_graph"])
    print("ctmon phases:", c["phases_s"])
    print("trace:", trace_counts(glob.glob(f"{trace_dir}/*.log")))
    with open(perfetto) as f:
        ev = json.load(f)["traceEvents"]
    kinds = {ph: sum(1 for e in ev if e["ph"] == ph) for ph in "MXiC"}
    procs = sorted({e["args"]["name"] for e in ev if e["name"] == "process_name"})
    print("perfetto:", kinds, "processes", procs)
    return 0


# ----------------------------------------------------------------- library


def library(job: str, rec: str, trace_dir: str, output: str, dest: str) -> int:
    rep = harness.report(rec) if os.path.exists(rec) else {}
    counted = trace_counts(glob.glob(f"{trace_dir}/*.log"))
    theirs = {
        "compiles": counted["compilation_metrics"],
        "dynamo_starts": counted["dynamo_start"],
        "graph_breaks": counted["dynamo_graph_break_reason"],
        "recompiles": counted["recompiles"],
    }
    with open(output, errors="replace") as f:
        tail = f.read()[-3000:]
    keep = {k: rep.get(k) for k in ("compile", "steps", "generation", "compile_calls", "findings", "graph_breaks")}
    keep["exit_code"] = rep.get("exit_code")
    keep["frames"] = [
        {k: fr.get(k) for k in ("name", "file", "line", "called_from", "compiles", "recompiles")}
        for fr in rep.get("frames") or []
    ]
    with open(dest, "w") as f:
        json.dump({"job": job, "report": keep, "torch_trace": theirs, "output_tail": tail}, f, indent=1)
    c = rep.get("compile") or {}
    print(
        job,
        "ctmon",
        {k: c.get(k) for k in ("compiles", "recompiles", "graph_breaks", "torch_compile_calls")},
        "trace",
        theirs,
        "steps",
        (rep.get("steps") or {}).get("count"),
        "findings",
        [f["rule"] for f in rep.get("findings") or []],
        "generation",
        rep.get("generation"),
    )
    return 0


# ------------------------------------------------------------ phases, bench


def phases(rec: str, trace_dir: str) -> int:
    print("live (recording):", harness.report(rec)["compile"]["traced_phases_s"])
    print("TORCH_TRACE     :", harness.report(trace_dir)["compile"]["traced_phases_s"])
    return 0


def bench(path: str) -> int:
    from ctmon.report.bench_render import render_text

    with open(path) as f:
        print(render_text(json.load(f)))
    return 0


def main() -> int:
    ap = harness.parser(__doc__)
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("ranks")
    r.add_argument("recording")
    r.add_argument("trace_dir")
    r.add_argument("--json", dest="out")
    fo = sub.add_parser("follow")
    fo.add_argument("recording")
    fo.add_argument("--every", type=float, default=0.5)
    fo.add_argument("--for", dest="limit", type=float, default=300.0)
    t = sub.add_parser("trace")
    t.add_argument("trace_dir")
    t.add_argument("out")
    lib = sub.add_parser("library")
    for name in ("job", "recording", "trace_dir", "output", "dest"):
        lib.add_argument(name)
    ph = sub.add_parser("phases")
    ph.add_argument("recording")
    ph.add_argument("trace_dir")
    b = sub.add_parser("bench")
    b.add_argument("json")
    a = ap.parse_args()
    if a.what == "ranks":
        return ranks(a.recording, a.trace_dir, a.out)
    if a.what == "follow":
        return follow(a.recording, a.every, a.limit)
    if a.what == "trace":
        return trace(a.trace_dir, a.out)
    if a.what == "library":
        return library(a.job, a.recording, a.trace_dir, a.output, a.dest)
    if a.what == "phases":
        return phases(a.recording, a.trace_dir)
    return bench(a.json)


if __name__ == "__main__":
    sys.exit(main())
