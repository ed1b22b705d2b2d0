"""Whether the step path's mean holds a rare cost (a part of hook_cost_fine.py).

The step path's mean can sit well above its median. That could be a rare
large cost of the path -- now and then a step hundreds of µs slower with
ctmon's path in than out -- and two things in the job's thread could make
one: Python's garbage collector (whose pace any allocation sets) and the
device timer's CUDA events. Phase 1 logs both, in every chunk, on and off
alike, so each slow step can be put beside what ran inside it:

* each collection (``gc.callbacks``: its start, end and generation);
* each CUDA event the device timer records (its events wrapped as they are
  made; a query costs what it did).

``summarise`` then gives, for each part's chunks and the off chunks apart,
collections and slow steps per thousand steps, and each part's mean again
with the steps a collection or an event touched left out of both sides.
(On the H100 hosts neither was it: their steps spread ±300 µs on their own,
and the path moves that whole spread up by a few µs: docs/PERFORMANCE.md.)
"""

from __future__ import annotations

import bisect
import gc
import statistics
import time
from typing import Any

from hook_cost import mean_ci  # this folder is on the path, as the script's own

SLOW_NS = 300_000  # a step this much over the median is slow


class _LoggedEvent:
    """A CUDA event whose records are logged (the rest passed through)."""

    __slots__ = ("ev", "log")

    def __init__(self, ev: Any, log: list[int]) -> None:
        self.ev, self.log = ev, log

    def record(self) -> None:
        self.log.append(time.perf_counter_ns())
        self.ev.record()

    def query(self) -> bool:
        return bool(self.ev.query())

    def elapsed_time(self, end: Any) -> float:
        return float(self.ev.elapsed_time(end.ev))


def install_logs(timer: Any) -> tuple[dict[str, list[Any]], Any]:
    """Start logging collections and the timer's CUDA events (``timer``
    may be None: no device timer, no events); returns the logs and what
    stops the collections' log."""
    logs: dict[str, list[Any]] = {"gc": [], "events": []}
    started = [0]
    now = time.perf_counter_ns

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = now()
        else:
            logs["gc"].append((started[0], now(), info.get("generation", -1)))

    gc.callbacks.append(on_gc)
    if timer is not None:
        make, events = timer._make, logs["events"]
        timer.reset(timer._src)
        timer._pool.clear()  # events made before: unlogged
        timer._make = lambda: _LoggedEvent(make(), events)
    return logs, lambda: gc.callbacks.remove(on_gc)


def _touched(spans: list[tuple[int, int]], s: int, e: int) -> bool:
    """Whether [s, e] overlaps any of ``spans`` (sorted by start, short)."""
    i = bisect.bisect_right(spans, (e, 1 << 62))
    return any(b >= s for _, b in spans[max(0, i - 4) : i])


def summarise(res: dict[str, Any], chunk: int) -> dict[str, Any]:
    """Per part (each against its off chunks): collections by generation
    and slow steps, per thousand steps, and the path's mean with the steps
    a collection or a CUDA event touched left out."""
    ends, arms = res["path_ends"], res["path_arms"]
    gcs = sorted((s, e) for s, e, _ in res.get("path_gc", []))
    gens = {(s, e): g for s, e, g in res.get("path_gc", [])}
    events = sorted((t, t) for t in res.get("path_events", []))
    median = statistics.median(b - a for a, b in zip(ends, ends[1:], strict=False))
    side: dict[str, dict[str, float]] = {}
    chunks: list[tuple[str, list[tuple[int, bool, bool]]]] = []
    for c, arm in enumerate(arms):
        lo, hi = c * chunk + 2, (c + 1) * chunk
        if hi >= len(ends):
            break
        steps = []
        for i in range(lo + 1, hi + 1):
            s, e = ends[i - 1], ends[i]
            steps.append((e - s, _touched(gcs, s, e), _touched(events, s, e)))
        chunks.append((arm, steps))
    for arm, steps in chunks:
        d = side.setdefault(arm, {"steps": 0, "slow": 0, "slow_gc": 0, "slow_event": 0})
        for dt, g, ev in steps:
            d["steps"] += 1
            if dt - median > SLOW_NS:
                d["slow"] += 1
                d["slow_gc"] += g
                d["slow_event"] += ev
    for (s, e), g in gens.items():  # each collection to the side whose chunk holds it
        c = (bisect.bisect_right(ends, s) - 1) // chunk
        if 0 <= c < len(chunks):
            d = side[chunks[c][0]]
            d[f"gen{g}"] = d.get(f"gen{g}", 0) + 1
            d[f"gen{g}_us"] = d.get(f"gen{g}_us", 0) + (e - s) / 1e3
    per_k = {}
    for name, d in side.items():
        k = d["steps"] / 1000
        row: dict[str, Any] = {"steps": int(d["steps"])}
        row["slow_per_k"] = round(d["slow"] / k, 2)
        row["slow_with_gc_per_k"] = round(d["slow_gc"] / k, 2)
        row["slow_with_event_per_k"] = round(d["slow_event"] / k, 2)
        for g in range(3):
            n = d.get(f"gen{g}", 0)
            row[f"gen{g}_per_k"] = round(n / k, 2)
            row[f"gen{g}_us_each"] = round(d.get(f"gen{g}_us", 0) / n, 1) if n else None
        per_k[name] = row
    out: dict[str, Any] = {"median_step_us": round(median / 1e3, 1), **per_k}
    for part in side:
        if part == "off":
            continue
        for label, keep in (
            ("all", lambda g, ev: True),
            ("without_gc", lambda g, ev: not g),
            ("without_gc_or_event", lambda g, ev: not g and not ev),
        ):
            out[part][f"mean_{label}"] = _paired_mean(chunks, part, keep)
    return out


def _paired_mean(chunks: list[tuple[str, list[tuple[int, bool, bool]]]], part: str, keep: Any) -> dict[str, Any]:
    """The mean of the (part, off) pairs' differences of chunk means, over
    the steps ``keep`` lets in, as a share of the off chunks' mean step."""
    means: list[tuple[str, float]] = []
    for arm, steps in chunks:
        kept = [dt for dt, g, ev in steps if keep(g, ev)]
        means.append((arm, statistics.fmean(kept) if kept else float("nan")))
    pairs = []
    for (a1, m1), (a2, m2) in zip(means[::2], means[1::2], strict=False):
        if part not in (a1, a2):
            continue
        on, off = (m1, m2) if a1 == part else (m2, m1)
        if on == on and off == off:  # not NaN: both kept some steps
            pairs.append((on, off))
    if len(pairs) < 2:
        return {"pairs": len(pairs)}
    per = 100 / statistics.fmean(off for _, off in pairs)
    m, lo, hi = mean_ci([(on - off) * per for on, off in pairs])
    return {
        "pairs": len(pairs),
        "cost_pct": round(m, 3),
        "cost_pct_ci95": [round(lo, 3), round(hi, 3)],
        "cost_us": round(statistics.fmean(on - off for on, off in pairs) / 1e3, 2),
    }
