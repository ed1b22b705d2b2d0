"""Replay: the store as it was after the first N events of a recording.

The viewer keeps every event it has read (only in replay) and rebuilds a
``Session`` up to any position. Going forward folds the missing events into
the current session; going back restarts from the nearest checkpoint, a
copy of the store taken every ``CHECKPOINT_EVERY`` events while loading.
"""

from __future__ import annotations

import copy
from array import array
from bisect import bisect_left, bisect_right
from typing import Any

from ctmon.store import Session
from ctmon.wire import protocol

CHECKPOINT_EVERY = 25_000

#: Events that are worth stopping at when stepping with [ and ].
MARK_KINDS = frozenset({protocol.COMPILE, protocol.GRAPH_BREAK, protocol.EXIT, protocol.CUDAGRAPH})


class Timeline:
    def __init__(self, checkpoint_every: int = CHECKPOINT_EVERY) -> None:
        self.events: list[dict[str, Any]] = []
        self.every = max(1, checkpoint_every)
        self._checkpoints: list[tuple[int, Session]] = []
        self._tmax = array("d")  # running max of event times (events are nearly, not strictly, ordered)
        self._marks: list[int] = []  # positions just after a mark event

    def __len__(self) -> int:
        return len(self.events)

    def extend(self, batch: list[dict[str, Any]]) -> None:
        """Keep a batch the viewer has just read (in the viewer's order)."""
        last = self._tmax[-1] if self._tmax else 0.0
        base = len(self.events)
        for k, ev in enumerate(batch):
            t = ev.get("t")
            if isinstance(t, (int, float)) and not isinstance(t, bool) and t > last:
                last = float(t)
            self._tmax.append(last)
            if ev.get("kind") in MARK_KINDS:
                self._marks.append(base + k + 1)
        self.events.extend(batch)

    def offer_checkpoint(self, position: int, session: Session) -> None:
        """Called with the fully-loaded session as it grows; copies it now and then."""
        last = self._checkpoints[-1][0] if self._checkpoints else 0
        if position - last >= self.every:
            self._checkpoints.append((position, copy.deepcopy(session)))

    # ---- positions ----

    def time_at(self, position: int) -> float | None:
        if position <= 0 or not self._tmax:
            return None
        return self._tmax[min(position, len(self._tmax)) - 1]

    def start_time(self) -> float | None:
        for ev in self.events[:50]:
            if ev.get("kind") == protocol.SESSION and isinstance(ev.get("t"), (int, float)):
                return float(ev["t"])
        return self._tmax[0] if self._tmax else None

    def position_at_time(self, t: float) -> int:
        """Number of events whose (running) time is <= t."""
        return bisect_right(self._tmax, t)

    def next_mark(self, position: int) -> int:
        i = bisect_right(self._marks, position)
        return self._marks[i] if i < len(self._marks) else len(self.events)

    def prev_mark(self, position: int) -> int:
        i = bisect_left(self._marks, position)
        return self._marks[i - 1] if i > 0 else 0

    # ---- rebuilding ----

    def build(self, position: int, current: Session | None = None, current_pos: int = -1) -> Session:
        """The session after ``position`` events. ``current`` (at ``current_pos``)
        is advanced in place when going forward; otherwise a new one is built."""
        position = max(0, min(position, len(self.events)))
        if current is not None and 0 <= current_pos <= position:
            for ev in self.events[current_pos:position]:
                current.apply(ev)
            return current
        start, base = 0, None
        for pos, snap in reversed(self._checkpoints):
            if pos <= position:
                start, base = pos, snap
                break
        session = copy.deepcopy(base) if base is not None else Session()
        for ev in self.events[start:position]:
            session.apply(ev)
        return session
