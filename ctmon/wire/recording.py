"""Reading event streams: recordings on disk, and live sockets, one decoder.

A recording cut off mid-line (the writer was killed, the disk filled) yields
every complete line before the cut. Lines that are not events are skipped and
counted, never fatal.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from ctmon.wire import protocol

READ_CHUNK = 1 << 16


class RecordingError(Exception):
    """A recording that cannot be read at all (one-line message for the user)."""


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


def iter_stream(f: BinaryIO, stats: ReadStats | None = None) -> Iterator[protocol.Event]:
    st = stats if stats is not None else ReadStats()
    splitter = protocol.LineSplitter()
    while True:
        chunk = f.read(READ_CHUNK)
        if not chunk:
            break
        lines = splitter.feed(chunk)
        if st.first_kind is None:  # the first event carries the version: decode it alone
            while lines and st.first_kind is None:
                yield from _decode_line(lines.pop(0), st)
        events, bad = protocol.decode_lines(lines)
        st.lines += len(events) + bad
        st.bad_lines += bad
        st.events += len(events)
        yield from events
    st.oversized = splitter.oversized
    tail = splitter.pending
    if tail.strip():
        # A last line without its newline: complete if it parses, else cut off.
        ev = protocol.decode(tail)
        if ev is not None:
            yield from _decode_line(tail, st)
        else:
            st.truncated_tail = True


def _decode_line(line: bytes, st: ReadStats) -> Iterator[protocol.Event]:
    if not line.strip():
        return
    st.lines += 1
    ev = protocol.decode(line)
    if ev is None:
        st.bad_lines += 1
        return
    st.events += 1
    if st.first_kind is None:
        st.first_kind = ev["kind"]
        if ev["kind"] == protocol.SESSION and isinstance(ev.get("v"), int):
            st.version = ev["v"]
    yield ev


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
    if protocol.decode(first) is None and (len(lines) > 1 or head.endswith(b"\n")):
        f.close()
        raise RecordingError(f"{path} is not a ctmon recording (first line is not a ctmon event)")
    return f


def read_recording(path: str, stats: ReadStats | None = None) -> Iterator[protocol.Event]:
    st = stats if stats is not None else ReadStats()
    f = open_recording(path)
    with f:
        yield from iter_stream(f, st)
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


def unreadable_note(st: ReadStats, t: float | None = None) -> protocol.Event | None:
    """A warning note for the store (so replay's log and the report's notes
    show it too) when lines of the recording could not be read, or None."""
    parts = [(st.oversized, "oversized"), (1 if st.truncated_tail else 0, "unterminated"), (st.bad_lines, "corrupt")]
    total = sum(n for n, _ in parts)
    if not total:
        return None
    detail = ", ".join(f"{n} {what}" for n, what in parts if n)
    return {
        "kind": protocol.NOTE,
        "t": t,
        "level": "warning",
        "source": "ctmon",
        "message": f"{total} line(s) of the recording could not be read ({detail}) and were skipped",
    }
