"""The shared-memory step ring: layout, wrap-around, overflow, other writers, crashes."""

from __future__ import annotations

import errno
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from ctmon.agent.channel import Channel
from ctmon.agent.step_relay import StepRelay
from ctmon.agent.steps import StepClock
from ctmon.store import Session
from ctmon.wire import protocol
from ctmon.wire.ring import (
    HEADER_WORDS,
    MAGIC,
    VERSION,
    W_CAPACITY,
    W_INDEX,
    W_MAGIC,
    W_VERSION,
    RingError,
    RingReader,
    StepDecoder,
    StepRing,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def push(ring: StepRing, *values: int) -> None:
    """Write like the agent does: the slot first, then publish the index."""
    for v in values:
        w = ring.header[W_INDEX]
        ring.slots[w & ring.mask] = v
        ring.header[W_INDEX] = w + 1


@pytest.fixture
def ring_path(tmp_path):
    return str(tmp_path / "steps.ring")


@pytest.fixture
def rings():
    opened: list[StepRing] = []
    yield opened
    for r in opened:
        r.close()


def make(ring_path, rings, capacity=8):
    w = StepRing.create(ring_path, capacity)
    rings.append(w)
    r = StepRing.open(ring_path)
    rings.append(r)
    return w, r


# ------------------------------------------------------------------ layout


def test_create_writes_the_header(ring_path, rings):
    ring = StepRing.create(ring_path, 16)
    rings.append(ring)
    assert os.path.getsize(ring_path) == (HEADER_WORDS + 16) * 8
    assert os.stat(ring_path).st_mode & 0o777 == 0o600
    with open(ring_path, "rb") as f:
        words = struct.unpack("<4q", f.read(32))
    assert words[W_MAGIC] == MAGIC
    assert words[W_VERSION] == VERSION
    assert words[W_CAPACITY] == 16
    assert words[W_INDEX] == 0


@pytest.mark.parametrize("cap", [0, -4, 3, 6, 1000])
def test_create_rejects_capacity_not_a_power_of_two(ring_path, cap):
    with pytest.raises(RingError):
        StepRing.create(ring_path, cap)


def test_create_never_clobbers_an_existing_file(ring_path):
    with open(ring_path, "wb") as f:
        f.write(b"precious")
    with pytest.raises(FileExistsError):
        StepRing.create(ring_path, 8)
    with open(ring_path, "rb") as f:
        assert f.read() == b"precious"


def test_open_sees_what_the_writer_wrote(ring_path, rings):
    w, r = make(ring_path, rings, 8)
    assert r.capacity == 8 and r.mask == 7
    reader = RingReader(r)
    assert reader.read() == ([], 0)
    push(w, 10, 20, 30)
    assert reader.read() == ([10, 20, 30], 0)
    assert reader.read() == ([], 0)
    push(w, 40)
    assert reader.read() == ([40], 0)
    assert reader.lost == 0


def test_wrap_around(ring_path, rings):
    w, r = make(ring_path, rings, 8)
    reader = RingReader(r)
    push(w, *range(1, 6))
    assert reader.read() == ([1, 2, 3, 4, 5], 0)
    push(w, *range(6, 12))  # slots 5,6,7,0,1,2
    assert reader.read() == ([6, 7, 8, 9, 10, 11], 0)
    push(w, *range(12, 20))  # exactly one full ring unread
    assert reader.read() == (list(range(12, 20)), 0)
    assert reader.lost == 0


def test_wrap_many_times_in_small_reads(ring_path, rings):
    w, r = make(ring_path, rings, 4)
    reader = RingReader(r)
    got = []
    n = 1
    for burst in [1, 3, 4, 2, 4, 1, 1, 4, 3] * 5:
        push(w, *range(n, n + burst))
        n += burst
        vals, lost = reader.read()
        assert lost == 0
        got += vals
    assert got == list(range(1, n))


def test_overflow_counts_lost_and_resyncs(ring_path, rings):
    w, r = make(ring_path, rings, 8)
    reader = RingReader(r)
    push(w, *range(1, 21))  # 20 written, only the last 8 survive
    vals, lost = reader.read()
    assert lost == 12
    assert vals == list(range(13, 21))
    assert reader.lost == 12
    push(w, 21, 22, 23)
    assert reader.read() == ([21, 22, 23], 0)
    push(w, *range(24, 24 + 9))  # one more than a full ring
    vals, lost = reader.read()
    assert (vals, lost) == (list(range(25, 33)), 1)
    assert reader.lost == 13


class _LappingHeader:
    """The header as the reader sees it while the writer keeps going: right
    after the reader has loaded the write index, the writer publishes more."""

    def __init__(self, ring: StepRing, writer: StepRing, then_write: list[int]) -> None:
        self._ring = ring
        self._writer = writer
        self._then = then_write

    def __getitem__(self, i: int) -> int:
        v = self._ring.header[i]
        if i == W_INDEX and self._then:
            vals, self._then = self._then, []
            push(self._writer, *vals)
        return v


class _LappingRing:
    def __init__(self, ring: StepRing, writer: StepRing, then_write: list[int]) -> None:
        self.capacity, self.mask, self.slots = ring.capacity, ring.mask, ring.slots
        self.header = _LappingHeader(ring, writer, then_write)


@pytest.mark.parametrize(
    "written, lap",
    [
        (list(range(1, 9)), [9, 10]),  # reader a full ring behind, writer laps during the copy
        (list(range(1, 21)), [21, 22, 23]),  # reader already overflowed, writer keeps going
        (list(range(1, 8)), [8, 9, 10]),  # reader 7/8 behind: the oldest unread slots get overwritten
    ],
)
def test_reader_never_returns_slots_overwritten_during_the_read(ring_path, rings, written, lap):
    """The writer never waits, so it may overwrite the oldest unread slots
    while the reader copies them. Those must be counted as lost, not returned
    (they hold newer boundaries, out of order, that the next read returns again)."""
    w, r = make(ring_path, rings, 8)
    push(w, *written)
    reader = RingReader(_LappingRing(r, w, lap))  # type: ignore[arg-type]
    vals, lost = reader.read()
    assert vals == sorted(vals), f"boundaries out of order: {vals}"
    end = reader.read_index
    assert vals == list(range(end - len(vals) + 1, end + 1)), vals  # value k+1 sits at index k
    assert lost + len(vals) == end
    # and the next read carries on without duplicates
    reader.ring = r
    more, lost2 = reader.read()
    assert more == lap
    assert lost2 == 0


# ------------------------------------------------------------------ opening


def _file(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


def _header(magic=MAGIC, version=VERSION, capacity=8, index=0) -> bytes:
    return struct.pack("<8q", magic, version, capacity, index, 0, 0, 0, 0)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"short",
        b"\x00" * 63,
        _header(magic=0) + bytes(64),
        _header(magic=MAGIC + 1) + bytes(64),
        b"x" * 4096,
        _header(version=VERSION + 1) + bytes(64),
        _header(capacity=0) + bytes(64),
        _header(capacity=-8) + bytes(64),
        _header(capacity=6) + bytes(64),
        _header(capacity=1 << 20) + bytes(64),  # claims more slots than the file holds
        b"x" * 100,  # size not a whole number of 8-byte words
        _header(capacity=8) + bytes(64) + b"abc",  # a valid ring with a torn tail
    ],
    ids=[
        "empty",
        "tiny",
        "63-bytes",
        "magic-0",
        "magic-off",
        "text",
        "version",
        "cap-0",
        "cap-neg",
        "cap-not-pow2",
        "truncated",
        "odd-size-text",
        "odd-size-ring",
    ],
)
def test_open_rejects_files_that_are_not_rings(tmp_path, data):
    path = _file(str(tmp_path / "x.ring"), data)
    with pytest.raises(RingError):
        StepRing.open(path)


def test_open_accepts_a_handmade_ring(tmp_path, rings):
    path = _file(str(tmp_path / "h.ring"), _header(capacity=4, index=3) + struct.pack("<4q", 7, 8, 9, 0))
    r = StepRing.open(path)
    rings.append(r)
    assert RingReader(r).read() == ([7, 8, 9], 0)


def test_open_does_not_follow_symlinks(ring_path, rings, tmp_path):
    rings.append(StepRing.create(ring_path, 8))
    link = str(tmp_path / "link.ring")
    os.symlink(ring_path, link)
    with pytest.raises((RingError, OSError)):
        StepRing.open(link)


def test_reader_ring_is_read_only(ring_path, rings):
    w, r = make(ring_path, rings, 8)
    with pytest.raises(TypeError):
        r.slots[0] = 1


def test_close_twice_is_harmless(ring_path):
    ring = StepRing.create(ring_path, 8)
    ring.close()
    ring.close()


# ------------------------------------------------------------------ decoding

OPT = -(protocol.STEP_RANK["optimizer"] + 1)
API = -(protocol.STEP_RANK["api"] + 1)
CALL = -(protocol.STEP_RANK["compiled_call"] + 1)


def test_decoder_deltas_indices_and_wall_time():
    d = StepDecoder()
    now_ns = 5_000_000_000
    evs = d.decode([OPT, 1_000_000_000, 1_000_500_000, 1_001_500_000], 0, now_wall=1000.0, now_ns=now_ns)
    assert len(evs) == 1
    ev = evs[0]
    assert ev["kind"] == protocol.STEPS
    assert ev["src"] == "optimizer"
    assert ev["i0"] == 0
    assert ev["ns"] == [0, 500_000, 1_000_000]
    # wall time of the first boundary: now minus how long ago it was on the monotonic clock
    assert ev["t"] == pytest.approx(1000.0 - 4.0)
    # next batch continues the deltas and the indices
    (ev2,) = d.decode([1_002_000_000, 1_004_000_000], 0, now_wall=1000.5, now_ns=now_ns + 500_000_000)
    assert ev2["i0"] == 3
    assert ev2["ns"] == [500_000, 2_000_000]
    assert ev2["t"] == pytest.approx(1000.5 - (5.5 - 1.002))
    assert d.decode([], 0, 1.0, 1) == []


def test_decoder_lost_boundaries_advance_indices_and_break_deltas():
    d = StepDecoder()
    d.decode([OPT, 100, 200, 300], 0, 0.0, 0)
    (ev,) = d.decode([900, 1000], 5, 0.0, 0)
    assert ev["i0"] == 3 + 5
    assert ev["ns"] == [0, 100], "the delta across lost boundaries is unknown"


def test_decoder_source_switch_mid_batch():
    d = StepDecoder()
    evs = d.decode([CALL, 10, 20, 30, OPT, 40, 55, API, 70], 0, 0.0, 0)
    assert [(e["src"], e["i0"], e["ns"]) for e in evs] == [
        ("compiled_call", 0, [0, 10, 10]),
        ("optimizer", 0, [0, 15]),
        ("api", 0, [0]),
    ]


def test_decoder_marker_at_batch_end_then_values_next_read():
    d = StepDecoder()
    assert [e["src"] for e in d.decode([CALL, 1, 2, OPT], 0, 0.0, 0)] == ["compiled_call"]
    (ev,) = d.decode([50, 60], 0, 0.0, 0)
    assert (ev["src"], ev["i0"], ev["ns"]) == ("optimizer", 0, [0, 10])


def test_decoder_unknown_rank_and_clock_going_back():
    d = StepDecoder()
    (ev,) = d.decode([-10, 100, 90, 120], 0, 0.0, 0)
    assert ev["src"] == "source9"
    assert ev["ns"] == [0, 0, 30], "negative deltas are clamped"


def test_decoded_events_fold_into_the_store():
    d = StepDecoder()
    vals = [CALL, 0, 30_000_000, OPT] + [1_000_000_000 + k * 10_000_000 for k in range(11)]
    s = Session()
    for ev in d.decode(vals, 0, now_wall=2000.0, now_ns=2_000_000_000):
        s.apply(protocol.decode(protocol.encode(ev)))
    assert s.steps.source == "optimizer"
    assert s.steps.count == 11
    st = s.steps.current.stats()
    assert st.intervals == 10
    assert st.p50_ms == pytest.approx(10.0)


# ------------------------------------------------------------ other processes

_RAW_WRITER = textwrap.dedent(
    """
    import sys, time
    from ctmon.wire.ring import StepRing, W_INDEX
    ring = StepRing.create(sys.argv[1], int(sys.argv[2]))
    slots, hdr, mask = ring.slots, ring.header, ring.mask
    print("ready", flush=True)
    w = 0
    while True:
        for _ in range(200):
            slots[w & mask] = w + 1
            w += 1
            hdr[W_INDEX] = w
        time.sleep(0.0002)
    """
)

_AGENT_WRITER = textwrap.dedent(
    """
    import sys
    from ctmon.wire.ring import StepRing
    from ctmon.agent.steps import StepClock, RANK_COMPILED, RANK_OPTIMIZER

    class Channel:
        disabled = False
        def put(self, *a, **k):
            pass

    clock = StepClock(Channel())
    clock.attach_ring(StepRing.create(sys.argv[1], int(sys.argv[2])))
    for _ in range(5):
        clock.mark(RANK_COMPILED)
    print("ready", flush=True)
    n = 0
    while True:
        clock.mark(RANK_OPTIMIZER)
        n += 1
        if n % 100 == 0:
            sys.stdin.readline() if n >= int(sys.argv[3]) else None
    """
)


def _spawn(code: str, *args: str, stdin=None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stdin=stdin, env=env)
    line = p.stdout.readline()
    if line != b"ready\n":
        p.kill()
        p.wait()
        pytest.fail(f"writer did not start: {line!r}")
    return p


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
    p.wait()
    for pipe in (p.stdin, p.stdout):
        if pipe is not None:
            pipe.close()
    assert p.returncode == -signal.SIGKILL


def test_reader_follows_a_writer_process_killed_mid_run(ring_path):
    p = _spawn(_RAW_WRITER, ring_path, str(1 << 20))
    try:
        ring = StepRing.open(ring_path)
        reader = RingReader(ring)
        got: list[int] = []
        deadline = time.monotonic() + 20
        while len(got) < 30_000 and time.monotonic() < deadline:
            vals, lost = reader.read()
            assert lost == 0
            got += vals
        assert len(got) >= 30_000, "the writer made no progress"
    finally:
        _kill(p)  # SIGKILL while it is writing
    vals, lost = reader.read()
    got += vals
    final = ring.header[W_INDEX]
    assert final >= 30_000
    # every boundary published before the kill is there, in order, exactly once
    assert got == list(range(1, final + 1))
    assert lost == 0 and reader.lost == 0
    ring.close()


def test_agent_clock_killed_mid_run_every_published_step_reaches_the_store(ring_path):
    p = _spawn(_AGENT_WRITER, ring_path, str(1 << 16), "20000", stdin=subprocess.PIPE)
    ring = StepRing.open(ring_path)
    reader = RingReader(ring)
    decoder = StepDecoder()
    session = Session()
    try:
        deadline = time.monotonic() + 20
        while ring.header[W_INDEX] < 20_000 and time.monotonic() < deadline:
            for ev in decoder.decode(*reader.read(), time.time(), time.perf_counter_ns()):
                session.apply(ev)
        assert ring.header[W_INDEX] >= 20_000
    finally:
        _kill(p)  # the writer is blocked mid-loop, between two marks
    vals, lost = reader.read()
    for ev in decoder.decode(vals, lost, time.time(), time.perf_counter_ns()):
        session.apply(protocol.decode(protocol.encode(ev)))
    published = ring.header[W_INDEX]
    ring.close()
    assert reader.lost == 0
    # 1 compiled_call marker + 5 boundaries + 1 optimizer marker, then optimizer boundaries
    assert session.steps.source == "optimizer"
    assert session.steps.count == published - 7
    series = session.steps.current
    assert len(series.intervals()) == session.steps.count - 1
    assert all(v >= 0 for v in series.intervals())


# ------------------------------------------------- space reserved up front


def test_create_reserves_every_page(ring_path, rings):
    """A page of a mapped file the filesystem must find later is SIGBUS at
    the store into it (a full tmpfs): every page is allocated at creation."""
    rings.append(StepRing.create(ring_path, 1 << 12))
    size = (HEADER_WORDS + (1 << 12)) * 8
    assert os.stat(ring_path).st_blocks * 512 >= size


@pytest.mark.parametrize("code", [errno.EOPNOTSUPP, errno.EINVAL])
def test_create_writes_the_pages_where_fallocate_is_unsupported(ring_path, rings, monkeypatch, code):
    """A filesystem without fallocate (musl says EOPNOTSUPP, some say EINVAL):
    the pages are written instead. (Such a filesystem is not at hand: the
    call's answer is stood in for.)"""

    def no_fallocate(fd: int, offset: int, length: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "posix_fallocate", no_fallocate)
    w, r = make(ring_path, rings, 1 << 12)
    assert os.stat(ring_path).st_blocks * 512 >= (HEADER_WORDS + (1 << 12)) * 8
    assert os.path.getsize(ring_path) == (HEADER_WORDS + (1 << 12)) * 8
    push(w, 7, 8)
    assert RingReader(r).read() == ([7, 8], 0)


def test_create_that_fails_leaves_no_file(ring_path, monkeypatch):
    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError) as e:
        StepRing.create(ring_path, 8)
    assert e.value.errno == errno.ENOSPC
    assert not os.path.exists(ring_path)


# ------------------------------------------- no ring file: the socket instead


def test_private_ring_reads_like_a_shared_one():
    ring = StepRing.private(8)
    try:
        assert ring.header[W_MAGIC] == MAGIC and ring.header[W_CAPACITY] == 8
        reader = RingReader(ring)
        push(ring, *range(1, 11))
        assert reader.read() == ([3, 4, 5, 6, 7, 8, 9, 10], 2)
    finally:
        ring.close()


def _relayed(relay: StepRelay) -> tuple[Session, int, int]:
    """The relay's events, sent as the agent sends them and folded as a
    viewer does; the boundaries they hold and the drops they count."""
    s = Session()
    received = dropped = 0
    for ev in relay.drain():
        ev = protocol.decode(protocol.encode(ev))
        if ev["kind"] == protocol.DROPS:
            dropped = ev["steps"]
        else:
            received += len(ev["ns"])
        s.apply(ev)
    return s, received, dropped


def _clock_on(ring: StepRing) -> StepClock:
    clock = StepClock(Channel(None))
    clock.attach_ring(ring)
    return clock


def test_relay_sends_every_boundary_the_clock_marks():
    """No ring file: the clock writes into a private ring as into a shared
    one, and the sender thread's drains turn it into ``steps`` events."""
    ring = StepRing.private(1 << 10)
    clock = _clock_on(ring)
    relay = StepRelay(ring)
    s = Session()
    for n in (300, 700, 0, 1000):  # 2,000 through a 1,024-slot ring, drained in time
        for _ in range(n):
            clock.api_step()
        for ev in relay.drain():
            s.apply(protocol.decode(protocol.encode(ev)))
    assert (s.steps.source, s.steps.count, clock.count) == ("api", 2000, 2000)
    assert len(s.steps.current.intervals()) == 1999 and s.drops["steps"] == 0
    ring.close()


def test_relay_counts_what_it_could_not_read_in_time():
    ring = StepRing.private(64)
    clock = _clock_on(ring)
    relay = StepRelay(ring)
    for _ in range(1000):
        clock.api_step()
    s, received, dropped = _relayed(relay)
    assert received == 64 and dropped == 1000 - 64
    assert s.steps.count == 1000 and s.drops["steps"] == dropped
    for _ in range(5):
        clock.api_step()
    s, received, dropped = _relayed(relay)
    assert (received, dropped) == (5, 0)  # nothing more lost: no drops event
    ring.close()


# --------------------------------------------------- decoder: runs at a time


def _decode_one_by_one(d, values, now_wall, now_ns):  # type: ignore[no-untyped-def]
    """The decoder's loop as it was, a value at a time: the reference the
    run-at-a-time decoder must match."""
    from ctmon.wire.ring import GAP, MAX_BATCH, SOURCES

    events, batch, first_ns, i0 = [], [], 0, d.next_idx
    for v in values:
        if v < 0:
            if batch:
                events.append(d._event(i0, first_ns, batch, now_wall, now_ns))
                batch = []
            if v <= -GAP:
                d.next_idx += -v - GAP - 1
            else:
                rank = -v - 1
                d.src = SOURCES[rank] if 0 <= rank < len(SOURCES) else f"source{rank}"
                d.next_idx = 0
            d.prev_ns = None
            continue
        if len(batch) >= MAX_BATCH:
            events.append(d._event(i0, first_ns, batch, now_wall, now_ns))
            batch = []
        if not batch:
            first_ns, i0 = v, d.next_idx
        batch.append(0 if d.prev_ns is None else max(0, v - d.prev_ns))
        d.prev_ns = v
        d.next_idx += 1
    if batch:
        events.append(d._event(i0, first_ns, batch, now_wall, now_ns))
    return events


def test_decoder_matches_the_value_at_a_time_loop():
    import random

    from ctmon.wire.ring import GAP, MAX_BATCH

    rng = random.Random(7)
    fast, ref = StepDecoder(), StepDecoder()
    t = 1_000_000
    for _ in range(60):
        values = []
        for _ in range(rng.choice([0, 1, 5, 50, MAX_BATCH - 1, MAX_BATCH + 3, 2 * MAX_BATCH + 1])):
            r = rng.random()
            if r < 0.01:
                values.append(rng.choice([CALL, OPT, API, -9]))
            elif r < 0.02:
                values.append(-(GAP + rng.randrange(1, 50)))
            else:
                t += rng.randrange(-50, 10_000)  # now and then the clock goes back
                values.append(max(0, t))
        assert fast.decode(values, 0, 10.0, t) == _decode_one_by_one(ref, values, 10.0, t)
        assert (fast.src, fast.next_idx, fast.prev_ns) == (ref.src, ref.next_idx, ref.prev_ns)
