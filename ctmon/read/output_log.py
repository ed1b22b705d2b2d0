"""A recording's output, byte-exact: chunks it holds, and chunks it points at.

A job that writes as fast as it can has its large chunks kept in the output
log beside the recording (``X.output.log``; an ``output`` event with ``enc``
= ``"log"`` says where: docs/PROTOCOL.md), so recording them costs a copy,
not a JSON encode of every byte. The screen needs only their last lines,
which the event holds; whoever needs every byte (an export, a test, a user
rebuilding the job's stdout) reads them here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import BinaryIO

from ctmon.read.recording import read_recording
from ctmon.wire.events import OUTPUT_LOG, Output


class OutputLogs:
    """The output logs beside one recording, opened once each, by name."""

    def __init__(self, recording: str) -> None:
        self.dir = os.path.dirname(os.path.abspath(recording))
        self._open: dict[str, BinaryIO | None] = {}

    def chunk(self, ev: Output) -> bytes | None:
        """The bytes of a chunk kept in a log (None: the log is gone or
        shorter than the event says)."""
        if not (isinstance(ev.log, str) and isinstance(ev.at, int) and isinstance(ev.size, int)):
            return None
        f = self._file(ev.log)
        if f is None:
            return None
        try:
            data = os.pread(f.fileno(), ev.size, ev.at)
        except OSError:
            return None
        return data if len(data) == ev.size else None

    def _file(self, name: str) -> BinaryIO | None:
        if name not in self._open:
            # Only a name beside the recording: a recording cannot point a
            # reader anywhere else.
            ok = name == os.path.basename(name) and name not in ("", ".", "..")
            try:
                self._open[name] = open(os.path.join(self.dir, name), "rb") if ok else None  # noqa: SIM115
            except OSError:
                self._open[name] = None
        return self._open[name]

    def close(self) -> None:
        for f in self._open.values():
            if f is not None:
                f.close()
        self._open.clear()


def chunk_bytes(ev: Output, logs: OutputLogs) -> bytes | None:
    """A chunk's bytes, wherever they are kept (None: not to be had)."""
    return logs.chunk(ev) if ev.enc == OUTPUT_LOG else ev.raw()


def output_chunks(recording: str) -> Iterator[tuple[str, bytes | None]]:
    """Each output chunk of a recording in order: its stream and its bytes
    (None for a chunk whose bytes cannot be had)."""
    logs = OutputLogs(recording)
    try:
        for ev in read_recording(recording):
            if isinstance(ev, Output):
                yield ev.stream, chunk_bytes(ev, logs)
    finally:
        logs.close()


def output_bytes(recording: str) -> dict[str, bytes]:
    """Each stream's bytes as the job wrote them (chunks that cannot be had
    are left out: see ``output_chunks``)."""
    got: dict[str, list[bytes]] = {}
    for stream, data in output_chunks(recording):
        if data is not None:
            got.setdefault(stream, []).append(data)
    return {stream: b"".join(parts) for stream, parts in got.items()}
