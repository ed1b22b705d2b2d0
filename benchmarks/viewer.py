"""The viewer's own costs: ingest speed, memory, idle CPU, event-to-screen latency.

  ingest    a synthetic firehose through the real reader (RecordingFeed) into the
            real store and the headless TUI: events/s folded, repaints/s meanwhile.
            Two mixes: "steady" (a training job at full tilt: output lines, step
            batches, GPU samples, a few compile/cache events) and "storm" (a
            compile storm: recompiles over 400 frames, graph breaks at 300 sites).
  rss       the same app after ingesting 1M events of the steady mix, in a fresh
            process (so nothing but the viewer is in its memory).
  idle      a real job under ctmon (steady steps and output, 25 events/s, and a
            fresh function compiled with a graph break every 2 s) watched by the
            headless TUI for N seconds: CPU % of one core used by the viewer.
  latency   the same run: for each event, the time from when it happened (its
            `t`) to the first repaint after it was folded, p50/p99, for the
            steady stream (steps, output) and for compiles and graph breaks.

Usage: python benchmarks/viewer.py {ingest,rss,idle,latency,all} [--events N] [--seconds S] [--no-compiles]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from ctmon.wire import protocol  # noqa: E402


def steady_events(n: int, seed: int = 0):  # type: ignore[no-untyped-def]
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


def write(events, path: str) -> int:  # type: ignore[no-untyped-def]
    n = 0
    with open(path, "wb") as f:
        for ev in events:
            f.write(protocol.encode(ev))
            n += 1
    return n


def ingest(n: int, size: tuple[int, int] = (160, 48)) -> dict[str, Any]:
    from tui_firehose import measure, synthetic_events

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mix in ("steady", "storm"):
            path = os.path.join(tmp, f"{mix}.jsonl")
            count = write(steady_events(n) if mix == "steady" else synthetic_events(n), path)
            res = asyncio.run(measure(path, count, size, 600))
            res["mix"] = mix
            res["mib"] = round(os.path.getsize(path) / (1 << 20), 1)
            out[mix] = res
    return out


RSS_CHILD = r"""
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[2])
from ctmon.wire.feeds import RecordingFeed
from ctmon.tui.app import CtmonApp
import psutil
async def main():
    app = CtmonApp(RecordingFeed(sys.argv[1]))
    async with app.run_test(size=(160, 48)) as pilot:
        t0 = time.perf_counter()
        while not app.loaded and time.perf_counter() - t0 < 900:
            await asyncio.sleep(0.05)
        await pilot.pause(0.3)
        print(json.dumps({"events": app.applied, "rss_mib": round(psutil.Process().memory_info().rss / 2**20, 1),
                          "seconds": round(time.perf_counter() - t0, 1), "steps": app.full.steps.count}))
asyncio.run(main())
"""


def rss(n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "steady.jsonl")
        count = write(steady_events(n), path)
        out = subprocess.run(
            [sys.executable, "-c", RSS_CHILD, path, ROOT], capture_output=True, text=True, timeout=1200
        )
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        res = json.loads(out.stdout.strip().splitlines()[-1])
        res["generated"] = count
        res["mib"] = round(os.path.getsize(path) / (1 << 20), 1)
        return res


JOB = r"""
import sys, time, ctmon
period, seconds = float(sys.argv[1]), float(sys.argv[2])
torch = None
if len(sys.argv) > 3:  # with compile events: a fresh function compiled every 2 s
    import torch
    torch._dynamo.config.cache_size_limit = 10_000
end = time.time() + seconds
k = 0
while time.time() < end:
    time.sleep(period)
    ctmon.step()
    k += 1
    if k % 2 == 0:
        print(f"step {k} loss 0.{k % 9973:04d}", flush=True)
    if torch is not None and k % 50 == 0:
        src = f"def f{k}(x):\n    y = x + {k}\n    print('break')\n    return y * 2\n"
        scope = {}
        exec(compile(src, f"/bench/model_{k}.py", "exec"), scope)
        torch.compile(scope[f"f{k}"], backend="eager")(torch.ones(4))
"""


async def _watch_job(period: float, seconds: float, size: tuple[int, int], compiles: bool) -> dict[str, Any]:
    from ctmon.launch.daemon import start_detached
    from ctmon.launch.spec import JobSpec
    from ctmon.tui.app import CtmonApp
    from ctmon.wire.feeds import SocketFeed

    tmp = tempfile.mkdtemp(prefix="ctmon-viewer-")
    script = os.path.join(tmp, "job.py")
    with open(script, "w") as f:
        f.write(JOB)
    d = start_detached(
        JobSpec(
            "script",
            script,
            [str(period), str(seconds + 6)] + (["compile"] if compiles else []),
            cwd=tmp,
            python=sys.executable,
        ),
        os.path.join(tmp, "rec.jsonl"),
    )
    feed = SocketFeed(d.viewer_path)
    refreshes: list[tuple[float, int]] = []  # (when, events folded so far)
    displays: list[float] = []

    class TimedApp(CtmonApp):
        def refresh_views(self, force: bool = False) -> int:
            changed = super().refresh_views(force)
            refreshes.append((time.time(), self.applied))
            return changed

    app = TimedApp(feed, launched=True)
    real_display = app._display

    def counting_display(screen, renderable):  # type: ignore[no-untyped-def]
        if renderable is not None and not app._batch_count:
            displays.append(time.time())
        return real_display(screen, renderable)

    app._display = counting_display  # type: ignore[method-assign]
    async with app.run_test(size=size) as pilot:
        await asyncio.sleep(8.0 if compiles else 3.0)  # start-up (torch's import): history caught up
        displays.clear()
        cpu0, w0 = time.process_time(), time.time()
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.time() - w0
        d.proc.terminate()
        await pilot.pause(0.2)
    feed.close()
    # latency: event i (in feed order, i.e. recording order) is on screen at
    # the first screen update after the first view refresh that had folded it
    # the steady stream (output lines, step batches) and what a user waits
    # for (compiles, graph breaks), apart: they repaint at different cadences
    steady: list[float] = []
    urgent: list[float] = []
    import bisect

    counts = [n for _, n in refreshes]
    with open(os.path.join(tmp, "rec.jsonl"), "rb") as f:
        index = 0
        for line in f:
            ev = protocol.decode(line)
            if ev is None:
                continue
            index += 1
            kind = ev["kind"]
            into = steady if kind in ("output", "steps") else urgent if kind in ("compile", "graph_break") else None
            if into is None or not (w0 <= ev["t"] <= w0 + wall):
                continue
            k = bisect.bisect_left(counts, index)
            if k >= len(refreshes):
                continue
            j = bisect.bisect_left(displays, refreshes[k][0])
            if j < len(displays):
                into.append((displays[j] - ev["t"]) * 1000)
    out: dict[str, Any] = {
        "seconds": round(wall, 1),
        "viewer_cpu_percent": round(100 * cpu / wall, 2),
        "repaints_per_s": round(len(displays) / wall, 1),
    }
    for name, lat in (("steady", steady), ("compile_events", urgent)):
        lat.sort()
        out[name] = {
            "events_measured": len(lat),
            "latency_p50_ms": round(statistics.median(lat), 1) if lat else None,
            "latency_p99_ms": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1) if lat else None,
            "latency_max_ms": round(lat[-1], 1) if lat else None,
        }
    return out


def idle_and_latency(seconds: float, compiles: bool) -> dict[str, Any]:
    os.environ.setdefault("CTMON_RUNTIME_DIR", tempfile.mkdtemp(prefix="ctmon-run-"))
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="ctmon-state-"))
    return asyncio.run(_watch_job(0.04, seconds, (160, 48), compiles))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["ingest", "rss", "idle", "latency", "all"])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--rss-events", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--no-compiles", action="store_true", help="idle job without torch (no compile events)")
    a = ap.parse_args()
    import platform

    import textual

    res: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "textual": textual.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    if a.what in ("ingest", "all"):
        res["ingest"] = ingest(a.events)
    if a.what in ("rss", "all"):
        res["rss"] = rss(a.rss_events)
    if a.what in ("idle", "latency", "all"):
        res["idle_latency"] = idle_and_latency(a.seconds, not a.no_compiles)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
