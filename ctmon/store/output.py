"""The job's recent stdout/stderr, as lines, for the Output pane.

Only the last MAX_LINES lines are kept in memory (the recording has all of
it). Carriage returns (progress bars) overwrite the current line as a
terminal would; very long lines are cut for display.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from itertools import chain, repeat
from typing import NamedTuple

MAX_LINES = 5000
MAX_LINE_CHARS = 4000


class OutputLine(NamedTuple):
    stream: str
    text: str


def _lines_of(streams: Iterable[str], texts: list[str]) -> map[OutputLine]:
    # tuple.__new__ builds each line in C: the NamedTuple's own __new__ is a
    # Python function, and 100k+ lines a second arrive while catching up
    return map(tuple.__new__, repeat(OutputLine), zip(streams, texts, strict=False))


class OutputBuffer:
    def __init__(self, max_lines: int = MAX_LINES) -> None:
        self.lines: deque[OutputLine] = deque(maxlen=max_lines)
        self._partial: dict[str, str] = {}
        self.total_lines = 0
        self.total_chars = 0

    def feed_many(self, streams: list[str], chunks: list[str]) -> None:
        """Chunks in order, each of its stream: the same lines as feeding each,
        in one split when every chunk is whole lines (a logging loop's, or a
        storm of warnings on stderr between prints on stdout)."""
        data = "".join(chunks)
        if (
            "\r" not in data
            and not any(self._partial.values())
            and all(c[-1:] == "\n" for c in chunks)
            and max(map(len, chunks)) <= MAX_LINE_CHARS
        ):
            self.total_chars += len(data)
            # each chunk's stream, once per line of it: in C, no loop here
            counts = map(str.count, chunks, repeat("\n"))
            per_line = chain.from_iterable(map(repeat, streams, counts))
            lines = data[:-1].split("\n")
            self.lines.extend(_lines_of(per_line, lines))
            self.total_lines += len(lines)
            return
        for stream, chunk in zip(streams, chunks, strict=True):
            self.feed(stream, chunk)

    def feed(self, stream: str, data: str) -> None:
        self.total_chars += len(data)
        if stream == "stdout" and self._partial.get("stderr") and not self._partial.get("stdout"):
            self._continue_prompt()
        if data[-1:] == "\n" and "\r" not in data and not self._partial.get(stream) and len(data) <= MAX_LINE_CHARS:
            # the usual chunk, whole lines of a logging loop: no partial line to
            # join, no progress bar to resolve, nothing to cut
            lines = data[:-1].split("\n")
            self.lines.extend(_lines_of(repeat(stream), lines))
            self.total_lines += len(lines)
            return
        buf = self._partial.get(stream, "") + data
        parts = buf.split("\n")
        tail = parts.pop()
        if "\r" not in buf and max(map(len, parts), default=0) <= MAX_LINE_CHARS:
            # a fast writer's chunk (up to 128 KiB): thousands of plain lines,
            # of which only the last MAX_LINES stay
            keep = parts[-self.lines.maxlen :] if self.lines.maxlen else parts
            self.lines.extend(_lines_of(repeat(stream), keep))
            self.total_lines += len(parts)
        else:
            for part in parts:
                self._emit(stream, part)
        if len(tail) > MAX_LINE_CHARS * 4:
            self._emit(stream, tail)
            tail = ""
        self._partial[stream] = tail

    def _continue_prompt(self) -> None:
        """stderr's unfinished line, which stdout continues as a terminal
        shows it: ``input()`` on a terminal writes its prompt to stderr, and
        the echo of the line typed comes on stdout ("name? bob"), so the
        prompt is not left hanging below everything that follows. Only this
        way round, only when stdout has no unfinished line of its own, and
        never a progress bar's line (a carriage return: it is redrawn, not
        continued); otherwise each stream's lines are put together on their own."""
        tail = self._partial["stderr"]
        if "\r" not in tail:
            self._partial["stderr"] = ""
            self._partial["stdout"] = tail

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
