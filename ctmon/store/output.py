"""The job's recent stdout/stderr, as lines, for the Output pane.

Only the last MAX_LINES lines are kept in memory (the recording has all of
it). Carriage returns (progress bars) overwrite the current line as a
terminal would; very long lines are cut for display.
"""

from __future__ import annotations

from collections import deque
from itertools import repeat
from typing import NamedTuple

MAX_LINES = 5000
MAX_LINE_CHARS = 4000


class OutputLine(NamedTuple):
    stream: str
    text: str


def _lines_of(stream: str, texts: list[str]) -> map[OutputLine]:
    # tuple.__new__ builds each line in C: the NamedTuple's own __new__ is a
    # Python function, and 100k+ lines a second arrive while catching up
    return map(tuple.__new__, repeat(OutputLine), zip(repeat(stream), texts))


class OutputBuffer:
    def __init__(self, max_lines: int = MAX_LINES) -> None:
        self.lines: deque[OutputLine] = deque(maxlen=max_lines)
        self._partial: dict[str, str] = {}
        self.total_lines = 0
        self.total_chars = 0

    def feed_run(self, stream: str, chunks: list[str]) -> None:
        """Several chunks of one stream, in order: the same lines as feeding
        each, in one split when they are whole lines (a logging loop's)."""
        data = "".join(chunks)
        whole = not self._partial.get(stream) and "\r" not in data
        if whole and all(c[-1:] == "\n" and len(c) <= MAX_LINE_CHARS for c in chunks):
            self.total_chars += len(data)
            lines = data[:-1].split("\n")
            self.lines.extend(_lines_of(stream, lines))
            self.total_lines += len(lines)
            return
        for chunk in chunks:
            self.feed(stream, chunk)

    def feed(self, stream: str, data: str) -> None:
        self.total_chars += len(data)
        if data[-1:] == "\n" and "\r" not in data and not self._partial.get(stream) and len(data) <= MAX_LINE_CHARS:
            # the usual chunk, whole lines of a logging loop: no partial line to
            # join, no progress bar to resolve, nothing to cut
            lines = data[:-1].split("\n")
            self.lines.extend(_lines_of(stream, lines))
            self.total_lines += len(lines)
            return
        buf = self._partial.get(stream, "") + data
        parts = buf.split("\n")
        for part in parts[:-1]:
            self._emit(stream, part)
        tail = parts[-1]
        if len(tail) > MAX_LINE_CHARS * 4:
            self._emit(stream, tail)
            tail = ""
        self._partial[stream] = tail

    def _emit(self, stream: str, text: str) -> None:
        if "\r" in text:
            # a progress bar: keep what a terminal would finally show
            pieces = [p for p in text.split("\r") if p]
            text = pieces[-1] if pieces else ""
        if len(text) > MAX_LINE_CHARS:
            text = text[:MAX_LINE_CHARS] + f"… (+{len(text) - MAX_LINE_CHARS} chars)"
        self.lines.append(OutputLine(stream, text))
        self.total_lines += 1

    def flush_partial(self) -> None:
        for stream, tail in list(self._partial.items()):
            if tail:
                self._emit(stream, tail)
        self._partial.clear()

    def partial(self, stream: str) -> str:
        return self._partial.get(stream, "")
