"""A recording shaped like a 24-hour training run, and what reading it costs.

  write FILE [--hours H]   write the recording: one H100 training job at ~119
                           steps/s (10.3M step boundaries a day, in batches of 12
                           as the supervisor drains its ring), 1 Hz GPU/CPU
                           samples, ~200k lines of output, a few thousand compiles
                           with their cache results and recompile reasons, and
                           graph breaks; 1.17M lines, ~200 MB for 24 hours.
  measure FILE [--root DIR ...] [--runs N]
                           for each ctmon checkout (default: this one), interleaved
                           run by run: `ctmon report FILE --json` (wall seconds,
                           peak RSS of that process), and `ctmon replay FILE` in a
                           real terminal (tmux): seconds until its first screen
                           shows the run, and until it has loaded all of it;
                           beside them, a bare stdlib `json.loads` pass over the
                           same lines, the yardstick the goal names.

The generator is deterministic (seeded), so two checkouts read the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

STEP_S = 1 / 119.0  # ~8.4 ms: 10.3M boundaries in 24 h
BATCH = 12
T0 = 1_790_000_000.0
PROJ = "/home/alice/proj"
SITE = "/opt/venv/lib/python3.12/site-packages"


def events(hours: float, seed: int = 0) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    end = T0 + hours * 3600
    yield {
        "kind": "session", "t": T0, "v": 1, "ctmon": "0.1.0", "id": "20261123-000000-train-4242",
        "mode": "record", "command": ["python", "train.py", "--config", "big.yaml"], "cwd": PROJ,
        "host": "gpu-node-07", "pid": 4200, "job_pid": 4242, "recording": f"{PROJ}/run.jsonl",
    }  # fmt: skip
    yield {
        "kind": "process", "t": T0 + 0.01, "pid": 4242, "ppid": 4200, "argv": ["train.py", "--config", "big.yaml"],
        "executable": "/opt/venv/bin/python", "python": "3.12.3", "cwd": PROJ,
        "clock": {"perf_ns": 10**12, "wall": T0 + 0.01},
    }  # fmt: skip
    yield {"kind": "torch", "t": T0 + 2.0, "torch": "2.11.0+cu130", "cuda": "13.0", "hip": None, "triton": "3.6.0",
           "cache_dir": "/tmp/torchinductor_alice", "cache_entries": {"fx_graph": 40, "aot_autograd": 20}}  # fmt: skip
    yield {"kind": "devices", "t": T0 + 3.0, "cuda": [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
           "total_memory": 85_045_952_512, "capability": "9.0", "sms": 132}], "current": 0, "visible": None}  # fmt: skip
    t = T0 + 5.0
    step_i = 0
    next_sample = T0 + 1.0
    next_output = t
    compile_id = 0
    frames = 40
    while t < end:
        # one drain of the step ring: BATCH boundaries
        ns = [max(1, int(rng.gauss(STEP_S * 1e9, 2e5))) for _ in range(BATCH)]
        if step_i == 0:
            ns[0] = 0
        yield {"kind": "steps", "t": t, "src": "optimizer", "i0": step_i, "ns": ns}
        step_i += BATCH
        t += sum(ns) / 1e9
        while next_sample <= t:
            yield sample(rng, next_sample)
            next_sample += 1.0
        while next_output <= t:
            yield {"kind": "output", "t": next_output, "stream": "stdout",
                   "data": f"step {step_i:>9} loss {rng.uniform(1.5, 3.0):.4f} lr 3.0e-04 tok/s {rng.randrange(400_000, 420_000)}\n"}  # fmt: skip
            next_output += 0.432  # 200k lines a day
        # compiles: a warm-up burst, then an occasional recompile (a few thousand a day)
        if (step_i < 2000 and step_i % 24 == 0) or rng.random() < 0.0033:
            yield from compile_events(rng, t, compile_id, compile_id % frames)
            compile_id += 1
    yield {"kind": "exit", "t": t + 1.0, "code": 0, "signal": None}


def sample(rng: random.Random, t: float) -> dict[str, Any]:
    return {
        "kind": "sample", "t": t, "cpu_percent": rng.uniform(95, 110), "rss": 12 << 30, "tree_rss": 20 << 30,
        "threads": 60, "procs": 9, "sys_cpu_percent": 12.5, "sys_mem_used": 200 << 30, "sys_mem_total": 2 << 40,
        "cpus": 128,
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "util": rng.randrange(85, 100),
                  "mem_util": rng.randrange(30, 60), "mem_used": 71 << 30, "mem_total": 85_045_952_512,
                  "power_w": rng.uniform(550, 690), "power_limit_w": 700.0, "temp_c": 63, "sm_clock_mhz": 1980,
                  "proc_mem": 70 << 30}],
    }  # fmt: skip


def compile_events(rng: random.Random, t: float, n: int, frame: int) -> Iterator[dict[str, Any]]:
    cid = f"{frame}/{n // 40}"
    recompile = n >= 40
    if recompile:
        yield {"kind": "recompile_reasons", "t": t, "compile_id": cid, "frame_id": frame,
               "reasons": [f"{frame}/0: tensor 'x' size mismatch at index 1. expected {rng.randrange(64, 4096)}, actual {rng.randrange(64, 4096)}"]}  # fmt: skip
    yield {"kind": "compile_start", "t": t, "compile_id": cid, "frame_id": frame, "name": "forward",
           "file": f"{PROJ}/model.py", "line": 100 + frame, "user_code": True, "recompile_limit": 8}  # fmt: skip
    if frame % 5 == 0:
        yield {"kind": "graph_break", "t": t + 0.1, "compile_id": cid, "frame_id": frame, "file": f"{PROJ}/model.py",
               "line": 120 + frame, "summary": "Data-dependent branching",
               "reason": "Data-dependent branching\n  Explanation: Detected data-dependent branching",
               "user_stack": [{"file": f"{PROJ}/train.py", "line": 88, "name": "<module>", "code": "loss = model(x)"},
                              {"file": f"{PROJ}/model.py", "line": 120 + frame, "name": "forward", "code": "if x.sum() > 0:"}]}  # fmt: skip
    for cache in ("aot_autograd", "fx_graph"):
        yield {"kind": "cache", "t": t + 0.2, "compile_id": cid, "frame_id": frame, "cache": cache,
               "result": "hit" if rng.random() < 0.7 else "miss", "key": f"{rng.getrandbits(64):016x}"}  # fmt: skip
    ev = {"kind": "compile", "t": t + 0.5, "compile_id": cid, "frame_id": frame, "co_name": "forward",
          "co_filename": f"{PROJ}/model.py", "co_firstlineno": 100 + frame, "cache_size": min(n // 40, 7),
          "accumulated_cache_size": min(n // 40, 7), "guard_count": 40, "graph_op_count": 300,
          "entire_frame_compile_time_s": rng.uniform(0.3, 4.0), "backend_compile_time_s": 0.2,
          "inductor_compile_time_s": 0.2, "has_guarded_code": True, "start_time": t, "recompile_limit": 8}  # fmt: skip
    if recompile:
        ev["recompile_reason"] = "tensor 'x' size mismatch at index 1"
    yield ev


def write(path: str, hours: float) -> tuple[int, int]:
    enc = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    lines = 0
    with open(path, "w", encoding="utf-8") as f:
        buf = []
        for ev in events(hours):
            buf.append(enc.encode(ev))
            lines += 1
            if len(buf) >= 10_000:
                f.write("\n".join(buf) + "\n")
                buf.clear()
        if buf:
            f.write("\n".join(buf) + "\n")
    return lines, os.path.getsize(path)


# ---------------------------------------------------------------- measuring


def bare_json_pass(path: str) -> float:
    """The yardstick: read the lines and json.loads each, nothing else (in a child, like the others)."""
    code = "import json,sys\nwith open(sys.argv[1],'rb') as f:\n    for line in f:\n        json.loads(line)\n"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, path], check=True)
    return time.perf_counter() - t0


def timed_child(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-500:]}")
    return wall, usage.ru_maxrss / 1024


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
            wall, rss = timed_child([sys.executable, "-m", "ctmon", "report", path, "--json"], env)
            results[root]["report_s"].append(wall)
            results[root]["report_rss_mb"].append(rss)
            first, loaded = replay_to_screen(root, path)
            results[root]["replay_first_s"].append(first)
            results[root]["replay_loaded_s"].append(loaded)
    out: dict[str, Any] = {"file_mb": os.path.getsize(path) / 1e6, "runs": runs, "bare_json_s": spread(bare)}
    for root, figs in results.items():
        out[root] = {k: spread(v) for k, v in figs.items()}
    return out


def spread(vals: list[float]) -> dict[str, float]:
    return {"min": round(min(vals), 3), "median": round(statistics.median(vals), 3), "max": round(max(vals), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
        roots = args.root or [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
        print(json.dumps(measure(args.file, roots, args.runs), indent=2))


if __name__ == "__main__":
    main()
