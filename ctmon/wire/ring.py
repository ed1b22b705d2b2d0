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

Every page of the file is allocated when it is made (``posix_fallocate``):
a page of a shared mapping that the filesystem cannot supply at the first
store into it (a full tmpfs) is SIGBUS, the job's death. Where the space is
not there (or ``ulimit -f`` forbids the file), ``create`` fails and the agent
makes the ring in its own memory (``StepRing.private``), sending what it
holds on its socket (ctmon/agent/steps.py: StepRelay).

Stdlib only: imported by the agent (inside the job) and the supervisor.
"""

from __future__ import annotations

import errno
import mmap
import operator
import os
import stat
from itertools import islice
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
        """A new ring file at ``path``, its every page on disk before it is
        mapped. OSError where the space cannot be had (ENOSPC, EFBIG under
        ``ulimit -f``): then no file is left behind."""
        size = _ring_size(capacity)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _reserve(fd, size)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            _unlink_quietly(path)
            raise
        finally:
            os.close(fd)
        return cls._initialised(mm, capacity)

    @classmethod
    def private(cls, capacity: int = DEFAULT_CAPACITY) -> StepRing:
        """A ring in the process's own memory (anonymous, private): where no
        ring file can be made, the job's hot path stores into this one just
        as into a shared ring, and a thread of its own reads it. Pages come
        as they are touched and cannot fail with SIGBUS."""
        size = _ring_size(capacity)
        mm = mmap.mmap(-1, size, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
        return cls._initialised(mm, capacity)

    @classmethod
    def _initialised(cls, mm: mmap.mmap, capacity: int) -> StepRing:
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


def _ring_size(capacity: int) -> int:
    if capacity <= 0 or capacity & (capacity - 1):
        raise RingError("capacity must be a power of two")
    return (HEADER_WORDS + capacity) * 8


# posix_fallocate's answers where the filesystem cannot preallocate (musl
# passes fallocate(2)'s EOPNOTSUPP on; some filesystems say EINVAL): there
# the pages are allocated by writing them.
_NO_FALLOCATE = frozenset({errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS})
_ZEROS = bytes(1 << 20)


def _reserve(fd: int, size: int) -> None:
    """Have the filesystem supply every page of the file now. A page of a
    shared mapping that it cannot supply later (a full tmpfs, a quota) is
    SIGBUS at the store into it: the job would die mid-step. Raises OSError
    (ENOSPC, EFBIG, ...) where the space is not there."""
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except OSError as e:
        if e.errno not in _NO_FALLOCATE:
            raise
    _write_zeros(fd, size)


def _write_zeros(fd: int, size: int) -> None:
    """Allocate by writing: a filesystem that allocates late reserves the
    space at write(2), which says ENOSPC now rather than SIGBUS later."""
    done = 0
    while done < size:
        n = os.pwrite(fd, memoryview(_ZEROS)[: min(len(_ZEROS), size - done)], done)
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        done += n


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
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


def _markers(values: list[int]) -> list[int]:
    """Where the negative values (markers) are; min() first, a C loop, since
    most reads hold none."""
    if not values or min(values) >= 0:
        return []
    return [i for i, v in enumerate(values) if v < 0]


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
        # Runs of boundaries between markers (negative values, rare: a source
        # switch, a counting stretch's end) are done a run at a time, in C
        # loops: on the job's sender thread (agent/steps.py: StepRelay) each
        # boundary's Python-level work is time the job waits for the GIL.
        at = 0
        for m in _markers(values):
            if m > at:
                self._run(values[at:m], events, now_wall, now_ns)
            self._marker(values[m])
            at = m + 1
        if at < len(values):
            self._run(values[at:] if at else values, events, now_wall, now_ns)
        return events

    def _run(self, run: list[int], events: list[dict[str, Any]], now_wall: float, now_ns: int) -> None:
        """Boundaries with no marker among them: their deltas (0 for the
        first after none or a marker; a clock going back gives 0), in events
        of up to MAX_BATCH."""
        prev = self.prev_ns
        deltas = [0 if prev is None else run[0] - prev]
        deltas += map(operator.sub, islice(run, 1, None), run)
        if min(deltas) < 0:
            deltas = [d if d > 0 else 0 for d in deltas]
        i0 = self.next_idx
        for k in range(0, len(run), MAX_BATCH):
            events.append(self._event(i0 + k, run[k], deltas[k : k + MAX_BATCH], now_wall, now_ns))
        self.next_idx = i0 + len(run)
        self.prev_ns = run[-1]

    def _marker(self, v: int) -> None:
        if v <= -GAP:
            # A counting stretch of n boundaries: the first n - 1 have no
            # time, the next value is the last one's (its interval unknown,
            # the one after it known).
            self.next_idx += -v - GAP - 1
        else:
            rank = -v - 1
            self.src = SOURCES[rank] if 0 <= rank < len(SOURCES) else f"source{rank}"
            self.next_idx = 0
        self.prev_ns = None

    def _event(self, i0: int, first_ns: int, deltas: list[int], now_wall: float, now_ns: int) -> dict[str, Any]:
        wall = now_wall - (now_ns - first_ns) / 1e9
        return {"kind": "steps", "t": wall, "src": self.src, "i0": i0, "ns": deltas}
