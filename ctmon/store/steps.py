"""Step boundaries and the intervals between them.

Per source (see protocol.STEP_SOURCES) a series keeps, in compact arrays, the
wall time of every boundary and the host interval before it; device windows
(CUDA events, from the agent) override host intervals with device-true ones.
The session's step clock is the highest-ranked source seen; lower ones are
kept only until a higher one appears.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from ctmon.wire import protocol

NAN = float("nan")
MAX_DELTA_NS = 1 << 62  # ~146 years: anything larger is not a step interval


@dataclass
class StepStats:
    count: int = 0  # boundaries
    intervals: int = 0
    last_ms: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    mean_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    steps_per_s: float | None = None


def percentile(sorted_vals: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default method)."""
    n = len(sorted_vals)
    if n == 0:
        return None
    if n == 1:
        return sorted_vals[0]
    pos = (n - 1) * q
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * frac


class StepSeries:
    def __init__(self, source: str) -> None:
        self.source = source
        # 16 bytes a step: a double for the wall time, a float for the interval
        # (7 significant digits is plenty for milliseconds); device-timed
        # intervals exist only on CUDA, so their array is made on first use.
        self.times = array("d")  # wall time of boundary i
        self.host_ms = array("f")  # interval ending at boundary i (NaN for i == 0 / after a gap)
        self.dev_ms: array[float] | None = None  # device-timed interval, NaN where unknown
        self.device_windows = 0
        self._pending_windows: list[tuple[int, int, float]] = []
        self._p50_cache: tuple[Any, float | None] | None = None
        self._above: list[tuple[int, float]] = []
        self._above_floor: float | None = None
        self._above_next = 1
        self._retimed_from = 1 << 62
        self._sorted_cache: tuple[int, int, list[float]] | None = None

    def __len__(self) -> int:
        return len(self.times)

    def add_batch(self, i0: int, t0: float, deltas_ns: Iterable[int]) -> None:
        n = len(self.times)
        if i0 > n:  # boundaries were dropped by the agent: pad the gap
            gap = i0 - n
            # times stay non-decreasing (bisect relies on it); intervals are unknown
            last = self.times[-1] if n else float(t0)
            self.times.extend([last] * gap)
            self.host_ms.extend([NAN] * gap)
            if self.dev_ms is not None:
                self.dev_ms.extend([NAN] * gap)
        elif i0 < n:  # duplicate or reordered batch: keep what we have
            return
        times, host, dev = self.times, self.host_ms, self.dev_ms
        deltas = deltas_ns if isinstance(deltas_ns, list) else list(deltas_ns)
        if not deltas:
            return
        if not all(type(d) is int and 0 <= d < MAX_DELTA_NS for d in deltas):
            deltas = [d if type(d) is int and 0 <= d < MAX_DELTA_NS else 0 for d in deltas]
        # Times come from an integer running sum: adding tiny deltas to a
        # Unix-epoch float would drift (and could even run backwards).
        cum = list(accumulate(deltas[1:], initial=0))
        if len(times) and t0 < times[-1]:
            t0 = times[-1]  # keep times non-decreasing across batches (bisect relies on it)
        new_times = [t0 + c / 1e9 for c in cum]
        ms = [d / 1e6 if d > 0 else NAN for d in deltas]
        if not (n > 0 or i0 > 0) or deltas[0] <= 0:
            ms[0] = NAN
        # all three arrays grow together, or not at all
        times.extend(new_times)
        host.extend(ms)
        if dev is not None:
            dev.extend([NAN] * len(deltas))
        if self._pending_windows:
            pending, self._pending_windows = self._pending_windows, []
            for w in pending:
                self.add_device_window(*w)

    def add_device_window(self, i0: int, i1: int, ms: float) -> None:
        if not (isinstance(i0, int) and isinstance(i1, int)) or isinstance(i0, bool) or i0 < 0 or i1 <= i0:
            return
        if not isinstance(ms, (int, float)) or ms != ms or ms < 0 or ms == float("inf"):
            return
        n = len(self.host_ms)
        if i1 >= n:
            # The window reached us before its boundaries (they travel by
            # another path): apply it when they arrive.
            if len(self._pending_windows) < 10_000:
                self._pending_windows.append((i0, i1, ms))
            return
        # Split the window's device time in proportion to the host intervals:
        # a fast step next to a slow one (a compile) keeps its own share.
        # Without usable host intervals, split it evenly.
        if self.dev_ms is None:
            self.dev_ms = array("f", [NAN]) * n
        host = [self.host_ms[k] for k in range(i0 + 1, i1 + 1)]
        total = sum(h for h in host if h == h and h > 0)
        if total > 0 and all(h == h and h > 0 for h in host):
            scale = ms / total
            for k, h in zip(range(i0 + 1, i1 + 1), host, strict=True):
                self.dev_ms[k] = h * scale
        else:
            per = ms / (i1 - i0)
            for k in range(i0 + 1, i1 + 1):
                self.dev_ms[k] = per
        self.device_windows += 1
        self._retimed_from = min(self._retimed_from, i0 + 1)
        self._sorted_cache = None

    def interval_ms(self, k: int) -> float:
        dev = self.dev_ms
        if dev is not None:
            d = dev[k]
            if d == d:
                return d
        return self.host_ms[k]

    def intervals(self, start: int = 0) -> list[float]:
        """Effective intervals (device-timed where known), NaNs dropped."""
        a = max(1, start)
        if self.dev_ms is None:
            return [h for h in self.host_ms[a:] if h == h]
        vals = [d if d == d else h for d, h in zip(self.dev_ms[a:], self.host_ms[a:], strict=True)]
        return [v for v in vals if v == v]

    def p50_estimate(self, sample: int = 100_000) -> float | None:
        """The median interval; from an even sample of them when there are
        very many (the findings need a threshold, not the exact median)."""
        n = len(self.host_ms) - 1
        if n <= sample:
            return self.stats().p50_ms if n > 0 else None
        key = (len(self.times) // 1000, self.device_windows // 100)
        if self._p50_cache is not None and self._p50_cache[0] == key:
            return self._p50_cache[1]
        stride = n // sample
        if self.dev_ms is None:
            vals = sorted(h for h in self.host_ms[1::stride] if h == h)
        else:
            vals = sorted(
                v
                for v in (
                    d if d == d else h for d, h in zip(self.dev_ms[1::stride], self.host_ms[1::stride], strict=True)
                )
                if v == v
            )
        p50 = percentile(vals, 0.5)
        self._p50_cache = (key, p50)
        return p50

    def intervals_above(self, threshold: float) -> list[tuple[int, float]]:
        """(index, ms) of every interval longer than threshold.

        Incremental: intervals above half the lowest threshold asked so far are
        kept, so a later call scans only the new intervals (and those that
        device windows retimed), not the whole run again."""
        n = len(self.host_ms)
        if self._above_floor is None or threshold < self._above_floor:
            self._above_floor = threshold / 2
            self._above = []
            self._above_next = 1
        start = min(self._above_next, self._retimed_from)
        if start < self._above_next:
            self._above = [kv for kv in self._above if kv[0] < start]
        floor = self._above_floor
        dev, host = self.dev_ms, self.host_ms
        if dev is None:
            self._above.extend((k, h) for k, h in zip(range(start, n), host[start:n], strict=True) if h > floor)
        else:
            self._above.extend(
                (k, d if d == d else h)
                for k, d, h in zip(range(start, n), dev[start:n], host[start:n], strict=True)
                if (d if d == d else h) > floor
            )
        self._above_next = n
        self._retimed_from = n
        return [kv for kv in self._above if kv[1] > threshold]

    def stats(self, window: int | None = None) -> StepStats:
        n = len(self.times)
        st = StepStats(count=n)
        if n < 2:
            return st
        start = max(1, n - window) if window else 1
        if window is None:
            vals = self._sorted_full()
        else:
            vals = sorted(self.intervals(start))
        if not vals:
            return st
        st.intervals = len(vals)
        st.last_ms = self.interval_ms(n - 1) if self.interval_ms(n - 1) == self.interval_ms(n - 1) else None
        st.p50_ms = percentile(vals, 0.5)
        st.p90_ms = percentile(vals, 0.9)
        st.p99_ms = percentile(vals, 0.99)
        st.mean_ms = sum(vals) / len(vals)
        st.min_ms = vals[0]
        st.max_ms = vals[-1]
        if st.mean_ms and st.mean_ms > 0:
            st.steps_per_s = 1000.0 / st.mean_ms
        return st

    def _sorted_full(self) -> list[float]:
        key = (len(self.times), self.device_windows)
        cache = self._sorted_cache
        if cache is not None and (cache[0], cache[1]) == key:
            return cache[2]
        vals = sorted(self.intervals())
        self._sorted_cache = (key[0], key[1], vals)
        return vals

    def compile_marked(self, spans: list[tuple[float, float]]) -> set[int]:
        """Indices k of intervals [t(k-1), t(k)] that overlap a compile span."""
        marked: set[int] = set()
        times = self.times
        n = len(times)
        for start, end in spans:
            k = max(1, bisect_right(times, start))
            while k < n and times[k - 1] < end:
                marked.add(k)
                k += 1
        return marked


class StepClock:
    """All step series of a session; the best-ranked one is 'the' steps."""

    def __init__(self) -> None:
        self.series: dict[str, StepSeries] = {}
        self.current: StepSeries | None = None

    def _get(self, src: str) -> StepSeries:
        s = self.series.get(src)
        if s is None:
            s = self.series[src] = StepSeries(src)
            cur = self.current
            if cur is None or protocol.STEP_RANK.get(src, -1) >= protocol.STEP_RANK.get(cur.source, -1):
                self.current = s
                # lower-ranked series are no longer needed
                for name in list(self.series):
                    if protocol.STEP_RANK.get(name, -1) < protocol.STEP_RANK.get(src, -1):
                        del self.series[name]
        return s

    def on_steps(self, ev: protocol.Event) -> bool:
        src = ev.get("src")
        ns = ev.get("ns")
        i0 = ev.get("i0", 0)
        if not isinstance(src, str) or src not in protocol.STEP_RANK or not isinstance(ns, list):
            return False
        cur = self.current
        if cur is not None and protocol.STEP_RANK[src] < protocol.STEP_RANK.get(cur.source, -1):
            return False
        if not isinstance(i0, int) or i0 < 0:
            return False
        t0 = ev.get("t")
        ok_t = isinstance(t0, (int, float)) and not isinstance(t0, bool) and t0 == t0 and abs(t0) != float("inf")
        self._get(src).add_batch(i0, float(t0) if ok_t else 0.0, ns)  # type: ignore[arg-type]
        return True

    def on_device_time(self, ev: protocol.Event) -> bool:
        src = ev.get("src")
        s = self.series.get(src) if isinstance(src, str) else None
        if s is None:
            return False
        ms = ev.get("ms")
        if not isinstance(ms, (int, float)):
            return False
        s.add_device_window(ev.get("i0"), ev.get("i1"), ms)  # type: ignore[arg-type]
        return True

    @property
    def count(self) -> int:
        return len(self.current) if self.current is not None else 0

    @property
    def source(self) -> str | None:
        return self.current.source if self.current is not None else None
