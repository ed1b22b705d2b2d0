"""Event feeds for viewers: where a viewer's events come from.

A feed yields batches of events (lists) from a blocking iterator meant to run
in a worker thread, and says whether it is live. Viewers fold each batch into
their own ``Session`` store; they never parse anything themselves.

* ``SocketFeed``: a live job, from its supervisor's viewer socket. The
  supervisor streams the recording from byte 0, so the first batches bring
  the full history, then new events as they happen. A viewer still behind
  when the supervisor closes (it serves late viewers only a few seconds
  after the job's end) reads the rest from the recording. ``control()``
  asks the supervisor to signal the job (interrupt / terminate / kill).
* ``RecordingFeed``: a finished (or still growing) recording on disk.
* ``NodesFeed``: the recordings of one job's nodes, as one job.
* ``ListFeed``: events given in memory (tests, benchmarks).
"""

from __future__ import annotations

import heapq
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from ctmon.read.recording import (
    ReadStats,
    RecordingError,
    StreamDecoder,
    open_recording,
    read_recording,
    unreadable_note,
)
from ctmon.wire import protocol
from ctmon.wire.decode import Decoder, Fix, typed
from ctmon.wire.event_base import Event, Unknown
from ctmon.wire.events import Exit, Refusal, SessionStart

Batch = list[Event | Unknown]


class FileBatch(list[Event | Unknown]):
    """A batch read from a recording, with where in the file the next line
    starts: a replay can read on from there again instead of keeping events."""

    def __init__(self, events: Batch, end: int) -> None:
        super().__init__(events)
        self.end = end


BATCH_MAX = 2000


class Feed:
    live = False
    name = ""
    fix: Fix | None = None  # see fixes()

    def batches(self) -> Iterator[Batch]:
        raise NotImplementedError

    def fixes(self, fix: Fix) -> bool:
        """Have the feed apply ``fix`` to events that may need it, as it
        reads them (see ``Decoder.decode_all``). False: this feed cannot
        tell, and the caller applies ``fix.apply`` to every event itself."""
        return False

    def control(self, action: str, grace: float | None = None) -> bool:
        return False

    def send_stdin(self, data: str) -> bool:
        """Input for the job's stdin (a job started by ``attach``)."""
        return False

    def close(self) -> None:
        pass


class ListFeed(Feed):
    def __init__(
        self, events: list[Event | Unknown | dict[str, Any]], live: bool = False, name: str = "events"
    ) -> None:
        # dicts (tests, tools) are validated here, as a stream's lines would be
        self._events = [ev for ev in map(typed, events) if ev is not None]
        self.live = live
        self.name = name

    def batches(self) -> Iterator[Batch]:
        for i in range(0, len(self._events), BATCH_MAX):
            yield self._events[i : i + BATCH_MAX]


class NodesFeed(Feed):
    """The recordings of one distributed job's nodes (each node's supervisor
    recorded its own ranks), read as one: the first in full -- its launcher,
    samples and output are the view's own -- and every rank's events from the
    others, interleaved by time. Whether they are one job is checked before
    (ctmon/read/merge.py)."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self.name = " + ".join(os.path.basename(p) for p in paths)

    def batches(self) -> Iterator[Batch]:
        streams = [_events(self.paths[0], ranked_only=False)]
        streams += [_events(p, ranked_only=True) for p in self.paths[1:]]
        batch: Batch = []
        for ev in heapq.merge(*streams, key=_time):
            batch.append(ev)
            if len(batch) >= BATCH_MAX:
                yield batch
                batch = []
        if batch:
            yield batch


def _time(ev: Event | Unknown) -> float:
    t = getattr(ev, "t", 0.0)
    return t if isinstance(t, (int, float)) else 0.0


def _events(path: str, ranked_only: bool) -> Iterator[Event | Unknown]:
    for ev in read_recording(path):
        if not ranked_only or getattr(ev, "rank", None) is not None:
            yield ev


class RecordingFeed(Feed):
    """Reads a recording; with ``follow=True`` keeps reading as it grows."""

    def __init__(self, path: str, follow: bool = False, poll_s: float = 0.2) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.follow = follow
        self.live = follow
        self.poll_s = poll_s
        self.stats = ReadStats()
        self._last_t: float | None = None  # the last event's t, for the note on unreadable lines
        self._closed = threading.Event()
        self._f = open_recording(path)  # raises RecordingError with a clear message

    def fixes(self, fix: Fix) -> bool:
        self.fix = fix
        return True

    def batches(self) -> Iterator[Batch]:
        dec = StreamDecoder(self.stats, self.fix)
        f = self._f
        try:
            while not self._closed.is_set():
                chunk = f.read(1 << 16)
                if not chunk:
                    if not self.follow:
                        break
                    time.sleep(self.poll_s)
                    continue
                batch = dec.feed(chunk)
                if self.follow and any(type(ev) is Exit for ev in batch):
                    self.follow = False
                if batch:
                    self._last_t = batch[-1].t
                    yield FileBatch(batch, dec.offset)
            last = dec.finish()
            if last:  # a last line without its newline: it is in the file too
                self._last_t = last[-1].t
                yield FileBatch(last, dec.fed)
            note = unreadable_note(self.stats, self._last_t)
            if note is not None:  # it may quote the file
                yield [note if self.fix is None else self.fix.apply(note)]
        finally:
            f.close()

    def close(self) -> None:
        self._closed.set()
        try:
            self._f.close()  # also when batches() was never read
        except OSError:
            pass


class FeedError(Exception):
    pass


class AuthError(FeedError):
    """The supervisor refused the token (it says so in an ``error`` line)."""


class SocketFeed(Feed):
    """A live session, through its supervisor's viewer socket (or TCP, with a token)."""

    live = True

    def __init__(self, path: str, timeout: float = 5.0) -> None:
        self.path = path
        self.name = os.path.basename(os.path.dirname(path))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(path)
        except OSError as e:
            s.close()
            raise FeedError(f"cannot connect to {path}: {e.strerror or e}") from None
        s.settimeout(None)
        self._setup(s)
        self._local = True  # the recording the stream comes from is on this machine

    @classmethod
    def tcp(cls, host: str, port: int, token: str, timeout: float = 5.0) -> SocketFeed:
        """A session served with --listen, e.g. through an SSH port forward.

        Waits for the first line, so a refused token is told as such
        (AuthError) rather than shown as an empty, disconnected session."""
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            s = socket.create_connection((host, port), timeout=timeout)
            s.sendall(protocol.encode({"kind": "hello", "t": time.time(), "token": token}))
        except OSError as e:
            raise FeedError(f"cannot connect to {where}: {e.strerror or e}") from None
        first = b""
        try:
            while b"\n" not in first and len(first) < protocol.MAX_LINE_BYTES:
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                first += chunk
        except OSError as e:
            s.close()
            raise FeedError(f"no answer from {where}: {e.strerror or e or 'timed out'}") from None
        ev = Decoder().decode(first.split(b"\n", 1)[0]) if b"\n" in first else None
        if ev is None or isinstance(ev, Refusal):
            s.close()
            message = ev.message if ev is not None else None
            if message == "authentication failed":
                raise AuthError("authentication failed (check the session token)")
            if message:
                raise FeedError(f"{where} refused the connection: {message[:200]}")
            raise FeedError(f"{where} closed the connection without sending the session")
        s.settimeout(None)
        feed = cls.__new__(cls)
        feed.path = where
        feed.name = feed.path
        feed._setup(s, first)
        return feed

    def _setup(self, s: socket.socket, first: bytes = b"") -> None:
        self._sock = s
        self._first = first  # bytes read while authenticating: the start of the stream
        self._lock = threading.Lock()
        self.disconnected = False
        self.oversized = 0
        self.error: str | None = None
        self._local = False  # a Unix socket's feed is (__init__); a TCP peer's files are on its own host
        self._closed = threading.Event()  # close() was called: the end of the stream is ours
        self._head: bytes | None = b""  # the stream's first line, to know its recording again (None: not kept)
        self._recording: str | None = None  # the recording, as its session event names it
        self._ended = False  # the job's exit has come

    def fixes(self, fix: Fix) -> bool:
        self.fix = fix
        return True

    def batches(self) -> Iterator[Batch]:
        dec = StreamDecoder(fix=self.fix)
        sock = self._sock
        data, self._first = self._first, b""
        try:
            while True:
                if not data:
                    try:
                        data = sock.recv(1 << 16)
                    except OSError:
                        data = b""
                    if not data:
                        break
                if self._head is not None and not self._recording:  # until the first event is in
                    self._head = (self._head + data)[: protocol.MAX_LINE_BYTES]
                batch = dec.feed(data)
                data = b""
                errors = [ev for ev in batch if type(ev) is Refusal]
                if errors:  # the supervisor says why it closes (e.g. too many viewers)
                    self.error = errors[0].message[:200]
                    batch = [ev for ev in batch if type(ev) is not Refusal]
                if batch:
                    self._note(batch)
                    yield batch
            yield from self._read_on(dec)
        finally:
            dec.finish()
            self.oversized = dec.stats.oversized
            self.disconnected = True

    def _note(self, batch: Batch) -> None:
        """What reading on from the recording needs: which file, and whether
        the stream is whole already."""
        if self._head is not None and not self._recording:
            first = batch[0]
            head, newline, _ = self._head.partition(b"\n")
            if type(first) is SessionStart and first.recording and newline:
                self._recording, self._head = first.recording, head + newline
            else:  # no session line first: there is no recording to know again
                self._head = None
        if not self._ended:
            self._ended = any(type(ev) is Exit for ev in batch)

    def _read_on(self, dec: StreamDecoder) -> Iterator[Batch]:
        """The supervisor closed the connection before the job's exit came:
        it has ended and gave up on this viewer (it serves late ones only a
        few seconds), or it died. The stream is the recording's bytes from
        byte 0, so a viewer on the same machine reads the rest from the file
        where the stream stopped -- if the file still starts with this
        stream's session line (a later run may have taken the name)."""
        if self._ended or self._closed.is_set() or not self._local or not self._recording or not self._head:
            return
        try:
            f = open_recording(self._recording)
        except RecordingError:
            return
        with f:
            if f.read(len(self._head)) != self._head:
                return
            f.seek(dec.fed)
            while not self._closed.is_set():
                chunk = f.read(1 << 16)
                if not chunk:
                    break
                batch = dec.feed(chunk)
                if batch:
                    yield batch

    def control(self, action: str, grace: float | None = None) -> bool:
        """Ask the supervisor to signal the job. ``stop``: SIGTERM now and
        SIGKILL after ``grace`` seconds if it still runs (0: never), done by
        the supervisor so it happens even if this viewer goes away."""
        if action not in ("interrupt", "terminate", "kill", "stop"):
            return False
        ev: dict[str, Any] = {"kind": "control", "t": time.time(), "action": action}
        if action == "stop" and grace is not None:
            ev["grace"] = grace
        return self._send(ev)

    def send_stdin(self, data: str) -> bool:
        return self._send({"kind": "control", "t": time.time(), "action": "stdin", "data": data})

    def _send(self, ev: dict[str, Any]) -> bool:
        msg = protocol.encode(ev)
        try:
            with self._lock:
                self._sock.sendall(msg)
            return True
        except OSError:
            return False

    def close(self) -> None:
        self._closed.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
