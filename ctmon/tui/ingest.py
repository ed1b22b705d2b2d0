"""Handing event batches from the feed thread to the UI thread.

The feed is read in a worker thread; the store is only ever touched on the UI
thread. Between them sits this hand-off, which coalesces: however many
batches arrive while the UI is busy, at most one wake-up message is in
flight (the same idea as Toolong's ``can_replace``). The UI takes batches
within a time budget and asks to be woken again if some are left, so a
firehose never starves repaints.

When the UI falls far behind, ``put`` blocks the reader (the supervisor
keeps a file cursor per viewer, so a stalled reader costs nothing there).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from ctmon.wire.event_base import Event, Unknown

Batch = list[Event | Unknown]


class Handoff:
    def __init__(self, wake: Callable[[], None], max_pending: int = 20_000) -> None:
        self._cond = threading.Condition()
        self._batches: deque[Batch] = deque()
        self._pending = 0
        self._awake = False  # a wake-up is posted and not yet answered with "empty"
        self._wake = wake
        self._closed = False
        # While the UI has a repaint scheduled anyway, batches just queue: the
        # UI folds them right before painting, so no wake-up is needed (and a
        # job's steady trickle costs one message per repaint, not per line).
        self.hold = False
        self.hold_limit = 2000
        self.max_pending = max_pending
        self.received = 0
        self.wakeups = 0

    # -- feed thread --

    def put(self, batch: Batch) -> None:
        if not batch:
            return
        with self._cond:
            while self._pending >= self.max_pending and not self._closed:
                self._cond.wait(0.25)
            if self._closed:
                return
            self._batches.append(batch)
            self._pending += len(batch)
            self.received += len(batch)
            # held: no wake-up, unless a backlog is building (then fold it now)
            wake = not self._awake and (not self.hold or self._pending > self.hold_limit)
            self._awake = self._awake or wake
        if wake:
            self.wakeups += 1
            self._wake()

    # -- UI thread --

    def take(self) -> Batch | None:
        """The next batch, or None when there is none; None also re-arms the
        wake-up, so the next ``put`` posts a new message."""
        with self._cond:
            if not self._batches:
                self._awake = False
                return None
            batch = self._batches.popleft()
            self._pending -= len(batch)
            if self._pending < self.max_pending:
                self._cond.notify_all()
            return batch

    def release(self) -> bool:
        """End a hold; True if batches are waiting and no wake-up is in flight."""
        with self._cond:
            self.hold = False
            if self._batches and not self._awake:
                self._awake = True
                return True
            return False

    @property
    def pending(self) -> int:
        return self._pending

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
