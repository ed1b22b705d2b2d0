"""Device-true time between step boundaries, without a synchronisation.

On CUDA the host clock measures launch time, not device time. The timer
records a CUDA event at some boundaries and resolves them later with the
non-blocking ``query()``, so no synchronisation is ever added; each span
between two resolved events goes to the supervisor as a ``device_time``
record with the boundaries' indices, and the store splits it over its steps.

Recording and resolving one costs the job's thread 15-100 us on a slow host,
so the timer keeps its own time under 1/BUDGET_INV of the job's: after each
record it waits BUDGET_INV times what that record took (never less than
RECORD_GAP_NS) before the next. Where the device keeps up with the host --
an event is done by the next boundary, so the host's clock already tells
the step's time -- it doubles that wait, up to MAX_GAP_NS: inside a
host-bound loop a record costs the steps around it several times its own
time (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from ctmon.agent.channel import Channel

RECORD_GAP_NS = 10_000_000  # at most one CUDA event per 10 ms of host time
BUDGET_INV = 1_000  # the timer's own host time: at most 0.1 % of the job's
MAX_GAP_NS = 1_000_000_000  # a device time at least every second, however slow a record was
MAX_PENDING = 64

_now = time.perf_counter_ns


class TimingEvent(Protocol):
    """What DeviceTimer needs of torch.cuda.Event (a seam for CPU tests)."""

    def record(self) -> None: ...
    def query(self) -> bool: ...
    def elapsed_time(self, end: Any) -> float: ...


class DeviceTimer:
    """Device-true time between step boundaries, resolved without a sync."""

    def __init__(
        self,
        channel: Channel,
        make_event: Callable[[], TimingEvent],
        record_gap_ns: int = RECORD_GAP_NS,
    ) -> None:
        self._ch = channel
        self._make = make_event
        self._min_gap = self._gap = self._floor = record_gap_ns
        self._spent = 0  # host ns the last record took
        self._probe: TimingEvent | None = None  # the last record's event, asked at the next boundary
        self._pool: list[TimingEvent] = []
        self._pending: deque[tuple[int, TimingEvent]] = deque()
        self._prev: tuple[int, TimingEvent] | None = None
        self._last_ns = 0
        self._src = ""
        self.failed = False

    def reset(self, src: str) -> None:
        self._src = src
        # Their spans are dropped, the events kept: creating one costs the
        # job's thread tens of µs, and a CUDA event may be recorded again.
        self._pool.extend(ev for _, ev in self._pending)
        if self._prev is not None:
            self._pool.append(self._prev[1])
        self._pending.clear()
        self._prev = None
        self._probe = None
        self._last_ns = 0

    def boundary(self, idx: int, t_ns: int) -> None:
        if self._probe is not None:
            self._ask(t_ns)
        if t_ns - self._last_ns < self._gap:
            return
        self._last_ns = t_ns
        try:
            self._poll()
            if len(self._pending) < MAX_PENDING:  # else the device is far behind: measure later
                ev = self._pool.pop() if self._pool else self._make()
                ev.record()
                self._pending.append((idx, ev))
                self._probe = ev
        except Exception:
            # A CUDA error here must not surface in the user's loop.
            self.failed = True
        # What this took (from the boundary's clock read) sets the wait
        # before the next: the timer's share of the job's host time stays
        # under 1/BUDGET_INV however slow CUDA's calls are on this host.
        self._spent = _now() - t_ns
        self._gap = min(MAX_GAP_NS, max(self._floor, self._spent * BUDGET_INV))

    def _ask(self, t_ns: int) -> None:
        """At the boundary after a record: is its event done already? Then
        the device keeps up with the host, whose clock is true: wait twice
        as long before the next record. If not, the device sets the pace:
        back to the shortest wait."""
        ev, self._probe = self._probe, None
        try:
            done = ev is not None and ev.query()
        except Exception:
            self.failed = True
            return
        self._floor = min(MAX_GAP_NS, self._floor * 2) if done else self._min_gap
        spent = self._spent + _now() - t_ns  # the question is the timer's time too
        self._gap = min(MAX_GAP_NS, max(self._floor, spent * BUDGET_INV))

    def _poll(self) -> None:
        pending = self._pending
        while pending and pending[0][1].query():
            cur = pending.popleft()
            prev = self._prev
            if prev is not None:
                ms = prev[1].elapsed_time(cur[1])
                self._ch.put(("device_time", self._src, prev[0], cur[0], ms))
                self._pool.append(prev[1])
            self._prev = cur
