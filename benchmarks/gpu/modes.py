"""torch.compile modes measured by ctmon itself, on a GPU.

For each demo and mode, one `ctmon record` run of the demo (a cold Inductor
cache each time, as a fresh job would have), then ctmon's report gives:

  compile_s     total compile time (frames + backward graphs) from PyTorch's
                compilation_metrics, as ctmon recorded them
  first_step_s  from the first compile's start to the first step boundary
                (the first step, compile included); eager: the demo's own figure
  steady_ms     ctmon's p50 step time (device-timed with CUDA events)
  speedup       eager steady / mode steady
  peak_mem_gib  the job's largest GPU memory in ctmon's samples (NVML)
  autotune      Triton kernels ctmon saw compiled/tuned; cudagraph skips

Usage: python benchmarks/gpu/modes.py [--demos gpt_baseline,inference_buckets] [--modes ...] [--out DIR]
                                      [--timeout S] [--cache-dir DIR]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402

DEMO_ARGS = {
    "gpt_baseline": ["--steps", "120"],
    "inference_buckets": ["--fix", "--steps", "200"],
}
MODES = ("eager", "default", "reduce-overhead", "max-autotune-no-cudagraphs")


def run(demo: str, mode: str, out_dir: str, timeout: float, cache_dir: str | None = None, device: str = "cuda") -> dict:
    rec = os.path.join(out_dir, f"{demo}_{mode}.jsonl")
    env = harness.env()
    if cache_dir:  # kept between runs: a second attempt reuses what a stopped one compiled and tuned
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache_dir, f"{demo}_{mode}")
    else:
        env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
    demo_cmd = [sys.executable, os.path.join(harness.ROOT, "demos", f"{demo}.py"), "--device", device, "--mode", mode]
    cmd = harness.record_cmd(rec, [*demo_cmd, *DEMO_ARGS[demo]])
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    error = None
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM, not SIGKILL: ctmon passes it on to the job and closes the
        # recording, so what the run got through (compiles, tuned kernels) is kept
        # and no orphaned job goes on using the GPU under the next run
        p.terminate()
        try:
            stdout, stderr = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
        error = f"timed out after {timeout:.0f} s"
    wall = time.time() - t0
    if error is None and p.returncode != 0:
        return {"demo": demo, "mode": mode, "error": stderr[-800:]}
    if not os.path.exists(rec):
        return {"demo": demo, "mode": mode, "error": error or "no recording"}
    rep = harness.report(rec, env)
    first_compile = first_boundary = last_t = None
    source = rep["steps"].get("source")
    peak = 0
    with open(rec) as f:
        for line in f:
            ev = json.loads(line)
            k = ev["kind"]
            last_t = ev.get("t", last_t)
            if k == "compile_start" and first_compile is None:
                first_compile = ev["t"]
            elif k == "steps" and first_boundary is None and ev.get("src") == source:
                # the series the report times (a compiled model's first call
                # also marks a boundary, before its compile starts)
                first_boundary = ev["t"]
            elif k == "sample":
                for g in ev.get("gpus") or []:
                    if isinstance(g.get("proc_mem"), int):
                        peak = max(peak, g["proc_mem"])
    own_first = None
    for line in stdout.splitlines():
        if line.startswith("summary:") and "first step" in line:
            own_first = line.split("first step", 1)[1].split("(")[0].strip()
    st = rep["steps"]
    row = {
        "demo": demo,
        "mode": mode,
        "wall_s": round(wall, 1),
        "compile_s": rep["compile"]["total_time_s"],
        "compiles": rep["compile"]["compiles"],
        "first_step_s": round(first_boundary - first_compile, 2) if first_compile and first_boundary else None,
        "demo_first_step": own_first,
        "steady_ms": st["p50_ms"],
        "p90_ms": st["p90_ms"],
        "device_timed": st["device_timed"],
        "steps": st["count"],
        "peak_mem_gib": round(peak / 2**30, 2) if peak else None,
        "autotune_kernels": rep["cache"]["autotune"]["kernels"],
        "cudagraph_skips": rep["cudagraphs"]["skips"],
        "findings": [(f["severity"], f["title"]) for f in rep.get("findings", []) if f["severity"] != "info"],
    }
    if error:  # a stopped run: its figures are how far it got
        row["error"] = error
        row["first_step_s"] = row["steady_ms"] = row["p90_ms"] = None  # its few steps straddle compiles
        row["compiling_for_s"] = round(last_t - first_compile, 1) if first_compile and last_t else None
    return row


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--demos", default="gpt_baseline,inference_buckets")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cuda", help="cuda (the figures) or cpu (a quick check of the script)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds a run may take before it is stopped")
    ap.add_argument(
        "--cache-dir", default=None, help="keep each demo/mode's Inductor cache here (default: a cold one per run)"
    )
    a = ap.parse_args()
    out_dir = a.out or tempfile.mkdtemp(prefix="ctmon-modes-")
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    for demo in a.demos.split(","):
        for mode in a.modes.split(","):
            r = run(demo, mode, out_dir, a.timeout, a.cache_dir, a.device)
            rows.append(r)
            print(json.dumps(r), flush=True)
    for demo in a.demos.split(","):
        eager = next((r.get("steady_ms") for r in rows if r["demo"] == demo and r["mode"] == "eager"), None)
        for r in rows:
            if r["demo"] == demo and r.get("steady_ms") and eager:
                r["speedup"] = round(eager / r["steady_ms"], 2)
    with open(os.path.join(out_dir, "modes.json"), "w") as f:
        json.dump(rows, f, indent=2)
    print("| demo | mode | compile | first step | steady p50 | speedup | peak GPU mem |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r and "compile_s" not in r:
            print(f"| {r['demo']} | {r['mode']} | error: {r['error'][:60]} | | | | |")
            continue
        if "error" in r:
            print(
                f"| {r['demo']} | {r['mode']} | {r['error']}: compiling for {r['compiling_for_s']} s, "
                f"{r['autotune_kernels']} kernels tuned | | | | {r['peak_mem_gib']} GiB |"
            )
            continue
        first = f"{r['first_step_s']} s" if r["first_step_s"] is not None else (r["demo_first_step"] or "-")
        print(
            f"| {r['demo']} | {r['mode']} | {r['compile_s']} s | {first} | "
            f"{r['steady_ms']} ms | {r.get('speedup', '-')}x | {r['peak_mem_gib']} GiB |"
        )


if __name__ == "__main__":
    main()
