"""Is a compiled region's share of step time, as ctmon reports it, right?

The job (jobs/glue_net.py): a compiled model whose forward breaks its graph
around eager glue, so it has two compiled frames (the forward and the resume
function after the break), run under ``ctmon record``.

  profiler  ctmon's share per frame (its graphs, timed, and its eager glue,
            sampled) beside torch.profiler's on the same run: the profiler's
            "Torch-Compiled Region" time per frame less the regions nested in
            it, as a share of the profiled wall time; ctmon's
            ``compiled_share`` beside the profiler's compiled total; how much
            of the profiled time ctmon's graph timing windows were open; and
            the hotness samples by how late each was taken. ``--hz`` raises
            the sampling rate in the job so a method's bias shows above its
            noise in a short run; ``--warm-s S`` sets the step clock's first
            seconds timed whole (ctmon's own is 20): at 0 a fast loop is
            counted, and its graphs timed in the quarter-seconds its steps
            are (ctmon/agent/graph_calls.py), from the first second on.
  windows   no profiler: a region's timed share by how its graphs' timing
            windows are laid out (``always``: timed the whole run, the
            reference; ``aligned``: with the clock's timed quarter-seconds;
            ``aligned-unweighted``: the same, each window counting for its
            own length; ``quarter``: a fourth of the time), each layout's
            share per frame and its difference from ``always``, and per
            hotness event (about every 2 s) the share in that event, so what
            moves a run's share (its first window, say) shows.

Usage:
  python benchmarks/region_shares.py profiler [--device cuda] [--steps 600] [--glue 60] [--width 1024]
      [--batch 256] [--hz 20] [--warm-s S]
  python benchmarks/region_shares.py windows [--seconds 30] [--layouts always,aligned,aligned-unweighted,quarter]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

import harness

JOB = harness.job("glue_net.py")


def profiler(args: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rec, prof = os.path.join(tmp, "rec.jsonl"), os.path.join(tmp, "prof.json")
        job = [sys.executable, JOB, "profile", "--out", prof, "--device", args.device, "--steps", str(args.steps)]
        job += ["--glue", str(args.glue), "--width", str(args.width), "--batch", str(args.batch), "--hz", str(args.hz)]
        if args.warm_s is not None:
            job += ["--warm-s", str(args.warm_s)]
        harness.run(harness.record_cmd(rec, job), timeout=900, check=True)
        rep = harness.report(rec)
        with open(prof) as f:
            theirs = json.load(f)
    rows = []
    for fr in rep["frames"]:
        rt = fr["runtime"] or {}
        rows.append(
            {
                "frame": fr["name"],
                "frame_id": str(fr["frame_id"]),
                "ctmon": round((rt.get("share") or 0.0) + (rt.get("glue_share") or 0.0), 4),
                "profiler": theirs["frames"].get(str(fr["frame_id"])),
                "graphs_timed": rt.get("timed"),
                "calls": rt.get("calls"),
            }
        )
    out = {
        "date": harness.machine()["date"],
        "device": args.device,
        "steps_profiled": args.steps,
        "warm_s": args.warm_s,
        "samples_per_s": args.hz,
        "samples": (rep["steps"]["runtime"] or {}).get("samples"),
        "frames": rows,
        "ctmon_compiled_share": rep["steps"]["compiled_share"],
        "ctmon_glue_share": (rep["steps"]["runtime"] or {}).get("glue_share"),
        "profiler_regions_share": round(sum(theirs["frames"].values()), 4),
        "profiler_backward_share": round(theirs["backward_share"], 4),
        "graph_timing_open_share": theirs.get("timing_open_share"),
        "findings": [f["title"] for f in rep["findings"] if f["rule"] == "eager-glue"],
        "samples_by_lateness_ms": {"buckets": ["<0.05", "0.05-0.5", ">=0.5"], **(theirs.get("lateness") or {})},
    }
    print(json.dumps(out, indent=1))


def layout_shares(layout: str, seconds: float, tmp: str) -> dict[str, Any]:
    rec = os.path.join(tmp, f"{layout}.jsonl")
    job = [sys.executable, JOB, "windows", layout, "--seconds", str(seconds)]
    harness.run(harness.record_cmd(rec, job), timeout=600, check=True)
    rep = harness.report(rec)
    per_event = []
    with open(rec) as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("kind") == "hotness" and ev.get("span_ns"):
                span = ev["span_ns"]
                per_event.append([round(g[4] / span, 4) for g in ev.get("graphs") or []])
    return {
        "shares": {fr["name"]: (fr["runtime"] or {}).get("share") for fr in rep["frames"]},
        "steps": rep["steps"]["count"],
        "per_event": per_event,
    }


def windows(args: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = {layout: layout_shares(layout, args.seconds, tmp) for layout in args.layouts.split(",")}
    ref = out.get("always")
    for layout, r in out.items():
        parts = []
        for name, share in r["shares"].items():
            base = ref["shares"].get(name) if ref is not None else None
            rel = f" ({share / base - 1:+.1%})" if share and base and layout != "always" else ""
            parts.append(f"{name[:28]} {share}{rel}")
        print(f"{layout:8s} {r['steps']:>7} steps | " + " | ".join(parts))
        print(f"{'':8s} per event: {r['per_event']}")


def main() -> None:
    ap = harness.parser(__doc__)
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("profiler")
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--glue", type=int, default=60)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hz", type=float, default=20.0, help="samples a second (ctmon's default is 4)")
    p.add_argument("--warm-s", type=float, default=None, help="the step clock's seconds timed whole (ctmon's is 20)")
    w = sub.add_parser("windows")
    w.add_argument("--seconds", type=float, default=30.0)
    w.add_argument("--layouts", default="always,aligned,aligned-unweighted,quarter")
    args = ap.parse_args()
    (profiler if args.what == "profiler" else windows)(args)


if __name__ == "__main__":
    main()
