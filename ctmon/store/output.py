"""The job's recent stdout/stderr, as lines, for the Output pane.

Only the last MAX_LINES lines are kept in memory (the recording has all of
it). Carriage returns (progress bars) overwrite the current line as a
terminal would; very long lines are cut for display.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

MAX_LINES = 5000
MAX_LINE_CHARS = 4000


@dataclass
class OutputLine:
    stream: str
    text: str


class OutputBuffer:
    def __init__(self, max_lines: int = MAX_LINES) -> None:
        self.lines: deque[OutputLine] = deque(maxlen=max_lines)
        self._partial: dict[str, str] = {}
        self.total_lines = 0
        self.total_chars = 0

    def feed(self, stream: str, data: str) -> None:
        self.total_chars += len(data)
        if data[-1:] == "\n" and "\r" not in data and not self._partial.get(stream) and len(data) <= MAX_LINE_CHARS:
            # the usual chunk, whole lines of a logging loop: no partial line to
            # join, no progress bar to resolve, nothing to cut
            lines = data[:-1].split("\n")
            self.lines.extend(OutputLine(stream, text) for text in lines)
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
