"""Reading event streams: recordings on disk, and live sockets, one decoder.

``StreamDecoder`` is the one way from bytes to typed events (ctmon/wire/
events.py) for everything a viewer reads: it splits the stream into lines
(bounded, see protocol.LineSplitter), decodes each line once, and counts
what it skipped. A recording cut off mid-line (the writer was killed, the
disk filled) yields every complete line before the cut. Lines that are not
events are skipped and counted, never fatal.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from ctmon.wire import protocol
from ctmon.wire.decode import Decoder, Fix
from ctmon.wire.errors import RecordingError
from ctmon.wire.event_base import Event, Unknown
from ctmon.wire.events import Note, SessionStart, kind_of

__all__ = [
    "READ_CHUNK",
    "ReadStats",
    "RecordingError",
    "StreamDecoder",
    "iter_stream",
    "open_recording",
    "read_recording",
    "unreadable_note",
]

READ_CHUNK = 1 << 16


@dataclass
class ReadStats:
    lines: int = 0
    events: int = 0
    bad_lines: int = 0
    oversized: int = 0
    truncated_tail: bool = False
    first_kind: str | None = None
    version: int | None = None
    warnings: list[str] = field(default_factory=list)


Decoded = Event | Unknown


class StreamDecoder:
    """Chunks of a byte stream in, typed events out; ``stats`` says what was skipped."""

    def __init__(self, stats: ReadStats | None = None, fix: Fix | None = None) -> None:
        self.stats = stats if stats is not None else ReadStats()
        self.fix = fix  # see Decoder.decode_all
        self._splitter = protocol.LineSplitter()
        self._decoder = Decoder()
        self._fed = 0

    def feed(self, chunk: bytes) -> list[Decoded]:
        self._fed += len(chunk)
        return self._decode(self._splitter.feed(chunk))

    @property
    def fed(self) -> int:
        """Bytes fed so far."""
        return self._fed

    @property
    def offset(self) -> int:
        """Where in the stream the next line starts: the bytes fed, less the
        line still being cut."""
        return self._fed - len(self._splitter.pending)

    def finish(self) -> list[Decoded]:
        """The end of the stream: a last line without its newline is an event
        if it decodes whole, else the stream was cut off there."""
        st = self.stats
        st.oversized = self._splitter.oversized
        tail = self._splitter.pending
        if not tail.strip():
            return []
        bad = self._decoder.bad
        last = self._decoder.decode(tail)
        if last is None:
            self._decoder.bad = bad  # cut off, not corrupt
            st.truncated_tail = True
            return []
        return self._counted([last if self.fix is None else self.fix.apply(last)], 0)

    def _decode(self, lines: list[bytes]) -> list[Decoded]:
        bad = self._decoder.bad
        events = self._decoder.decode_all(lines, self.fix)
        return self._counted(events, self._decoder.bad - bad)

    def _counted(self, events: list[Decoded], bad: int) -> list[Decoded]:
        st = self.stats
        st.bad_lines += bad
        st.events += len(events)
        st.lines += len(events) + bad
        if st.first_kind is None and events:
            first = events[0]
            st.first_kind = kind_of(first)
            if isinstance(first, SessionStart):
                st.version = first.v  # the first event carries the protocol version
        return events


def iter_stream(f: BinaryIO, stats: ReadStats | None = None) -> Iterator[Decoded]:
    dec = StreamDecoder(stats)
    while True:
        chunk = f.read(READ_CHUNK)
        if not chunk:
            break
        yield from dec.feed(chunk)
    yield from dec.finish()


def open_recording(path: str) -> BinaryIO:
    """Open a recording for reading, or raise RecordingError with a clear reason."""
    if not os.path.exists(path):
        raise RecordingError(f"no such recording: {path}")
    if os.path.isdir(path):
        raise RecordingError(f"{path} is a directory, not a recording")
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError as e:
        raise RecordingError(f"cannot read {path}: {e.strerror or e}") from None
    if not regular:  # a FIFO or device would block or never end
        raise RecordingError(f"{path} is not a regular file, not a recording")
    try:
        f = open(path, "rb")
    except PermissionError:
        raise RecordingError(f"cannot read {path}: permission denied") from None
    except OSError as e:
        raise RecordingError(f"cannot read {path}: {e.strerror or e}") from None
    head = f.read(4096)
    f.seek(0)
    if not head.strip():
        f.close()
        raise RecordingError(f"{path} is empty: nothing was recorded")
    if b"\x00" in head:
        f.close()
        raise RecordingError(f"{path} is not a ctmon recording (binary data)")
    lines = [ln for ln in head.split(b"\n") if ln.strip()]
    first = lines[0] if lines else b""
    if Decoder().decode(first) is None and (len(lines) > 1 or head.endswith(b"\n")):
        f.close()
        raise RecordingError(f"{path} is not a ctmon recording (first line is not a ctmon event)")
    return f


def read_recording(path: str, stats: ReadStats | None = None) -> Iterator[Decoded]:
    st = stats if stats is not None else ReadStats()
    f = open_recording(path)
    with f:
        yield from iter_stream(f, st)
    conclude(path, st)


def conclude(path: str, st: ReadStats) -> None:
    """After the last line: a file with no event in it is no recording, and
    what was skipped becomes warnings for the user."""
    if st.events == 0:
        raise RecordingError(f"{path} is not a ctmon recording (no events in it)")
    if st.version is not None and st.version > protocol.PROTOCOL_VERSION:
        st.warnings.append(f"recorded by a newer ctmon (protocol {st.version}); showing what this version understands")
    if st.truncated_tail:
        st.warnings.append("the recording ends mid-line (cut off); everything before the cut is shown")
    if st.bad_lines:
        st.warnings.append(f"{st.bad_lines} line(s) were not ctmon events and were skipped")
    if st.oversized:
        st.warnings.append(f"{st.oversized} line(s) longer than {protocol.MAX_LINE_BYTES} bytes were skipped")


def unreadable_note(st: ReadStats, t: float | None = None) -> Note | None:
    """A warning note for the store (so replay's log and the report's notes
    show it too) when lines of the recording could not be read, or None."""
    parts = [(st.oversized, "oversized"), (1 if st.truncated_tail else 0, "unterminated"), (st.bad_lines, "corrupt")]
    total = sum(n for n, _ in parts)
    if not total:
        return None
    detail = ", ".join(f"{n} {what}" for n, what in parts if n)
    return Note(
        t=t or 0.0,
        level="warning",
        source="ctmon",
        message=f"{total} line(s) of the recording could not be read ({detail}) and were skipped",
    )
