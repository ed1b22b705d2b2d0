"""The wall time of every step boundary, without storing one float a boundary."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate, islice
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from ctmon.store.steps import StepSeries


class BoundaryTimes(Sequence[float]):
    """The wall time of each boundary, computed on demand: its batch's time
    plus the nanoseconds since the batch's first boundary (an integer sum, so
    no float drift). Non-decreasing, so ``bisect`` works on it."""

    def __init__(self, series: StepSeries) -> None:
        self._s = series
        # the last batch's times, as count_until built them: callers ask in
        # time order (the findings walk every recompile), so most questions
        # fall in the batch asked about last. Keyed by the batch's bounds, so
        # a batch that grew since is built again.
        self._within: tuple[int, int, list[float]] = (-1, -1, [])

    def __len__(self) -> int:
        return len(self._s.ns)

    @overload
    def __getitem__(self, k: int) -> float: ...
    @overload
    def __getitem__(self, k: slice) -> list[float]: ...
    def __getitem__(self, k: int | slice) -> float | list[float]:
        if isinstance(k, slice):
            start, stop, step = k.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return list(islice(self._from(start), max(0, stop - start)))
        s = self._s
        n = len(s.ns)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("boundary index out of range")
        b = bisect_right(s.starts, k) - 1
        start = s.starts[b]
        t0 = s.t0s[b]
        return t0 if k == start else t0 + sum(s.ns[start + 1 : k + 1]) / 1e9

    def __iter__(self) -> Iterator[float]:
        return self._from(0)

    def count_until(self, t: float, inclusive: bool = True) -> int:
        """How many boundaries are at or before ``t`` (before it, when not
        ``inclusive``): ``bisect_right``/``bisect_left`` of the times, but
        the batches' own times are searched in C first."""
        s = self._s
        find = bisect_right if inclusive else bisect_left
        b = find(s.t0s, t) - 1
        if b < 0:
            return 0
        start = s.starts[b]
        end = s.starts[b + 1] if b + 1 < len(s.starts) else len(s.ns)
        cb, cend, within = self._within
        if cb != b or cend != end:
            t0 = s.t0s[b]
            within = [t0 + c / 1e9 for c in accumulate(s.ns[start + 1 : end], initial=0)]
            self._within = (b, end, within)
        return start + find(within, t)

    def _from(self, k: int) -> Iterator[float]:
        """Times from boundary ``k`` on: one running sum per batch."""
        s = self._s
        n = len(s.ns)
        if k >= n:
            return
        b = bisect_right(s.starts, k) - 1
        while b < len(s.starts):
            start = s.starts[b]
            end = s.starts[b + 1] if b + 1 < len(s.starts) else n
            t0 = s.t0s[b]
            base = sum(s.ns[start + 1 : k + 1]) if k > start else 0
            for c in accumulate(s.ns[k + 1 : end], initial=base):
                yield t0 + c / 1e9
            b += 1
            k = end
