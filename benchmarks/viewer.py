"""The viewer's own costs: ingest speed, memory, idle CPU, event-to-screen latency.

Everything runs the real feed, store and Textual app, headless (160x48
unless said). The recordings are synthetic (jobs/recordings.py).

  ingest    a firehose through the real reader (RecordingFeed) into the store
            and the app: events/s folded, repaints/s meanwhile, for two mixes:
            "steady" (a training job at full tilt: output lines, step batches,
            GPU samples, a few compile/cache events) and "storm" (a compile
            storm: recompiles over 400 frames, graph breaks at 300 sites).
  firehose  the storm mix alone at each of ``--sizes`` (160x48 and 80x24),
            with the longest gap between repaints, and an idle live screen (a
            job with 5,000 events of history gone quiet) for
            ``--idle-seconds``; exit 1 under 10 repaints a second while
            folding.
  rss       the same app after ingesting 1M events of the steady mix, in a
            fresh process (so nothing but the viewer is in its memory).
  idle      a real job under ctmon (jobs/paced_steps.py: 25 steps/s, an
            output line every other step and, unless ``--no-compiles``, a fresh
            function compiled with a graph break every 2 s) watched for
            ``--seconds``: the viewer's CPU % of one core and repaints/s;
  latency   the same run: for each event, the time from when it happened (its
            `t`) to the first repaint after it was folded, p50/p99, for the
            steady stream (steps, output) and for compiles and graph breaks
            (``idle`` and ``latency`` are one measurement).

Usage: python benchmarks/viewer.py {ingest,firehose,rss,idle,latency,all} [--events N] [--seconds S]
           [--no-compiles] [--sizes 160x48,80x24] [--idle-seconds 10]
"""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import harness
from jobs.recordings import steady_events, storm_events, write

from ctmon.read.feeds import RecordingFeed
from ctmon.tui.app import CtmonApp
from ctmon.wire import protocol

REQUIRED_REPAINTS_PER_S = 10.0


def count_repaints(app: CtmonApp, into: list[float], clock: Callable[[], float]) -> None:
    """Note in ``into`` when each screen update Textual composes is sent out
    (``App._display`` with something to draw, outside a batch)."""
    real_display = app._display

    def counting_display(screen: Any, renderable: Any) -> Any:
        if renderable is not None and not app._batch_count:
            into.append(clock())
        return real_display(screen, renderable)

    app._display = counting_display  # type: ignore[method-assign]


class FoldTimedApp(CtmonApp):
    """The app, noting when it folds events (to know when ingestion ran)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ingests: list[tuple[float, float]] = []

    async def on_ingest(self, message: Any) -> None:
        t0 = time.perf_counter()
        await super().on_ingest(message)
        self.ingests.append((t0, time.perf_counter()))


# ---------------------------------------------------------- ingest, firehose


async def ingest_rate(path: str, n_events: int, size: tuple[int, int], timeout: float) -> dict[str, Any]:
    """A recording read by the real feed into the app: events folded a second,
    and the repaints Textual composed while they were folded."""
    app = FoldTimedApp(RecordingFeed(path))
    displays: list[float] = []
    count_repaints(app, displays, time.perf_counter)
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


async def quiet_screen(events: list[dict[str, Any]], size: tuple[int, int], seconds: float) -> dict[str, Any]:
    """A live job that has gone quiet: what does the screen cost?"""
    from ctmon.tui.testing import QueueFeed, wait_applied

    feed = QueueFeed()
    feed.push([e for e in events if e.get("kind") != "exit"][:5000])
    app = CtmonApp(feed, launched=True)
    displays: list[float] = []
    count_repaints(app, displays, time.perf_counter)
    async with app.run_test(size=size) as pilot:
        await wait_applied(pilot, 1)
        await wait_applied(pilot, app.applied)
        await asyncio.sleep(1.0)
        displays.clear()
        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        feed.end()
    return {
        "terminal": f"{size[0]}x{size[1]}",
        "seconds": round(wall, 1),
        "cpu_percent": round(100 * cpu / wall, 2),
        "repaints_per_s": round(len(displays) / wall, 2),
    }


def ingest(n: int, size: tuple[int, int] = (160, 48)) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mix in ("steady", "storm"):
            path = os.path.join(tmp, f"{mix}.jsonl")
            count = write(steady_events(n) if mix == "steady" else storm_events(n), path)
            res = asyncio.run(ingest_rate(path, count, size, 600))
            res["mix"] = mix
            res["mib"] = round(os.path.getsize(path) / (1 << 20), 1)
            out[mix] = res
    return out


def firehose(n: int, sizes: str, idle_seconds: float, timeout: float = 300.0) -> dict[str, Any]:
    events = storm_events(n)
    idle = asyncio.run(quiet_screen(events, (160, 48), idle_seconds)) if idle_seconds > 0 else None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "firehose.jsonl")
        count = write(events, path)
        mib = os.path.getsize(path) / (1 << 20)
        del events
        results = []
        for spec in sizes.split(","):
            w, h = (int(x) for x in spec.lower().split("x"))
            results.append(asyncio.run(ingest_rate(path, count, (w, h), timeout)))
    ok = all(r["complete"] and (r["repaints_per_s"] or 0) >= REQUIRED_REPAINTS_PER_S for r in results)
    return {"events": count, "recording_mib": round(mib, 1), "results": results, "idle": idle, "ok": ok}


def firehose_text(r: dict[str, Any]) -> str:
    lines = [f"{r['events']:,} events ({r['recording_mib']} MiB of JSON lines)"]
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
    lines.append(f"  {'OK' if r['ok'] else 'FAIL'}: at least {REQUIRED_REPAINTS_PER_S:g} repaints/s required")
    return "\n".join(lines)


# ----------------------------------------------------------------------- rss


RSS_CHILD = r"""
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[2])
from ctmon.read.feeds import RecordingFeed
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
        out = harness.run([sys.executable, "-c", RSS_CHILD, path, harness.ROOT], timeout=1200, check=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        res["generated"] = count
        res["mib"] = round(os.path.getsize(path) / (1 << 20), 1)
        return res


# ------------------------------------------------------------- idle, latency


async def _watch_job(period: float, seconds: float, size: tuple[int, int], compiles: bool) -> dict[str, Any]:
    from ctmon.launch.daemon import start_detached
    from ctmon.launch.spec import JobSpec
    from ctmon.read.feeds import SocketFeed

    tmp = tempfile.mkdtemp(prefix="ctmon-viewer-")
    d = start_detached(
        JobSpec(
            "script",
            harness.job("paced_steps.py"),
            [str(period), str(seconds + 6)] + (["compile"] if compiles else []),
            cwd=tmp,
            python=sys.executable,
        ),
        os.path.join(tmp, "rec.jsonl"),
    )
    feed = SocketFeed(d.viewer_path)
    refreshes: list[tuple[float, int]] = []  # (when, events folded so far)
    displays: list[float] = []

    class RefreshTimedApp(CtmonApp):
        def refresh_views(self, force: bool = False) -> int:
            changed = super().refresh_views(force)
            refreshes.append((time.time(), self.applied))
            return changed

    app = RefreshTimedApp(feed, launched=True)
    count_repaints(app, displays, time.time)
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
    ap = harness.parser(__doc__)
    ap.add_argument("what", choices=["ingest", "firehose", "rss", "idle", "latency", "all"])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--rss-events", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--no-compiles", action="store_true", help="idle job without torch (no compile events)")
    ap.add_argument("--sizes", default="160x48,80x24", help="firehose: terminal sizes")
    ap.add_argument("--idle-seconds", type=float, default=10.0, help="firehose: the quiet live screen (0: skip)")
    a = ap.parse_args()
    import textual

    res: dict[str, Any] = {"machine": harness.machine(), "textual": textual.__version__}
    if a.what in ("ingest", "all"):
        res["ingest"] = ingest(a.events)
    if a.what == "firehose":
        res["firehose"] = firehose(a.events, a.sizes, a.idle_seconds)
        print(firehose_text(res["firehose"]), file=sys.stderr)
    if a.what in ("rss", "all"):
        res["rss"] = rss(a.rss_events)
    if a.what in ("idle", "latency", "all"):
        res["idle_latency"] = idle_and_latency(a.seconds, not a.no_compiles)
    print(json.dumps(res, indent=2))
    if a.what == "firehose" and not res["firehose"]["ok"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
