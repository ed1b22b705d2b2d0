"""Statistics of step intervals: percentiles as numpy's default method
interpolates them, from a sorted list for short series and from a numpy
partition of the packed arrays for long ones (the same order statistics)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass


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


def percentile(sorted_vals: Sequence[float], q: float) -> float | None:
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


# Up to this many intervals, statistics come from a sorted list (32 bytes an
# interval). Past it, numpy selects the same order statistics from the packed
# arrays (the mean may differ in the last bits: pairwise summation): a live
# view recomputes them at every repaint, where sorting 100k values in Python
# took ~10 ms, and a day of training (~10M) takes ~0.4 s and ~5 bytes an
# interval instead of seconds and hundreds of MB.
EXACT_MAX = 20_000
QUANTILES = (0.5, 0.9, 0.99)


def stats_of(vals: list[float], count: int, last: float | None) -> StepStats:
    st = StepStats(count=count)
    if not vals:
        return st
    st.intervals = len(vals)
    st.last_ms = last
    st.p50_ms = percentile(vals, 0.5)
    st.p90_ms = percentile(vals, 0.9)
    st.p99_ms = percentile(vals, 0.99)
    st.mean_ms = sum(vals) / len(vals)
    st.min_ms = vals[0]
    st.max_ms = vals[-1]
    if st.mean_ms and st.mean_ms > 0:
        st.steps_per_s = 1000.0 / st.mean_ms
    return st


def large_stats(ns: array[int], eff_ms: array[float] | None, count: int, last: float | None) -> StepStats:
    """``stats_of`` for a long series, without sorting it in Python: the
    intervals as float32 (the values every other view shows), the order
    statistics the percentiles interpolate between picked by one partition,
    the interpolation done as ``percentile`` does it."""
    import numpy as np

    # One float32 array of every interval, made a slice at a time (the peak
    # stays ~5 bytes an interval). Unknown intervals are left where they
    # sort to one end: 0.0 (a 0 ns delta) first, NaN (a device view) last;
    # the ranks below skip them instead of copying the rest out.
    if eff_ms is not None:
        vals = np.array(eff_ms, dtype=np.float32)[1:]
        skip, n = 0, len(vals) - int(np.count_nonzero(np.isnan(vals)))
    else:
        deltas = np.frombuffer(ns, dtype=np.int64)[1:]
        vals = np.empty(len(deltas), dtype=np.float32)
        for i in range(0, len(deltas), 1 << 20):
            vals[i : i + (1 << 20)] = deltas[i : i + (1 << 20)] / 1e6
        skip = len(deltas) - int(np.count_nonzero(deltas))
        n = len(deltas) - skip
    st = StepStats(count=count)
    if not n:
        return st
    ranks = {0, n - 1}
    for q in QUANTILES:
        lo = int(math.floor((n - 1) * q))
        ranks |= {lo, min(lo + 1, n - 1)}
    kth = sorted(ranks)
    vals.partition([skip + r for r in kth])  # in place: the array is ours
    ranked = {r: float(vals[skip + r]) for r in kth}

    def pct(q: float) -> float:
        pos = (n - 1) * q
        lo = int(math.floor(pos))
        a, b = ranked[lo], ranked[min(lo + 1, n - 1)]
        return a + (b - a) * (pos - lo)

    st.intervals = n
    st.last_ms = last
    st.p50_ms, st.p90_ms, st.p99_ms = (pct(q) for q in QUANTILES)
    st.mean_ms = float(np.nansum(vals, dtype=np.float64)) / n
    st.min_ms, st.max_ms = ranked[0], ranked[n - 1]
    if st.mean_ms > 0:
        st.steps_per_s = 1000.0 / st.mean_ms
    return st
