"""A recording read as it grows, folded into a store: what ``ctmon bench``
watches its runs with, and what the metrics endpoint serves from."""

from __future__ import annotations

import os

from ctmon.read.recording import READ_CHUNK, Decoded, StreamDecoder
from ctmon.store import Session


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
                end = os.fstat(f.fileno()).st_size  # what is there now: a writer never keeps this reading
                # a chunk at a time: what was appended since is never held whole
                while self.offset < end and (chunk := f.read(min(READ_CHUNK, end - self.offset))):
                    self.offset += len(chunk)
                    self._fold(self.dec.feed(chunk))
        except OSError:
            return
        if final:
            self._fold(self.dec.finish())

    def _fold(self, evs: list[Decoded]) -> None:
        self.events += len(evs)
        self.session.apply_all(evs)

    def steps(self) -> int:
        series = self.session.steps.current
        return len(series) if series is not None else 0
