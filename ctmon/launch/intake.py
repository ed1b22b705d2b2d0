"""The supervisor's intake: what the job's agents send.

Every process of the job that runs the agent connects to ``agent.sock`` (the
job itself, a program it exec'd into, a child that imported ctmon): each
connection is an ``AgentConnection`` that knows its pid from the moment it is
accepted (``SO_PEERCRED``). Its lines are validated and passed on as they came.
Step boundaries travel through shared-memory rings instead (ctmon/wire/ring.py):
a ``process`` event names the ring, and the rings are drained on a clock. A
process whose ``process`` event says it could make no ring sends its
boundaries as ``steps`` events on its socket (ctmon/agent/step_relay.py: StepRelay).

Nothing an agent sends may take the supervisor down: a bad line is skipped
with a note, a ring that cannot be read is dropped with a note.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable

from ctmon.launch import execwatch
from ctmon.launch.sockets import same_user
from ctmon.wire import events as E
from ctmon.wire import protocol
from ctmon.wire.decode import Decoder
from ctmon.wire.event_base import Event, Unknown
from ctmon.wire.ring import RingError, RingReader, StepDecoder, StepRing

Emit = Callable[[Event], None]
# Kinds only the supervisor writes: an agent sending one is ignored (and a
# viewer's refusal is never recorded).
SUPERVISOR_KINDS = (E.SessionStart, E.Exit, E.Output, E.Sample, E.Steps, E.Refusal, E.ProcessEnd)
# Python's json module refuses integers of more than 4300 digits (CVE-2020-10735);
# msgspec reads them. Lines with a digit run that long get the stdlib's verdict.
_LONG_DIGITS = re.compile(rb"[0-9]{4300}")


def _stdlib_readable(line: bytes) -> bool:
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return True


class AgentConnection:
    """One agent connection: one process of the job."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.splitter = protocol.LineSplitter()
        self.pid: int | None = execwatch.peer_pid(sock)  # who connected (None: the platform cannot say)
        self.rank: int | None = None  # the rank its hello declared
        # Its hello said it has no step ring: its boundaries come on its
        # socket (ctmon/agent/step_relay.py: StepRelay), with the count of those lost.
        self.relays_steps = False
        self.steps_dropped = 0


class Ring:
    def __init__(self, path: str, ring: StepRing, pid: int | None = None, rank: int | None = None) -> None:
        self.path = path
        self.pid = pid  # the process writing it
        self.rank = rank  # its rank in a distributed job: its steps say so
        self.reader = RingReader(ring)
        self.decoder = StepDecoder()
        # A program the job exec'd into starts a new ring counting from 0:
        # its steps of the same source continue the previous ring's indices.
        self.follows_src: str | None = None
        self.offset = 0

    def next_index(self) -> tuple[str, int]:
        src = self.decoder.src
        return src, self.decoder.next_idx + (self.offset if src == self.follows_src else 0)


class Intake:
    def __init__(
        self,
        session_dir: str,
        emit: Emit,
        write_line: Callable[[bytes, Event | Unknown], None],
        peer_note: Callable[[str], None],
    ) -> None:
        self.session_dir = session_dir
        self.emit = emit  # an event we made (notes, steps, drops)
        self.write_line = write_line  # an agent's line, recorded as it came
        self.peer_note = peer_note
        self.agents: list[AgentConnection] = []
        self.rings: list[Ring] = []
        self.steps_lost = 0
        self.decoder = Decoder()

    def accept(self, listener: socket.socket) -> AgentConnection | None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return None
        if not same_user(conn):
            conn.close()
            return None
        conn.setblocking(False)
        a = AgentConnection(conn)
        self.agents.append(a)
        return a

    def pids(self) -> list[int | None]:
        return [a.pid for a in self.agents]

    def forget(self, a: AgentConnection) -> None:
        if a in self.agents:
            self.agents.remove(a)
            if a.rank is not None:  # a rank's process is gone: its state says so before the launcher's summary
                self.emit(E.ProcessEnd(t=time.time(), pid=a.pid, rank=a.rank))

    def read(self, a: AgentConnection) -> bool:
        """Take what the agent sent; False once it has closed (drop it)."""
        try:
            data = a.sock.recv(1 << 16)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            return False
        # Device-time windows name step indices: make sure those steps are in
        # the recording first (they travel through the ring, not the socket).
        self.drain_rings()
        oversized = a.splitter.oversized
        for line in a.splitter.feed(data):
            try:
                self._line(line, a)
            except Exception as e:  # one bad event is skipped; the agent's next ones still count
                self.peer_note(f"skipped an event from the job's agent ({type(e).__name__}: {e})")
        if a.splitter.oversized > oversized:
            self.peer_note(
                f"skipped {a.splitter.oversized - oversized} line(s) from the job's agent "
                f"longer than {protocol.MAX_LINE_BYTES} bytes"
            )
        return True

    def _line(self, line: bytes, a: AgentConnection | None = None) -> None:
        # the one place an agent's bytes become an event: validated here, the
        # line is then recorded as it came (so the recording is what was sent)
        ev = self.decoder.decode(line)
        if ev is None:
            self.peer_note(f"skipped a line from the job's agent that is not a valid event ({self.decoder.last_error})")
            return
        if isinstance(ev, SUPERVISOR_KINDS) and not (isinstance(ev, E.Steps) and a is not None and a.relays_steps):
            return  # only the supervisor writes these (or steps, an agent without a ring)
        if _LONG_DIGITS.search(line) is not None and not _stdlib_readable(line):
            # an integer in a field the decoder skipped, too long for Python's
            # own json module: recorded, it would make the file unreadable there
            self.peer_note("skipped a line from the job's agent with an integer too long for JSON readers")
            return
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            # a field the decoder skipped (one it does not know) held bytes
            # that are not UTF-8: the recording gets U+FFFD there, so any JSON
            # reader can read every line of it
            line = line.decode("utf-8", "replace").encode("utf-8")
        if isinstance(ev, E.Process):
            if a is not None and ev.rank is not None:
                a.rank = ev.rank
                self._ranked_late(ev.pid, ev.rank)
            if ev.step_ring:
                self._open_ring(ev.step_ring, ev.pid, ev.rank)
            elif ev.step_ring_error and a is not None:
                a.relays_steps = True
        elif isinstance(ev, E.Drops) and ev.steps is not None and a is not None and a.relays_steps:
            self._relayed_drops(a, ev.steps)
            if ev.events is None:
                return  # counted into the supervisor's own total, just emitted
        # a kind this version does not know (a newer agent's) is recorded as
        # it came, for a newer viewer to read
        self.write_line(line + b"\n", ev)

    def _relayed_drops(self, a: AgentConnection, dropped: int) -> None:
        """An agent without a ring counts the boundaries it lost (cumulative):
        they join the rings' losses, in the one total the drops event holds."""
        more = dropped - a.steps_dropped
        if more > 0:
            a.steps_dropped = dropped
            self.steps_lost += more
            self.emit(E.Drops(t=time.time(), steps=self.steps_lost))

    # ------------------------------------------------------------ step rings

    def _ranked_late(self, pid: int | None, rank: int) -> None:
        """A process that learnt its rank after its hello (it initialised a
        process group): its steps from now on are that rank's."""
        mine = [r for r in self.rings if r.pid == pid and r.rank is None]
        if mine:
            self.drain_rings()  # what it stepped before stays the job's own
            for r in mine:
                r.rank = rank

    def _open_ring(self, path: str, pid: int | None = None, rank: int | None = None) -> None:
        # Only rings inside our own private session directory.
        if "\0" in path or len(path) > 4096:
            raise ValueError("step_ring is not a usable path")
        real = os.path.realpath(path)
        if os.path.dirname(real) != os.path.realpath(self.session_dir) or any(r.path == real for r in self.rings):
            return
        try:
            ring = Ring(real, StepRing.open(real), pid, rank)
            # a second ring of the same process (same pid, same rank) is the
            # program it exec'd into: its steps continue the first's
            before = [r for r in self.rings if r.rank == rank and (r.pid == pid or rank is None)]
            if before:
                self.drain_rings()
                ring.follows_src, ring.offset = before[-1].next_index()
            self.rings.append(ring)
        except (OSError, RingError) as e:
            self.emit(
                E.Note(t=time.time(), level="warning", source="ctmon", message=f"cannot read step boundaries: {e}")
            )

    def drain_rings(self) -> None:
        for r in list(self.rings):
            try:
                self._drain(r)
            except Exception as e:  # a ring the job scribbled over: stop reading it, keep the rest
                self.rings.remove(r)
                r.reader.ring.close()
                self.peer_note(
                    f"stopped reading step boundaries from {os.path.basename(r.path)} ({type(e).__name__}: {e})"
                )

    def _drain(self, r: Ring) -> None:
        values, lost = r.reader.read()
        if not values and not lost:
            return
        now_wall, now_ns = time.time(), time.perf_counter_ns()
        reader = r.reader
        events = r.decoder.decode(values, lost, now_wall, now_ns, reader.start, reader.source(), reader.anchor())
        for ev in events:
            i0 = ev["i0"] + (r.offset if r.offset and ev["src"] == r.follows_src else 0)
            self.emit(E.Steps(t=ev["t"], src=ev["src"], i0=i0, ns=ev["ns"], rank=r.rank))
        if lost:
            # the boundaries the lost slots held (a counting stretch's marker
            # holds many, a source switch's none)
            self.steps_lost += r.decoder.lost_steps
            self.emit(E.Drops(t=now_wall, steps=self.steps_lost))

    def close(self) -> None:
        """The rings' files go with the session."""
        for r in self.rings:
            r.reader.ring.close()
            try:
                os.unlink(r.path)
            except OSError:
                pass
