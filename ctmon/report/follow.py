"""A recording read as it grows, folded into a store: what ``ctmon bench``
watches its runs with, and what the metrics endpoint serves from."""

from __future__ import annotations

from ctmon.store import Session
from ctmon.wire.recording import StreamDecoder


class Follower:
    def __init__(self, path: str) -> None:
        self.path = path
        self.session = Session()
        self.dec = StreamDecoder()
        self.offset = 0
        self.events = 0

    def read(self, final: bool = False) -> None:
        """Fold what was appended since the last read (``final``: the stream
        has ended, so a last line without its newline counts too)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return
        self.offset += len(chunk)
        evs = self.dec.feed(chunk)
        if final:
            evs += self.dec.finish()
        self.events += len(evs)
        self.session.apply_all(evs)

    def steps(self) -> int:
        series = self.session.steps.current
        return len(series) if series is not None else 0
