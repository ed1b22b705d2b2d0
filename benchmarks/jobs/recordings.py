"""The synthetic recordings the viewer benchmarks read (benchmarks/viewer.py,
benchmarks/day_recording.py) and tests/test_tui_app.py's firehose test:

* ``steady_events(n)``: a training job at full tilt (60 % output lines, 30 %
  step batches of 16, 5 % 8-GPU samples, compiles, cache results, breaks),
  a generator: a million events never sit in memory;
* ``storm_events(n)``: a compile storm;
* ``day_events(hours)``: a recording shaped like a 24-hour training run;
* ``write(events, path)``: the events as a recording, as ctmon writes one.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import Any

from ctmon.wire import protocol


def write(events: Iterable[dict[str, Any]], path: str) -> int:
    """Write the events as JSON lines; returns how many."""
    n = 0
    with open(path, "wb") as f:
        buf: list[bytes] = []
        for ev in events:
            buf.append(protocol.encode(ev))
            n += 1
            if len(buf) >= 10_000:
                f.write(b"".join(buf))
                buf.clear()
        f.write(b"".join(buf))
    return n


# ------------------------------------------------------------- steady mix


def steady_events(n: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """A training job at full tilt, as a generator (1M events never sit in memory)."""
    rng = random.Random(seed)
    t = 1.7e9
    yield {
        "kind": "session",
        "t": t,
        "v": 1,
        "ctmon": "0.1.0",
        "id": "steady",
        "mode": "attach",
        "command": ["python", "train.py"],
        "cwd": "/home/alice/proj",
        "host": "bench",
        "pid": 1,
        "job_pid": 2,
    }
    yield {"kind": "torch", "t": t, "torch": "2.11.0+cu130", "cuda": "13.0"}
    i0 = 0
    for k in range(n - 3):
        t += 0.0005
        r = rng.random()
        if r < 0.60:
            yield {
                "kind": "output",
                "t": t,
                "stream": "stdout",
                "data": f"step {k} loss {rng.random():.4f} lr 3.0e-04 tok/s 412331\n",
            }
        elif r < 0.90:
            ns = [int(rng.gauss(1e6, 5e4)) for _ in range(16)]
            yield {"kind": "steps", "t": t, "src": "optimizer", "i0": i0, "ns": ns}
            i0 += len(ns)
        elif r < 0.95:
            yield {
                "kind": "sample",
                "t": t,
                "cpu_percent": 101.0,
                "rss": 1 << 33,
                "tree_rss": 1 << 34,
                "threads": 40,
                "procs": 9,
                "gpus": [
                    {
                        "index": g,
                        "name": "NVIDIA H100 80GB HBM3",
                        "util": rng.randrange(90, 100),
                        "mem_used": 1 << 36,
                        "mem_total": 85899345920,
                        "power_w": 600.0,
                        "power_limit_w": 700.0,
                        "temp_c": 61,
                        "proc_mem": 1 << 35,
                    }
                    for g in range(8)
                ],
            }
        elif r < 0.97:
            yield {"kind": "cache", "t": t, "compile_id": f"{k % 7}/0", "cache": "fx_graph", "result": "hit"}
        elif r < 0.99:
            f = k % 50
            yield {
                "kind": "compile",
                "t": t,
                "compile_id": f"{f}/{k}",
                "frame_id": f,
                "co_name": "forward",
                "co_filename": "/home/alice/proj/model.py",
                "co_firstlineno": 10 + f,
                "entire_frame_compile_time_s": 0.2,
                "recompile_reason": f"{f}/0: tensor 'x' size mismatch at index 1. expected 8, actual 9",
            }
        else:
            yield {
                "kind": "graph_break",
                "t": t,
                "compile_id": "0/0",
                "frame_id": 1,
                "file": "/home/alice/proj/model.py",
                "line": 100 + k % 40,
                "summary": "Data-dependent branching",
                "reason": "Data-dependent branching",
            }
    yield {"kind": "exit", "t": t + 1, "code": 0, "signal": None}


# -------------------------------------------------------------- storm mix


def storm_events(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """A compile storm: recompiles over 400 frames (some past the recompile
    limit), graph breaks at 300 sites, cache results, step batches of 50,
    output, notes, and an 8-GPU sample per 1000 events."""
    rng = random.Random(seed)
    t = 1_700_000_000.0
    evs: list[dict[str, Any]] = [
        {
            "kind": "session",
            "t": t,
            "v": 1,
            "ctmon": "0.1.0",
            "id": "firehose",
            "mode": "attach",
            "command": ["python", "train.py", "--firehose"],
            "cwd": "/home/alice/proj",
            "host": "bench",
            "pid": 1,
            "job_pid": 2,
            "recording": "/tmp/firehose.jsonl",
        },
        {"kind": "process", "t": t, "pid": 2, "python": "3.11.7"},
        {"kind": "torch", "t": t, "torch": "2.13.0+cu126", "cuda": "12.6"},
    ]
    frames = 400
    sites = 300
    cid_next = [0] * frames
    step_i = 0
    k = 0
    while len(evs) < n:
        t += 0.001  # a thousand events a second of job time: samples come once a second
        k += 1
        if k % 1000 == 0:
            evs.append(
                {
                    "kind": "sample",
                    "t": t,
                    "cpu_percent": rng.random() * 200,
                    "rss": 1 << 33,
                    "tree_rss": 1 << 34,
                    "threads": 40,
                    "procs": 9,
                    "cpus": 16,
                    "gpus": [
                        {
                            "index": i,
                            "name": "NVIDIA H100 80GB HBM3",
                            "util": rng.randrange(101),
                            "mem_used": rng.randrange(1 << 36),
                            "mem_total": 85899345920,
                            "power_w": 500.0,
                            "power_limit_w": 700.0,
                            "temp_c": 60,
                            "proc_mem": 1 << 35,
                        }
                        for i in range(8)
                    ],
                }
            )
            continue
        r = rng.random()
        if r < 0.10:  # compile storm: recompiles over 400 frames, some past the limit
            f = rng.randrange(frames)
            c = cid_next[f]
            cid_next[f] += 1
            cid = f"{f}/{c}"
            line = 10 + f
            evs.append(
                {
                    "kind": "compile_start",
                    "t": t,
                    "compile_id": cid,
                    "frame_id": f,
                    "name": f"fn_{f}",
                    "file": f"/home/alice/proj/model_{f % 20}.py",
                    "line": line,
                    "user_code": True,
                    "recompile_limit": 8,
                }
            )
            ev = {
                "kind": "compile",
                "t": t + 0.0005,
                "compile_id": cid,
                "frame_id": f,
                "co_name": f"fn_{f}",
                "co_filename": f"/home/alice/proj/model_{f % 20}.py",
                "co_firstlineno": line,
                "cache_size": c,
                "entire_frame_compile_time_s": rng.random() * 0.5,
                "recompile_limit": 8,
            }
            if c:
                ev["recompile_reason"] = (
                    f"{f}/{c - 1}: tensor 'x' size mismatch at index 0. expected {c}, actual {c + 1}"
                )
            if c >= 8:
                ev["fail_type"] = "RecompileLimitExceeded"
                ev["fail_reason"] = "Dynamo recompile limit exceeded (8)"
            evs.append(ev)
        elif r < 0.20:
            s = rng.randrange(sites)
            evs.append(
                {
                    "kind": "graph_break",
                    "t": t,
                    "compile_id": "0/0",
                    "frame_id": s % frames,
                    "file": f"/home/alice/proj/model_{s % 20}.py",
                    "line": 100 + s,
                    "summary": f"Unsupported call number {s % 17}",
                    "reason": f"Encountered graph break {s}\n  Explanation: something {s}",
                    "explanation": f"something {s}",
                    "hints": ["avoid it"],
                    "user_stack": [{"file": "/home/alice/proj/train.py", "line": 5, "name": "<module>"}],
                }
            )
        elif r < 0.30:
            evs.append(
                {
                    "kind": "cache",
                    "t": t,
                    "compile_id": "1/0",
                    "cache": rng.choice(["fx_graph", "aot_autograd"]),
                    "result": rng.choice(["hit", "miss", "hit", "bypass"]),
                    "reason": "unsupported",
                }
            )
        elif r < 0.65:
            deltas = [int(rng.gauss(25e6, 2e6)) for _ in range(50)]
            evs.append({"kind": "steps", "t": t, "src": "optimizer", "i0": step_i, "ns": deltas})
            step_i += len(deltas)
        elif r < 0.99:
            evs.append(
                {
                    "kind": "output",
                    "t": t,
                    "stream": rng.choice(["stdout", "stderr"]),
                    "data": "".join(f"epoch 3 step {k} loss {rng.random():.4f}\n" for _ in range(3)),
                }
            )
        else:
            evs.append({"kind": "note", "t": t, "level": "info", "message": f"note {k}"})
    evs.append({"kind": "exit", "t": t + 1, "code": 0, "signal": None})
    return evs


# -------------------------------------------------------- a day-long run

STEP_S = 1 / 119.0  # ~8.4 ms: 10.3M boundaries in 24 h
BATCH = 12
T0 = 1_790_000_000.0
PROJ = "/home/alice/proj"


def day_events(hours: float, seed: int = 0) -> Iterator[dict[str, Any]]:
    """One H100 training job at ~119 steps/s for ``hours`` (10.3M step
    boundaries a day, in batches of 12 as the supervisor drains its ring),
    1 Hz GPU/CPU samples, ~200k lines of output a day, a few thousand
    compiles with their cache results and recompile reasons, and graph
    breaks: 1.16M lines, ~215 MB for 24 hours. Deterministic (seeded), so
    two checkouts read the same bytes."""
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
            yield day_sample(rng, next_sample)
            next_sample += 1.0
        while next_output <= t:
            yield {"kind": "output", "t": next_output, "stream": "stdout",
                   "data": f"step {step_i:>9} loss {rng.uniform(1.5, 3.0):.4f} lr 3.0e-04 tok/s {rng.randrange(400_000, 420_000)}\n"}  # fmt: skip
            next_output += 0.432  # 200k lines a day
        # compiles: a warm-up burst, then an occasional recompile (a few thousand a day)
        if (step_i < 2000 and step_i % 24 == 0) or rng.random() < 0.0033:
            yield from day_compile(rng, t, compile_id, compile_id % frames)
            compile_id += 1
    yield {"kind": "exit", "t": t + 1.0, "code": 0, "signal": None}


def day_sample(rng: random.Random, t: float) -> dict[str, Any]:
    return {
        "kind": "sample", "t": t, "cpu_percent": rng.uniform(95, 110), "rss": 12 << 30, "tree_rss": 20 << 30,
        "threads": 60, "procs": 9, "sys_cpu_percent": 12.5, "sys_mem_used": 200 << 30, "sys_mem_total": 2 << 40,
        "cpus": 128,
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "util": rng.randrange(85, 100),
                  "mem_util": rng.randrange(30, 60), "mem_used": 71 << 30, "mem_total": 85_045_952_512,
                  "power_w": rng.uniform(550, 690), "power_limit_w": 700.0, "temp_c": 63, "sm_clock_mhz": 1980,
                  "proc_mem": 70 << 30}],
    }  # fmt: skip


def day_compile(rng: random.Random, t: float, n: int, frame: int) -> Iterator[dict[str, Any]]:
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
