"""The agent's way out: bounded queues, one daemon sender thread, a socket.

Everything that runs on the job's own threads (trace handler, step hooks) only
appends to a deque -- O(1), no locks held across I/O, no syscalls. The sender
thread wakes every FLUSH_INTERVAL_S (or at once for compile events; on the
hotness sampler's schedule when it runs, ctmon/agent/hotness.py), turns raw
records into protocol events, encodes them and writes them to the supervisor's
socket. If the supervisor is slow, the sender blocks, not the job; if it is
gone, the agent goes quiet and the job runs on.

Compile events are rare and precious: they are never dropped below a very
large cap (reaching it means the supervisor has been stuck for minutes; the
count is reported in a ``drops`` event). Step boundaries do not pass through
the queues at all: they go to a shared-memory ring (ctmon/wire/ring.py), or,
where no ring file can be made, to a ring in the job's memory that this
thread reads at each flush (ctmon/agent/step_relay.py: StepRelay).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ctmon.wire import protocol

# Each wake of this thread waits for the GIL while the job's thread hands it
# back and forth around every torch op, and the job pays for the hand-over:
# far more than the flush's few µs of work (benchmarks/hook_cost.py,
# docs/PERFORMANCE.md). Compile events wake it at once; what waits for this
# pace (device times, library log lines, the logger check) is fine a quarter
# of a second late.
FLUSH_INTERVAL_S = 0.25
# Where the step clock counts a host-bound loop's steps (past its first 20 s,
# ctmon/agent/steps.py), each wake costs that loop a few hundred µs of its
# own: the thread wakes half as often there.
COUNTING_STRIDE = 2.0
EVENT_QUEUE_MAX = 100_000  # compile-time records; reaching it means a stall
# How long the job's fork waits for a flush under way to end (see
# before_fork): a flush takes µs, an import in it ms; only a monitor that
# has stopped reading makes a fork wait this long, and only once.
FORK_WAIT_S = 1.0
SEND_CHUNK = 1 << 16


class Channel:
    """Queues plus the sender thread. One per agent process."""

    def __init__(self, sock: socket.socket | None) -> None:
        self._sock = sock
        self.pid = os.getpid()
        self.disabled = False  # set in forked children and after fatal errors
        # Raw records from the trace handler and hooks: (tag, payload...)
        self.records: deque[tuple[Any, ...]] = deque()
        self.event_drops = 0
        self.sent_lines = 0
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        # The converter turns raw records into events; set by the agent.
        self.convert: Callable[[tuple[Any, ...]], list[protocol.Event]] = lambda r: []
        self.periodic: Callable[[], list[protocol.Event]] = lambda: []
        self._reported_drops = 0
        self._lock = threading.Lock()  # serialises flushes (sender vs atexit); held across the job's forks
        self._held_for_fork = False
        self._fork_wait_s = FORK_WAIT_S
        self.rank: int | None = None  # stamped on every event: this process is that rank
        # While set, records are kept, not sent: called before each flush, it
        # returns True until the process knows it is a rank and has connected
        # (ctmon/agent/pending.py).
        self.hold: Callable[[], bool] | None = None
        # Run on the sender thread at moments of its own choosing (never an
        # urgent wake's), returning the seconds until its next run: the
        # hotness sampler (ctmon/agent/hotness.py). Not run while on hold.
        self.tick: Callable[[], float] | None = None
        # Whether the step clock counts a host-bound loop's steps now (then
        # the waits are COUNTING_STRIDE times as long); any thread may ask.
        self.counting: Callable[[], bool] = lambda: False
        # Set in a forked child that keeps what it sees but has no sender
        # thread yet (ctmon/agent/core.py: Agent.after_fork_in_child): run
        # once, at its first urgent record (a compile), to start one. A
        # child that never compiles (a DataLoader worker) never gets a thread.
        self.dormant: Callable[[], None] | None = None

    # ---- called on the job's threads: must stay O(1) and never raise ----

    def put(self, record: tuple[Any, ...], urgent: bool = False) -> None:
        if self.disabled:
            return
        if len(self.records) >= EVENT_QUEUE_MAX:
            self.event_drops += 1
            return
        self.records.append(record)
        if urgent:
            if self.dormant is not None:
                self._wake_dormant()
            self._wake.set()

    def _wake_dormant(self) -> None:
        wake, self.dormant = self.dormant, None
        if wake is not None:
            try:
                wake()
            except Exception:  # no sender: the records stay kept, unsent
                pass

    def put_last(self, record: tuple[Any, ...]) -> None:
        """A record of ctmon's own for the last flush (the final hotness
        event): past the queue's cap, which counts only the job's records
        as drops; one per caller, at exit."""
        if not self.disabled:
            self.records.append(record)

    # ---- lifecycle ----

    def start(self) -> None:
        t = threading.Thread(target=self._run, name="ctmon-sender", daemon=True)
        self._thread = t
        t.start()

    def close(self, timeout: float = 2.0) -> None:
        """Final flush at interpreter exit; bounded so exit never hangs."""
        if self.disabled or os.getpid() != self.pid:
            return
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._thread is None or not self._thread.is_alive():
            # The sender has finished; flush what arrived since, with a
            # deadline on the socket in case the supervisor is stuck.
            if self._sock is not None:
                try:
                    self._sock.settimeout(timeout)
                except OSError:
                    pass
            self._flush()
        self.disabled = True
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass

    def before_fork(self) -> None:
        """The job forks (in the parent, on the forking thread): let a flush
        under way end first, and start no other until the fork is done. A
        flush may import a module (the torch event's, once) and a module's
        import lock held by this thread at the fork stays held in the child
        for good: the child's own import of it would hang. Bounded: a
        flush blocked that long is blocked on a monitor that stopped
        reading (it imports nothing then), and later forks do not wait."""
        try:
            wait = self._fork_wait_s
            self._held_for_fork = self._lock.acquire(timeout=wait) if wait > 0 else self._lock.acquire(False)
            if not self._held_for_fork:
                self._fork_wait_s = 0.0
        except Exception:
            self._held_for_fork = False

    def after_fork_in_parent(self) -> None:
        if self._held_for_fork:
            self._held_for_fork = False
            self._lock.release()

    def after_fork_in_child(self) -> None:
        """A forked child (DataLoader worker, ...) starts silent.

        It shares the parent's socket; writing to it would interleave bytes
        with the parent's stream, so the child drops its copy of the fd.
        Only the thread that forked lives on in the child: the sender
        thread is gone, and a lock or event it held at the fork would stay
        held for good, so both are new. The parent's queued records are
        the parent's to send. The agent may then make the channel dormant
        (core.py), with a connection of the child's own later.
        """
        self.disabled = True
        self.records.clear()
        self.pid = os.getpid()
        self._thread = None
        self._stop = False
        self._lock = threading.Lock()
        self._held_for_fork = False
        self._wake = threading.Event()
        self.hold = self.tick = self.dormant = None
        self.rank = None
        self.event_drops = self._reported_drops = self.sent_lines = 0
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()  # close(2) only: the parent's connection stays up
            except OSError:
                pass

    # ---- sender thread ----

    def _run(self) -> None:
        next_tick = time.monotonic()
        while not self._stop:
            tick = self.tick if self.hold is None else None
            # With a tick, its schedule paces the flushes too: one thread
            # waking at the sampler's pace, not two threads.
            wait = next_tick - time.monotonic() if tick is not None else FLUSH_INTERVAL_S * self._stride()
            self._wake.wait(max(0.0, wait))
            self._wake.clear()
            if self._stop:
                break
            if tick is not None and time.monotonic() >= next_tick:
                try:
                    next_tick = time.monotonic() + tick() * self._stride()
                except Exception:  # never let a sample stop the sender
                    next_tick = time.monotonic() + FLUSH_INTERVAL_S
            try:
                self._flush()
            except Exception:  # never let the sender die silently mid-run
                self.event_drops += 1

    def _stride(self) -> float:
        try:
            return COUNTING_STRIDE if self.counting() else 1.0
        except Exception:
            return 1.0

    def _flush(self) -> None:
        with self._lock:
            hold = self.hold
            if hold is not None and hold():
                return
            events: list[protocol.Event] = []
            records = self.records
            n = len(records)
            for _ in range(n):
                rec = records.popleft()
                try:
                    events.extend(self.convert(rec))
                except Exception:
                    self.event_drops += 1
            try:
                events.extend(self.periodic())
            except Exception:
                pass
            drops = self.event_drops
            if drops != self._reported_drops:
                self._reported_drops = drops
                events.append({"kind": protocol.DROPS, "t": time.time(), "events": drops})
            if events:
                rank = self.rank
                if rank is not None:
                    for e in events:
                        e["rank"] = rank
                self._send(b"".join(protocol.encode(e) for e in events))
                self.sent_lines += len(events)

    def send_now(self, event: protocol.Event) -> None:
        """Synchronous send, for the hello before any user code runs."""
        with self._lock:
            if self.rank is not None:
                event["rank"] = self.rank
            self._send(protocol.encode(event))

    def _send(self, data: bytes) -> None:
        sock = self._sock
        if sock is None or self.disabled:
            return
        view = memoryview(data)
        try:
            while view:
                n = sock.send(view[:SEND_CHUNK], socket.MSG_NOSIGNAL)
                view = view[n:]
        except OSError:
            # The supervisor went away (or stalled past the exit deadline):
            # stop sending for good; the job is not affected.
            self._sock = None
            self.disabled = True
            try:
                sock.close()
            except OSError:
                pass


def connect(path: str, timeout: float = 5.0) -> socket.socket | None:
    """Connect to the supervisor's agent socket, or None if it is not there."""
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(path)
        s.settimeout(None)
        return s
    except OSError:
        return None
