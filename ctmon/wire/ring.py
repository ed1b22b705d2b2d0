"""A shared-memory ring of step boundaries, written by the job, read by the supervisor.

Why shared memory: step boundaries can come at 100k/s and the job can die at
any instant (``os._exit``, SIGKILL, the OOM killer). A boundary written here
is in the supervisor's reach the moment the store instruction retires, so a
recording keeps every step up to the crash, and the hot path is two integer
stores -- no syscall, no lock, no allocation.

Layout (little-endian int64 words): ``[magic, version, capacity, write_index,
source + 1, index of the source's switch slot, anchor_at, anchor_index, slot_0 .. slot_{capacity-1}]``. A slot holds a
``time.perf_counter_ns()`` value (CLOCK_MONOTONIC, the same clock in every
process on the machine) or, when negative, a source switch ``-(rank + 1)``,
or ``-(GAP + n)``: n boundaries counted, not timed (a counting stretch of a
fast loop: ctmon/agent/steps.py), the next slot holding the last one's time
(a boundary, as any other, but that nothing times the interval before it).
The writer stores the slot, then the new write index; the reader reads the
index, then the slots below it. If the reader falls a full ring behind, the
oldest boundaries are lost and counted -- the writer never waits.

A slot is one boundary but for a counting stretch's marker, so after a loss
the slots lost do not say how many boundaries were. The anchor does: the
ring index of a boundary and its index among its source's boundaries,
written at each source switch and each stretch's end (never on the hot
path). The writer stores ``anchor_at = -1``, the index, then ``anchor_at``;
a reader that reads ``anchor_at`` the same before and after the index has a
consistent pair.

Stdlib only: imported by the agent (inside the job) and the supervisor.
"""

from __future__ import annotations

import mmap
import os
import stat
from typing import Any

MAGIC = 0x43544D4F4E524E47  # "CTMONRNG"
VERSION = 1
HEADER_WORDS = 8
W_MAGIC, W_VERSION, W_CAPACITY, W_INDEX = 0, 1, 2, 3
# The current step source (rank + 1; 0 before any) and the ring index of its
# switch slot: lets the reader recover the source when that slot was lost.
W_SOURCE, W_SOURCE_AT = 4, 5
# (ring index, boundary index) of one boundary of the current source: the
# reader's way back to exact indices after slots were lost (see above).
W_ANCHOR_AT, W_ANCHOR_IDX = 6, 7
GAP = 1 << 16  # -(GAP + n): n boundaries counted, not timed; then the last one's time
DEFAULT_CAPACITY = 1 << 20  # 8 MiB; ~10 s of 100k steps/s if the reader stalls


class RingError(Exception):
    pass


class StepRing:
    def __init__(self, mm: mmap.mmap, capacity: int) -> None:
        self._mm = mm
        self.capacity = capacity
        self.mask = capacity - 1
        words = memoryview(mm).cast("q")
        self.words = words  # header and slots: the writer's one view
        self.header = words[:HEADER_WORDS]
        self.slots = words[HEADER_WORDS : HEADER_WORDS + capacity]

    @classmethod
    def create(cls, path: str, capacity: int = DEFAULT_CAPACITY) -> StepRing:
        if capacity <= 0 or capacity & (capacity - 1):
            raise RingError("capacity must be a power of two")
        size = (HEADER_WORDS + capacity) * 8
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        ring = cls(mm, capacity)
        ring.header[W_MAGIC] = MAGIC
        ring.header[W_VERSION] = VERSION
        ring.header[W_CAPACITY] = capacity
        ring.header[W_INDEX] = 0
        ring.header[W_ANCHOR_AT] = -1  # none yet
        return ring

    @classmethod
    def open(cls, path: str) -> StepRing:
        """Open an existing ring for reading (checked: it may be any file)."""
        # O_NONBLOCK: a FIFO planted at the path must not hang the supervisor.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                raise RingError("not a step ring owned by this user")
            if st.st_size < HEADER_WORDS * 8 or st.st_size % 8:
                raise RingError("not a ctmon step ring (bad size)")
            mm = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        try:
            words = memoryview(mm).cast("q")
            magic, version, capacity = words[W_MAGIC], words[W_VERSION], words[W_CAPACITY]
            words.release()
            if magic != MAGIC or version != VERSION or capacity <= 0 or capacity & (capacity - 1):
                raise RingError("not a ctmon step ring")
            if (HEADER_WORDS + capacity) * 8 > len(mm):
                raise RingError("step ring is truncated")
            return cls(mm, capacity)
        except (RingError, TypeError, ValueError) as e:
            mm.close()
            raise RingError(str(e) or "not a ctmon step ring") from None

    def close(self) -> None:
        try:
            self.header.release()
            self.slots.release()
            self._mm.close()
        except (BufferError, ValueError):
            pass


class RingReader:
    """Supervisor side: new slots since the last read, and how many were lost.

    After ``read``, ``start`` is the ring index of the first value returned."""

    def __init__(self, ring: StepRing) -> None:
        self.ring = ring
        self.read_index = 0
        self.lost = 0
        self.start = 0

    def source(self) -> tuple[int, int] | None:
        """(rank, ring index of its switch slot) of the current source, if any."""
        hdr = self.ring.header
        rank, at = hdr[W_SOURCE] - 1, hdr[W_SOURCE_AT]
        return (rank, at) if rank >= 0 else None

    def anchor(self) -> tuple[int, int] | None:
        """(ring index, boundary index) the writer last anchored, if a
        consistent pair can be read (the writer may be storing it now)."""
        hdr = self.ring.header
        for _ in range(3):
            at = hdr[W_ANCHOR_AT]
            idx = hdr[W_ANCHOR_IDX]
            if at >= 0 and hdr[W_ANCHOR_AT] == at:
                return at, idx
        return None

    def read(self) -> tuple[list[int], int]:
        """Returns (values, lost_before_values)."""
        ring = self.ring
        w = ring.header[W_INDEX]
        r = self.read_index
        if w <= r:
            return [], 0
        lost = 0
        if w - r > ring.capacity:
            lost = w - r - ring.capacity
            r = w - ring.capacity
            self.lost += lost
        mask = ring.mask
        start, end = r & mask, w & mask
        if w - r == ring.capacity or end <= start:
            values = list(ring.slots[start:]) + list(ring.slots[:end])
        else:
            values = list(ring.slots[start:end])
        # The writer never waits: if it lapped us while we copied, the oldest
        # values we copied may already be newer ones. Drop those, count them.
        w2 = ring.header[W_INDEX]
        overwritten = w2 - ring.capacity - r
        if overwritten > 0:
            values = values[overwritten:]
            lost += overwritten
            self.lost += overwritten
        self.start = w - len(values)
        self.read_index = w
        return values, lost


def _index_at(values: list[int], start: int, anchor: tuple[int, int]) -> int | None:
    """The boundary index of the slot at ring index ``start`` (values[0]),
    from the anchor, or None where the anchor cannot say (a source switch
    lies between them, or the writer anchored past what was read)."""
    at, idx = anchor
    if at <= start:
        # no stretch and no switch since the anchor (either would have
        # moved it): every slot from it to start is one boundary
        return idx + start - at
    if at > start + len(values):
        return None
    n = 0
    for v in values[: at - start]:
        if v >= 0:
            n += 1
        elif v <= -GAP:
            n += -v - GAP - 1  # with the time slot after it: its n boundaries
        else:
            return None
    return idx - n


def set_anchor(words: Any, at: int, idx: int) -> None:
    """The writer's side of the anchor (``words``: the ring's whole view)."""
    words[W_ANCHOR_AT] = -1
    words[W_ANCHOR_IDX] = idx
    words[W_ANCHOR_AT] = at


def release(obj: Any) -> None:
    close = getattr(obj, "close", None)
    if close is not None:
        close()


SOURCES = ("compiled_call", "optimizer", "api")  # by rank; mirrors protocol.STEP_SOURCES
MAX_BATCH = 8192  # boundaries per event: lines stay ~100 KB, far below the reader's limit


class StepDecoder:
    """Turns ring values into ``steps`` events (see protocol: STEPS).

    Boundaries become integer nanosecond deltas from the previous boundary of
    the same source (0 for the first, and after lost boundaries), with the
    wall time of the first one in the batch, so thousands of steps are one
    short line. Indices count boundaries since the source became the clock,
    exactly as the agent counts them for its device-time windows: a counting
    stretch's boundaries too, which the next batch's ``i0`` skips (the store
    keeps their intervals as unknown).
    """

    def __init__(self) -> None:
        self.src = ""
        self.next_idx = 0
        self.prev_ns: int | None = None
        self.lost_steps = 0  # boundaries the last decode's lost slots held

    def decode(
        self,
        values: list[int],
        lost: int,
        now_wall: float,
        now_ns: int,
        start: int | None = None,
        source: tuple[int, int] | None = None,
        anchor: tuple[int, int] | None = None,
    ) -> list[dict[str, Any]]:
        """``start``: ring index of values[0]; ``source``: the ring header's
        (rank, switch index) and ``anchor`` its (ring index, boundary
        index), used when slots were lost before ``start``."""
        events: list[dict[str, Any]] = []
        self.lost_steps = 0
        if lost:
            self.prev_ns = None
            before = self.next_idx
            switch_at = None
            if source is not None and start is not None and start - lost <= source[1] < start:
                # the switch slot itself was lost: the header says which source
                # it was, and how many of its boundaries came before `start`
                # (as many as slots, unless the anchor says otherwise)
                rank, switch_at = source
                self.src = SOURCES[rank] if 0 <= rank < len(SOURCES) else f"source{rank}"
                self.next_idx = start - switch_at - 1
            else:
                self.next_idx += lost  # as many as slots, unless the anchor says otherwise
            exact = _index_at(values, start, anchor) if start is not None and anchor is not None else None
            if exact is not None:
                self.next_idx = exact
            if switch_at is not None and start is not None:
                # the old source's last slots (a counting stretch among them
                # unknown), then the new source's boundaries before start
                self.lost_steps = switch_at - (start - lost) + self.next_idx
            else:
                self.lost_steps = max(0, self.next_idx - before)
        batch: list[int] = []
        first_ns = 0
        i0 = self.next_idx
        for v in values:
            if v <= -GAP:
                # A counting stretch of n boundaries: the first n - 1 have
                # no time, the next value is the last one's (its interval
                # unknown, the one after it known).
                if batch:
                    events.append(self._event(i0, first_ns, batch, now_wall, now_ns))
                    batch = []
                self.next_idx += -v - GAP - 1
                self.prev_ns = None
                continue
            if v < 0:
                if batch:
                    events.append(self._event(i0, first_ns, batch, now_wall, now_ns))
                    batch = []
                rank = -v - 1
                self.src = SOURCES[rank] if 0 <= rank < len(SOURCES) else f"source{rank}"
                self.next_idx = 0
                self.prev_ns = None
                continue
            if len(batch) >= MAX_BATCH:
                events.append(self._event(i0, first_ns, batch, now_wall, now_ns))
                batch = []
            if not batch:
                first_ns = v
                i0 = self.next_idx
            prev = self.prev_ns
            batch.append(0 if prev is None else max(0, v - prev))
            self.prev_ns = v
            self.next_idx += 1
        if batch:
            events.append(self._event(i0, first_ns, batch, now_wall, now_ns))
        return events

    def _event(self, i0: int, first_ns: int, deltas: list[int], now_wall: float, now_ns: int) -> dict[str, Any]:
        wall = now_wall - (now_ns - first_ns) / 1e9
        return {"kind": "steps", "t": wall, "src": self.src, "i0": i0, "ns": deltas}
