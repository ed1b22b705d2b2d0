"""Replay: the store as it was after the first N events of a recording.

A day-long recording is over a million events; keeping them, and copies of
the store, in memory took gigabytes. The timeline keeps, per event, only
its time (8 bytes: for jumps by time), the positions worth stopping at
(compiles, breaks, the exit), and every ``CHECKPOINT_EVERY`` events a
snapshot of the store (``store.snapshots.snapshot``: step series by reference) with
the byte offset in the recording where the next event starts. The store at
any position is rebuilt from the snapshot before it, reading the events
after it from the file again (through the same decoder and the same
cleaning the viewer applies as it reads). Events that are not in the file
(a note about unreadable lines, events given in memory) are kept as they
are: they are few, or the run is small.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import accumulate, compress
from operator import attrgetter

from ctmon.read.recording import READ_CHUNK, StreamDecoder
from ctmon.store import Session
from ctmon.store.snapshots import restored, snapshot
from ctmon.wire import events as E
from ctmon.wire import events_compile as EC
from ctmon.wire.decode import Fix
from ctmon.wire.event_base import Event, Unknown

CHECKPOINT_EVERY = 25_000

#: Events that are worth stopping at when stepping with [ and ].
MARK_KINDS = (EC.Compile, EC.GraphBreak, E.Exit, EC.Cudagraph)
_MARKS = frozenset(MARK_KINDS)
Decoded = Event | Unknown


class Timeline:
    def __init__(
        self,
        checkpoint_every: int = CHECKPOINT_EVERY,
        path: str | None = None,
        fix: Fix | None = None,
    ) -> None:
        self.every = max(1, checkpoint_every)
        self.path = path  # the recording the events can be read from again
        self._fix = fix  # what the viewer's feed did to events as it read them (Decoder.decode_all)
        self._count = 0
        self._tmax = array("d")  # running max of event times (events are nearly, not strictly, ordered)
        self._marks: list[int] = []  # positions just after a mark event
        self._start: float | None = None
        # where events live: the file, read again from the end of a batch
        # (its position, and the offset of the next line), or memory
        self._end_pos = array("q", [0])
        self._end_off = array("q", [0])
        self._kept: dict[int, Decoded] = {}
        self._checkpoints: list[tuple[int, Session]] = []

    def __len__(self) -> int:
        return self._count

    def extend(self, batch: list[Decoded], end: int | None = None) -> None:
        """Keep track of a batch the viewer has just read (in the viewer's
        order); ``end``: where in the recording the line after it starts,
        when the batch came from the file."""
        base = self._count
        last = self._tmax[-1] if self._tmax else 0.0
        # a replay's whole file passes through here: C loops (accumulate,
        # map, compress), not a Python one per event
        self._tmax.extend(accumulate(map(attrgetter("t"), batch), max, initial=last))
        del self._tmax[base]  # (the initial value)
        kinds = list(map(type, batch))
        self._marks.extend(compress(range(base + 1, base + 1 + len(batch)), map(_MARKS.__contains__, kinds)))
        if self._start is None and E.SessionStart in kinds:
            self._start = batch[kinds.index(E.SessionStart)].t
        self._count += len(batch)
        if end is not None and self.path is not None:
            self._end_pos.append(self._count)
            self._end_off.append(end)
        else:
            for k, ev in enumerate(batch):
                self._kept[base + k] = ev

    def offer_checkpoint(self, position: int, session: Session) -> None:
        """Called with the fully-loaded session as it grows; takes a snapshot
        now and then, where the file offset of the next event is known."""
        last = self._checkpoints[-1][0] if self._checkpoints else 0
        if position - last < self.every or position != self._count:
            return  # (mid-batch: the events after it have no offset to read from)
        self._checkpoints.append((position, snapshot(session)))

    # ---- positions ----

    def time_at(self, position: int) -> float | None:
        if position <= 0 or not self._tmax:
            return None
        return self._tmax[min(position, len(self._tmax)) - 1]

    def start_time(self) -> float | None:
        return self._start if self._start is not None else (self._tmax[0] if self._tmax else None)

    def position_at_time(self, t: float) -> int:
        """Number of events whose (running) time is <= t."""
        return bisect_right(self._tmax, t)

    def next_mark(self, position: int) -> int:
        i = bisect_right(self._marks, position)
        return self._marks[i] if i < len(self._marks) else self._count

    def prev_mark(self, position: int) -> int:
        i = bisect_left(self._marks, position)
        return self._marks[i - 1] if i > 0 else 0

    # ---- rebuilding ----

    def build(self, position: int, current: Session | None = None, current_pos: int = -1) -> Session:
        """The session after ``position`` events. ``current`` (at ``current_pos``)
        is advanced in place when going forward; otherwise a new one is built."""
        position = max(0, min(position, self._count))
        if current is not None and 0 <= current_pos <= position:
            current.apply_all(self.events(current_pos, position))
            return current
        start, base = 0, None
        for pos, snap in reversed(self._checkpoints):
            if pos <= position:
                start, base = pos, snap
                break
        session = restored(base) if base is not None else Session()
        session.apply_all(self.events(start, position))
        return session

    def events(self, start: int, stop: int) -> Iterator[Decoded]:
        """The events at positions ``start`` .. ``stop - 1``, from memory or
        read again from the recording."""
        pos = start
        while pos < stop:
            if pos in self._kept:
                yield self._kept[pos]
                pos += 1
                continue
            # the file, from the latest batch end at or before pos
            i = bisect_right(self._end_pos, pos) - 1
            at = self._end_pos[i]
            for ev in self._read(self._end_off[i]):
                if at >= stop or at in self._kept:
                    break
                if at >= pos:
                    yield ev
                    pos = at + 1
                at += 1
            else:
                return  # the file ended early (rewritten under us): show what there is

    def _read(self, offset: int) -> Iterator[Decoded]:
        assert self.path is not None
        dec = StreamDecoder(fix=self._fix)
        with open(self.path, "rb") as f:
            f.seek(offset)
            while chunk := f.read(READ_CHUNK):
                yield from dec.feed(chunk)
            yield from dec.finish()
