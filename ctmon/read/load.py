"""A recording, folded into the store: what report, the CI gate and the
end-of-run summary of ``record`` read."""

from __future__ import annotations

import gc
import os

from ctmon.read.recording import READ_CHUNK, ReadStats, StreamDecoder, conclude, open_recording, unreadable_note
from ctmon.store import Session
from ctmon.wire.errors import RecordingError


def load(path: str, unwritten: bytes = b"") -> tuple[Session, ReadStats]:
    """The session a recording holds, and what reading it skipped (a
    ``RecordingError`` when it cannot be read at all).

    ``unwritten``: what the supervisor still held in memory when the job
    ended (the disk was full): the stream goes on with it where the file
    stops, so the summary covers everything that was recorded."""
    stats = ReadStats()
    session = Session()
    dec = StreamDecoder(stats)
    # Folding makes no reference cycles: the cyclic collector would only
    # rescan a million short-lived events (~6 % of reading a day-long run).
    collecting = gc.isenabled()
    gc.disable()
    try:
        _read(path, session, dec, unwritten)
    finally:
        if collecting:
            gc.enable()
    if not stats.events and unwritten:
        raise RecordingError(f"{path}: nothing was recorded")
    conclude(path, stats)
    note = unreadable_note(stats, session.last_t)
    if note is not None:
        session.apply(note)
    if session.exit is None and not unwritten:
        session.cut_off = not written_live(path)
    return session, stats


def written_live(path: str) -> bool:
    """A running ctmon still writes the recording (it holds its lock): a
    recording without an exit is then of a job still running; else it was
    cut short (ctmon stopped or killed, the file copied mid-run)."""
    from ctmon.read.liveness import path_locked

    return path_locked(os.path.realpath(path))


def _read(path: str, session: Session, dec: StreamDecoder, unwritten: bytes) -> None:
    try:
        with open_recording(path) as f:
            while chunk := f.read(READ_CHUNK):
                session.apply_all(dec.feed(chunk))  # a chunk's events at a time: no per-event generator
    except RecordingError:
        if not unwritten:
            raise
        # nothing readable reached the disk: the memory holds it all
    session.apply_all(dec.feed(unwritten))
    session.apply_all(dec.finish())
