"""Does the TUI keep repainting while the store swallows a firehose?

A synthetic recording (by default 200k events: a compile storm of
recompiles over hundreds of frames, graph breaks at hundreds of sites, cache
results, step batches of 50, output, notes, and an 8-GPU sample per 1000
events) is read by the real feed
(``RecordingFeed``: a reader thread decoding JSON lines, as for a live
socket) into the real app, headless at a fixed terminal size. We count the
screen updates Textual actually composes (``App._display`` calls) while
events are being ingested, and the events folded per second.

    .venv/bin/python benchmarks/tui_firehose.py               # 200k events, 160x48 and 80x24
    .venv/bin/python benchmarks/tui_firehose.py --events 50000 --json
    .venv/bin/python benchmarks/tui_firehose.py --write docs/perf_tui.md

Requirement: at least 10 repaints per second during ingestion.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import random
import resource
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from ctmon.tui.app import CtmonApp  # noqa: E402
from ctmon.wire import protocol  # noqa: E402
from ctmon.wire.feeds import RecordingFeed  # noqa: E402

REQUIRED_REPAINTS_PER_S = 10.0


def synthetic_events(n: int, seed: int = 0) -> list[dict[str, Any]]:
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


class TimedApp(CtmonApp):
    """The app, noting when it folds events (to know when ingestion ran)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ingests: list[tuple[float, float]] = []

    async def on_ingest(self, message: Any) -> None:
        t0 = time.perf_counter()
        await super().on_ingest(message)
        self.ingests.append((t0, time.perf_counter()))


def write_recording(events: list[dict[str, Any]], path: str) -> None:
    with open(path, "wb") as f:
        for ev in events:
            f.write(protocol.encode(ev))


async def measure(path: str, n_events: int, size: tuple[int, int], timeout: float) -> dict[str, Any]:
    app = TimedApp(RecordingFeed(path))
    displays: list[float] = []
    real_display = app._display

    def counting_display(screen, renderable):  # type: ignore[no-untyped-def]
        if renderable is not None and not app._batch_count:
            displays.append(time.perf_counter())
        return real_display(screen, renderable)

    app._display = counting_display  # type: ignore[method-assign]
    ingests = app.ingests
    cpu0 = time.process_time()
    async with app.run_test(size=size) as pilot:
        deadline = time.perf_counter() + timeout
        while not app.loaded and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
        await pilot.pause(0.2)
        loaded = app.loaded
        applied = app.applied
        compiles = app.full.compile.compile_count
        view_refreshes = app.view_refreshes
    cpu = time.process_time() - cpu0
    start, end = ingests[0][0], ingests[-1][1]
    during = [d for d in displays if start <= d <= end]
    gaps = [b - a for a, b in zip([start] + during, during + [end], strict=False)]
    duration = end - start
    return {
        "terminal": f"{size[0]}x{size[1]}",
        "events": applied,
        "complete": loaded and applied == n_events,
        "ingest_s": round(duration, 3),
        "events_per_s": round(applied / duration) if duration > 0 else None,
        "repaints": len(during),
        "repaints_per_s": round(len(during) / duration, 1) if duration > 0 else None,
        "max_gap_ms": round(max(gaps) * 1000, 1) if gaps else None,
        "view_refreshes": view_refreshes,
        "compiles_in_store": compiles,
        "process_cpu_s": round(cpu, 2),
    }


async def measure_idle(events: list[dict[str, Any]], size: tuple[int, int], seconds: float) -> dict[str, Any]:
    """A live job that has gone quiet: what does the screen cost?"""
    from ctmon.tui.testing import QueueFeed, wait_applied

    feed = QueueFeed()
    feed.push([e for e in events if e.get("kind") != "exit"][:5000])
    app = CtmonApp(feed, launched=True)
    displays = 0
    real_display = app._display

    def counting_display(screen, renderable):  # type: ignore[no-untyped-def]
        nonlocal displays
        if renderable is not None and not app._batch_count:
            displays += 1
        return real_display(screen, renderable)

    app._display = counting_display  # type: ignore[method-assign]
    async with app.run_test(size=size) as pilot:
        await wait_applied(pilot, 1)
        await wait_applied(pilot, app.applied)
        await asyncio.sleep(1.0)
        displays = 0
        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        feed.end()
    return {
        "terminal": f"{size[0]}x{size[1]}",
        "seconds": round(wall, 1),
        "cpu_percent": round(100 * cpu / wall, 2),
        "repaints_per_s": round(displays / wall, 2),
    }


def rss_mib() -> float:
    try:
        import psutil

        return psutil.Process().memory_info().rss / (1 << 20)
    except Exception:
        return float("nan")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--sizes", default="160x48,80x24")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--write", metavar="FILE", help="write the figures as Markdown to FILE")
    ap.add_argument(
        "--idle-seconds", type=float, default=10.0, help="how long to measure an idle live screen (0: skip)"
    )
    args = ap.parse_args()
    import textual

    events = synthetic_events(args.events)
    n = len(events)
    idle = asyncio.run(measure_idle(events, (160, 48), args.idle_seconds)) if args.idle_seconds > 0 else None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "firehose.jsonl")
        write_recording(events, path)
        mb = os.path.getsize(path) / (1 << 20)
        del events
        results = []
        for spec in args.sizes.split(","):
            w, h = (int(x) for x in spec.lower().split("x"))
            results.append(asyncio.run(measure(path, n, (w, h), args.timeout)))
    report = {
        "events": n,
        "recording_mib": round(mb, 1),
        "results": results,
        "idle": idle,
        "rss_mib": round(rss_mib(), 1),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "machine": machine(),
        "textual": textual.__version__,
        "command": " ".join(
            [
                os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT) else sys.executable,
                os.path.relpath(__file__, ROOT),
                *sys.argv[1:],
            ]
        ),
        "date": datetime.date.today().isoformat(),
        "required_repaints_per_s": REQUIRED_REPAINTS_PER_S,
        "ok": all(r["complete"] and (r["repaints_per_s"] or 0) >= REQUIRED_REPAINTS_PER_S for r in results),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_text(report))
    if args.write:
        with open(args.write, "w") as f:
            f.write(render_markdown(report))
    return 0 if report["ok"] else 1


def render_text(r: dict[str, Any]) -> str:
    lines = [f"{r['events']:,} events ({r['recording_mib']} MiB of JSON lines), {r['machine']}"]
    for x in r["results"]:
        lines.append(
            f"  {x['terminal']:>7}: {x['events_per_s']:,} events/s over {x['ingest_s']} s, "
            f"{x['repaints_per_s']} repaints/s ({x['repaints']} repaints, longest gap {x['max_gap_ms']} ms)"
            + ("" if x["complete"] else "  INCOMPLETE")
        )
    if r.get("idle"):
        i = r["idle"]
        lines.append(
            f"  idle live screen ({i['terminal']}, {i['seconds']} s): {i['cpu_percent']}% CPU, "
            f"{i['repaints_per_s']} repaints/s"
        )
    lines.append(f"  RSS {r['rss_mib']} MiB (peak {r['max_rss_mib']} MiB, both runs and the generated events)")
    lines.append(f"  {'OK' if r['ok'] else 'FAIL'}: at least {r['required_repaints_per_s']:g} repaints/s required")
    return "\n".join(lines)


def idle_text(r: dict[str, Any]) -> str:
    i = r.get("idle")
    if not i:
        return ""
    return (
        f"An idle screen (a live job with 5,000 events of history that has gone quiet, "
        f"{i['terminal']}, measured for {i['seconds']} s): {i['cpu_percent']}% of one core, "
        f"{i['repaints_per_s']} repaints/s (the header's clock, once a second).\n"
    )


def render_markdown(r: dict[str, Any]) -> str:
    rows = "\n".join(
        f"| {x['terminal']} | {x['events']:,} | {x['ingest_s']} s | {x['events_per_s']:,} | "
        f"{x['repaints_per_s']} | {x['max_gap_ms']} ms |"
        for x in r["results"]
    )
    return f"""# TUI under a firehose

The live view must stay responsive while the store ingests events as fast as
they come: at least {r["required_repaints_per_s"]:g} repaints a second.

`benchmarks/tui_firehose.py` writes a synthetic recording of {r["events"]:,}
events ({r["recording_mib"]} MiB: a compile storm of recompiles over 400
frames, graph breaks at 300 sites, cache results, step batches of 50,
output, notes, and an 8-GPU sample per 1000 events) and opens the real app on it, headless, through the real
feed (a reader thread decoding JSON lines, as for a live job's socket). It
counts the screen updates Textual composes while the events are being
folded into the store, and the events folded per second.

| terminal | events | ingest time | events/s | repaints/s | longest gap |
|---|---|---|---|---|---|
{rows}

{idle_text(r)}
Process RSS at the end: {r["rss_mib"]} MiB (peak {r["max_rss_mib"]} MiB, which includes the
generated event list and both runs).

How it keeps up:

- the reader thread hands batches over with at most one wake-up message in
  flight (`ctmon/tui/ingest.py`) and stops reading when the UI is 20,000
  events behind (a live supervisor just keeps its file cursor);
- the UI thread folds events in slices (checked every 32 events) and, when a
  repaint is due, updates the views and *waits until the screen has been
  drawn* before the next slice; the slice shrinks when painting is slow
  (target: one repaint per 1/15 s). Without the wait the app's own message
  queue is never empty and starves every other task: 0 repaints in 7 s;
- views redraw at most 20 times a second and only when the store sections
  they read changed; list panes render only visible rows and keep rendered
  rows across updates; row counts change without a screen re-layout;
- the viewer raises the garbage collector's thresholds (20000, 100, 100):
  with the defaults a quarter of the time went to collections of the
  growing store, with 0.4 s pauses.

Where the time goes (cProfile, 120k events at 160x48): most of the ingest
time is the store folding events -- `CompileState.on_compile` counts a
compile's graph breaks by scanning every break site's compile ids (O(sites x
ids) per compile: 300 sites in this storm), and `StepSeries.add_batch`
loops in Python over every boundary. Painting a 160x48 screen on which every
panel changed costs 25-40 ms. The figures vary by about a third from run to
run on this shared 2-core machine.

- Machine: {r["machine"]}
- Textual {r["textual"]}
- Command: `{r["command"]}`
- Date: {r["date"]}
"""


if __name__ == "__main__":
    sys.exit(main())
