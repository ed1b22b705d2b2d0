"""Step boundaries and the intervals between them.

Per source (see protocol.STEP_SOURCES) a series keeps every boundary as the
supervisor sent it: in batches (a ``steps`` event each), a batch's wall time
and first index, and every boundary's nanoseconds since the one before. A day
of training is ~10M boundaries in ~850k batches, so folding a batch is a
couple of C calls (no Python loop over its boundaries), a boundary costs 8
bytes, and anything derived -- a boundary's wall time, an interval in ms,
statistics -- is computed when asked, from the integers.

Device windows (CUDA events, from the agent) retime intervals: ``eff_ms``
(made on the first window) holds each interval as it counts, device-timed
where a window covered it. The session's step clock is the highest-ranked
source seen; lower ones are kept only until a higher one appears.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import compress

from ctmon.store import step_stats
from ctmon.store.boundary_times import BoundaryTimes
from ctmon.store.step_stats import StepStats, percentile, stats_of
from ctmon.wire import events as E

NAN = float("nan")
MAX_DELTA_NS = 1 << 62  # ~146 years: anything larger is not a step interval
MAX_NUMBERS = 1000  # the job's own step numbers kept per source (the agent sends one where they jump)

# Step numbers: what the user's own log calls each step. Boundary k (0-based)
# of an ``optimizer`` or ``api`` series ends a step: the optimizer stepped,
# or the job called ctmon.step(), after the step's work; a
# ``compiled_call`` boundary begins one (the call's start). So the interval
# that ends at boundary k is the step ctmon counts as k + 1, or k, from 1,
# unless the job numbers its steps itself: its optimizer's step count (a
# resumed run's starts at the checkpoint's) or ctmon.step(n), which the
# agent sends as a ``step_number`` event (boundary i is the job's step n).
STARTS_A_STEP = frozenset({"compiled_call"})


def step_number(source: str, k: int, numbers: Sequence[tuple[int, int]] = ()) -> int:
    """The number of the step whose interval ends at boundary ``k`` of a
    ``source`` series: the job's own from the last of ``numbers`` ((boundary,
    the job's number), in boundary order) at or before ``k``, else ctmon's count from 1."""
    if numbers:
        j = bisect_right(numbers, (k, 1 << 62)) - 1
        if j >= 0:
            i, n = numbers[j]
            return n + (k - i)
    return k if source in STARTS_A_STEP else k + 1


_F32 = struct.Struct("<f")


def f32(x: float) -> float:
    """``x`` as float32 holds it: intervals are kept to 7 significant digits
    (plenty for milliseconds), and every view of them rounds the same way."""
    value: float = _F32.unpack(_F32.pack(x))[0]
    return value


class StepSeries:
    def __init__(self, source: str) -> None:
        self.source = source
        self.ns = array("q")  # nanoseconds before boundary k (0: not known -- the first, after a gap)
        self.starts = array("q")  # first boundary index of each batch
        self.t0s = array("d")  # wall time of each batch's first boundary (non-decreasing)
        self.maxes = array("q")  # each batch's longest delta: scans for long steps skip the rest
        self.eff_ms: array[float] | None = None
        self.device_windows = 0
        self.windows: list[tuple[int, int, float]] = []  # device windows as applied, in order
        self.times = BoundaryTimes(self)
        self._last_t = NAN  # wall time of the last boundary
        self._pending_windows: list[tuple[int, int, float]] = []
        self._p50_cache: tuple[tuple[int, int], float | None] | None = None
        self._above: list[tuple[int, float]] = []
        self._above_floor: float | None = None
        self._above_next = 1
        self._retimed_from = 1 << 62
        self._stats_cache: tuple[tuple[int, int], StepStats] | None = None
        # (boundary, the job's number of the step it ends), in boundary order (see step_number)
        self.numbers: list[tuple[int, int]] = []
        # When the first step began, where a lower-ranked series (a compiled
        # model's calls) saw it start before this one's first boundary ended it
        self.start_t: float | None = None

    def __len__(self) -> int:
        return len(self.ns)

    # ---- step numbers

    def number(self, k: int) -> int:
        """The number of the step whose interval ends at boundary ``k``: the
        job's own where it numbers them, else ctmon's count from 1."""
        return step_number(self.source, k, self.numbers)

    def first_number(self) -> int:
        """The first step's number (1 where ctmon counts)."""
        return self.number(0) + (1 if self.source in STARTS_A_STEP else 0)

    def last_number(self) -> int:
        """The last step's number: the one the last boundary ends, or (a
        compiled model's calls) the one it begins. ctmon's count is ``len``."""
        if not len(self.ns):
            return 0
        k = len(self.ns) - 1
        return self.number(k) + (1 if self.source in STARTS_A_STEP else 0)

    @property
    def numbered_by_job(self) -> bool:
        return bool(self.numbers)

    def add_number(self, i: int, n: int) -> None:
        """Boundary ``i`` ends the job's step ``n`` (a ``step_number`` event)."""
        if i < 0 or len(self.numbers) >= MAX_NUMBERS or (i, n) in self.numbers:
            return
        self.numbers.append((i, n))
        self.numbers.sort()

    def first_step_ms(self) -> float | None:
        """The first step's time where its start is known: a compiled
        model's calls begin steps (their first interval is the first step's),
        and a series that ends them (an optimizer's) knows its first step's
        start where a compiled call began it (``start_t``)."""
        if self.source in STARTS_A_STEP:
            v = self.interval_ms(1) if len(self.ns) > 1 else NAN
            return v if v == v else None
        if self.start_t is None or not len(self.ns):
            return None
        ms = (self.times[0] - self.start_t) * 1000
        return f32(ms) if ms > 0 else None

    # ---- folding

    def add_batch(self, i0: int, t0: float, deltas_ns: Iterable[int], checked: bool = False) -> None:
        """Boundaries ``i0 ...``: the first at wall time ``t0``, each after
        ``deltas_ns`` nanoseconds. ``checked``: the deltas are known to be in
        range (a decoded ``steps`` event's are)."""
        # the hot path of reading a long run: ~850k batches a day
        ns = self.ns
        n = len(ns)
        if i0 != n:
            if i0 < n:  # duplicate or reordered batch: keep what we have
                return
            self._pad(i0, float(t0))
        deltas = deltas_ns if type(deltas_ns) is list else list(deltas_ns)
        if not deltas:
            return
        if not checked:
            t0 = float(t0)
            if min(deltas) < 0 or max(deltas) >= MAX_DELTA_NS:
                deltas = [d if 0 <= d < MAX_DELTA_NS else 0 for d in deltas]
        if n and t0 < self._last_t:
            t0 = self._last_t  # times stay non-decreasing across batches (bisect relies on them)
        first = len(ns)
        self.starts.append(first)
        self.t0s.append(t0)
        self.maxes.append(max(deltas))
        ns.extend(deltas)
        if not first:
            ns[0] = 0  # nothing before the very first boundary
        self._last_t = t0 + (sum(deltas) - deltas[0]) / 1e9
        if self.eff_ms is not None or self._pending_windows:
            self._retime(first)

    def add_batches(self, batches: Sequence[E.Steps]) -> None:
        """``steps`` events of this source, in a row: what ``add_batch`` does
        for each, in one loop (reading a long run is mostly this). The usual
        batches' deltas are gathered into one list and packed, summed and
        scanned for their maxima by numpy at once: per batch in Python that
        was ~1.5 us of a 50-boundary batch, most of folding a step storm."""
        last_t = self._last_t
        gathered: list[int] = []
        offsets: list[int] = []  # where each batch starts in ``gathered``
        walls: list[float] = []
        for ev in batches:
            deltas = ev.ns
            if ev.i0 != len(self.ns) + len(gathered) or not deltas or self.eff_ms is not None or self._pending_windows:
                self._last_t = self._pack(gathered, offsets, walls, last_t)
                gathered, offsets, walls = [], [], []
                self.add_batch(ev.i0, ev.t, deltas, True)  # the uncommon cases, one by one
                last_t = self._last_t
                continue
            offsets.append(len(gathered))
            walls.append(ev.t)
            gathered += deltas
        self._last_t = self._pack(gathered, offsets, walls, last_t)

    def _pack(self, gathered: list[int], offsets: list[int], walls: list[float], last_t: float) -> float:
        """Append batches gathered by ``add_batches``; returns the wall time
        of the last boundary."""
        if not gathered:
            return last_t
        import numpy as np

        ns, t0s = self.ns, self.t0s
        base = len(ns)
        deltas = np.array(gathered, dtype=np.int64)
        at = np.array(offsets, dtype=np.intp)
        self.maxes.frombytes(np.maximum.reduceat(deltas, at).tobytes())
        self.starts.frombytes((at + base).astype(np.int64).tobytes())
        # a batch spans its deltas after the first (which leads up to it)
        spans = ((np.add.reduceat(deltas, at) - deltas[at]) / 1e9).tolist()
        if not base:
            deltas[0] = 0  # nothing before the very first boundary
        ns.frombytes(deltas.tobytes())
        for t0, span in zip(walls, spans, strict=True):
            if base and t0 < last_t:
                t0 = last_t  # times stay non-decreasing across batches (bisect relies on them)
            base = 1
            t0s.append(t0)
            last_t = t0 + span
        return last_t

    def mark(self) -> SeriesMark:
        """This series as it is now, for a snapshot of the store: its arrays
        only grow, so the mark keeps their lengths, not copies (a day-long
        run's are ~100 MB). Copying the mark (``copy.deepcopy``) gives back
        a series as it was."""
        return SeriesMark(self)

    def _pad(self, i0: int, t0: float) -> None:
        """Boundaries the agent dropped before ``i0``: their times are the
        last known, their intervals unknown."""
        n = len(self.ns)
        last = self._last_t if n else t0
        self.starts.append(n)
        self.t0s.append(last)
        self.maxes.append(0)
        self.ns.extend(array("q", bytes(8 * (i0 - n))))
        if self.eff_ms is not None:
            self.eff_ms.extend(array("f", [NAN]) * (i0 - n))
        self._last_t = last

    def _retime(self, first: int) -> None:
        """New boundaries on CUDA: their effective intervals, and device
        windows that were waiting for them."""
        if self.eff_ms is not None:
            self.eff_ms.extend(array("f", map(self._host, range(first, len(self.ns)))))
        if self._pending_windows:
            pending, self._pending_windows = self._pending_windows, []
            for w in pending:
                self.add_device_window(*w)

    def add_device_window(self, i0: int, i1: int, ms: float) -> None:
        if i0 < 0 or i1 <= i0 or ms != ms or ms < 0 or ms == float("inf"):
            return
        n = len(self.ns)
        if i1 >= n:
            # The window reached us before its boundaries (they travel by
            # another path): apply it when they arrive.
            if len(self._pending_windows) < 10_000:
                self._pending_windows.append((i0, i1, ms))
            return
        # Split the window's device time in proportion to the host intervals:
        # a fast step next to a slow one (a compile) keeps its own share.
        # Without usable host intervals, split it evenly.
        if self.eff_ms is None:
            self.eff_ms = array("f", map(self._host, range(n)))
        host = [self._host(k) for k in range(i0 + 1, i1 + 1)]
        if all(h == h and h > 0 for h in host):
            scale = ms / sum(host)
            self.eff_ms[i0 + 1 : i1 + 1] = array("f", [h * scale for h in host])
        else:
            self.eff_ms[i0 + 1 : i1 + 1] = array("f", [ms / (i1 - i0)]) * (i1 - i0)
        self.device_windows += 1
        self.windows.append((i0, i1, ms))
        self._retimed_from = min(self._retimed_from, i0 + 1)
        self._stats_cache = None

    # ---- reading

    def _host(self, k: int) -> float:
        d = self.ns[k]
        return f32(d / 1e6) if d > 0 else NAN

    def _reapply(self, indices: set[int]) -> None:
        """Effective intervals at ``indices`` as this series' own windows make them."""
        assert self.eff_ms is not None
        for k in indices:
            self.eff_ms[k] = self._host(k)
        for i0, i1, ms in self.windows:
            if any(i0 < k <= i1 for k in indices):
                host = [self._host(k) for k in range(i0 + 1, i1 + 1)]
                if all(h == h and h > 0 for h in host):
                    scale = ms / sum(host)
                    for k, h in zip(range(i0 + 1, i1 + 1), host, strict=True):
                        if k in indices:
                            self.eff_ms[k] = h * scale
                else:
                    for k in range(i0 + 1, i1 + 1):
                        if k in indices:
                            self.eff_ms[k] = ms / (i1 - i0)

    def interval_ms(self, k: int) -> float:
        """The interval that ends at boundary ``k``, device-timed where known (NaN: not known)."""
        if self.eff_ms is not None:
            return self.eff_ms[k]
        return self._host(k)

    def intervals(self, start: int = 0) -> list[float]:
        """Effective intervals (device-timed where known), unknown ones left out."""
        a = max(1, start)
        if self.eff_ms is not None:
            return [v for v in self.eff_ms[a:] if v == v]
        return array("f", [d / 1e6 for d in self.ns[a:] if d > 0]).tolist()

    def known_intervals(self, a: int, b: int) -> list[float]:
        """Effective intervals ending at boundaries ``a .. b-1`` (clipped to
        the boundaries folded so far), unknown ones left out."""
        a, b = max(1, a), min(b, len(self.ns))
        if a >= b:
            return []
        if self.eff_ms is not None:
            return [v for v in self.eff_ms[a:b] if v == v]
        return array("f", [d / 1e6 for d in self.ns[a:b] if d > 0]).tolist()

    def last_interval_ms(self) -> float | None:
        v = self.interval_ms(len(self.ns) - 1) if len(self.ns) > 1 else NAN
        return v if v == v else None

    def p50_estimate(self, sample: int = 100_000) -> float | None:
        """The median interval; from an even sample of them when there are
        very many (the findings need a threshold, not the exact median)."""
        n = len(self.ns) - 1
        if n <= sample:
            return self.stats().p50_ms if n > 0 else None
        if self._stats_cache is not None and self._stats_cache[0] == (n + 1, self.device_windows):
            return self._stats_cache[1].p50_ms  # the statistics of the whole run are at hand
        key = (len(self.ns) // 1000, self.device_windows // 100)
        if self._p50_cache is not None and self._p50_cache[0] == key:
            return self._p50_cache[1]
        stride = n // sample
        # slices of the arrays, not interval_ms per boundary: this runs with
        # every analysis, over up to 2 * sample boundaries
        if self.eff_ms is not None:
            picked = [v for v in self.eff_ms[1 : n + 1 : stride] if v == v]
        else:
            picked = array("f", [d / 1e6 for d in self.ns[1 : n + 1 : stride] if d > 0]).tolist()
        vals = sorted(picked)
        p50 = percentile(vals, 0.5)
        self._p50_cache = (key, p50)
        return p50

    def intervals_above(self, threshold: float) -> list[tuple[int, float]]:
        """(index, ms) of every interval longer than threshold.

        Incremental: intervals above half the lowest threshold asked so far are
        kept, so a later call scans only the new intervals (and those that
        device windows retimed), not the whole run again. The scan runs in C
        (a comparison mapped over the array, indices picked by ``compress``)."""
        n = len(self.ns)
        if self._above_floor is None or threshold < self._above_floor:
            self._above_floor = threshold / 2
            self._above = []
            self._above_next = 1
        start = min(self._above_next, self._retimed_from)
        if start < self._above_next:
            self._above = [kv for kv in self._above if kv[0] < start]
        if self.eff_ms is not None:
            hits: Iterable[int] = compress(range(start, n), map(self._above_floor.__lt__, self.eff_ms[start:n]))
        else:
            hits = self._longer_than(int(self._above_floor * 1e6), start)
        self._above.extend((k, self.interval_ms(k)) for k in hits)
        self._above_next = n
        self._retimed_from = n
        return [kv for kv in self._above if kv[1] > threshold]

    def _longer_than(self, floor_ns: int, start: int) -> list[int]:
        """Indices from ``start`` on whose delta exceeds ``floor_ns``: only
        batches whose longest delta does are looked into (int-to-int
        comparisons, in C)."""
        starts, ns = self.starts, self.ns
        b0 = max(0, bisect_right(starts, start) - 1)
        out: list[int] = []
        for b in compress(range(b0, len(starts)), map(floor_ns.__lt__, self.maxes[b0:])):
            lo = max(starts[b], start)
            hi = starts[b + 1] if b + 1 < len(starts) else len(ns)
            out.extend(compress(range(lo, hi), map(floor_ns.__lt__, ns[lo:hi])))
        return out

    def stats(self, window: int | None = None) -> StepStats:
        n = len(self.ns)
        if n < 2:
            return StepStats(count=n)
        if window is not None:
            return stats_of(sorted(self.intervals(max(1, n - window))), n, self.last_interval_ms())
        key = (n, self.device_windows)
        if self._stats_cache is not None and self._stats_cache[0] == key:
            return self._stats_cache[1]
        if n - 1 <= step_stats.EXACT_MAX:
            st = stats_of(sorted(self.intervals()), n, self.last_interval_ms())
        else:
            st = step_stats.large_stats(self.ns, self.eff_ms, n, self.last_interval_ms())
        self._stats_cache = (key, st)
        return st

    def compile_marked(self, spans: list[tuple[float, float]]) -> set[int]:
        """Indices k of intervals [t(k-1), t(k)] that overlap a compile span:
        t(k) > start and t(k-1) < end, two bisections per span."""
        marked: set[int] = set()
        times = self.times
        n = len(times)
        for start, end in spans:
            first = max(1, times.count_until(start))
            last = min(n - 1, times.count_until(end, inclusive=False))
            if first <= last:
                marked.update(range(first, last + 1))
        return marked


class SeriesMark:
    """A step series at one moment (see ``StepSeries.mark``)."""

    def __init__(self, series: StepSeries) -> None:
        self.series = series
        self.n = len(series.ns)
        self.batches = len(series.starts)
        self.windows = len(series.windows)
        self.last_t = series._last_t
        self.pending = list(series._pending_windows)
        self.numbers = list(series.numbers)
        self.start_t = series.start_t

    def __deepcopy__(self, memo: dict[int, object]) -> StepSeries:
        live, n, nb = self.series, self.n, self.batches
        out = StepSeries(live.source)
        out.ns = live.ns[:n]
        out.starts, out.t0s, out.maxes = live.starts[:nb], live.t0s[:nb], live.maxes[:nb]
        out._last_t = self.last_t
        out._pending_windows = list(self.pending)
        out.numbers, out.start_t = list(self.numbers), self.start_t
        out.windows = live.windows[: self.windows]
        out.device_windows = len(out.windows)
        if out.windows:
            # device windows only retime boundaries already there; the ones
            # applied after the mark are undone by retiming from scratch
            # what they touched (normally a handful of recent steps)
            assert live.eff_ms is not None
            out.eff_ms = live.eff_ms[:n]
            touched = {k for i0, i1, _ in live.windows[self.windows :] for k in range(i0 + 1, min(i1, n - 1) + 1)}
            if touched:
                out._reapply(touched)
        return out
