"""The report's ``system`` section beside nvidia-smi polled during the same
run (on the GPU machine).

Runs benchmarks/jobs/gpu_phases.py under ``ctmon record`` while
``nvidia-smi`` polls every 200 ms, then compares, over the window of
ctmon's own samples: mean GPU utilisation (the two read NVML's utilisation,
each at its own moments), the device memory peak, and mean power.

Usage: python benchmarks/gpu/system_check.py [--phase-s 15] [--out DIR]
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--phase-s", type=float, default=15.0)
    ap.add_argument("--out", default=tempfile.mkdtemp(prefix="ctmon-system-"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rec = os.path.join(args.out, "system.jsonl")
    smi_path = os.path.join(args.out, "smi.csv")
    query = "timestamp,index,utilization.gpu,memory.used,memory.total,power.draw"
    with open(smi_path, "w") as smi_out:
        smi = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-lms", "200"], stdout=smi_out
        )
        try:
            job = [sys.executable, harness.job("gpu_phases.py"), str(args.phase_s)]
            harness.run(harness.record_cmd(rec, job), timeout=600, check=True)
        finally:
            smi.terminate()
            smi.wait(10)
    rep = harness.report(rec)
    times = [json.loads(line)["t"] for line in open(rec) if '"kind":"sample"' in line.replace(" ", "")]
    t0, t1 = min(times), max(times)
    rows = []
    for r in csv.reader(open(smi_path)):
        ts = datetime.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
        if t0 <= ts <= t1 and r[1].strip() == "0":
            rows.append({"util": float(r[2]), "mem_mib": float(r[3]), "power_w": float(r[5])})
    g = rep["system"]["gpus"][0]
    smi_util = sum(r["util"] for r in rows) / len(rows)
    smi_mem = max(r["mem_mib"] for r in rows) * 2**20
    smi_power = sum(r["power_w"] for r in rows) / len(rows)
    out = {
        "window_s": round(t1 - t0, 1),
        "ctmon": {
            "samples": g["samples"],
            "util_mean": g["util_mean"],
            "util_p10": g["util_p10"],
            "util_p90": g["util_p90"],
            "memory_peak_bytes": g["memory_peak_bytes"],
            "job_memory_peak_bytes": g["job_memory_peak_bytes"],
            "power_mean_w": g["power_mean_w"],
            "idle_share_while_stepping": g["idle_share_while_stepping"],
        },
        "nvidia_smi": {
            "samples": len(rows),
            "util_mean": round(smi_util, 1),
            "memory_peak_bytes": int(smi_mem),
            "power_mean_w": round(smi_power, 1),
        },
        "util_diff_points": round(g["util_mean"] - smi_util, 1),
        "memory_peak_diff_pct": round((g["memory_peak_bytes"] - smi_mem) / smi_mem * 100, 2),
        "power_diff_pct": round((g["power_mean_w"] - smi_power) / smi_power * 100, 1),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
