"""What a failed job said last on stderr: its traceback, as Python printed it.

``ctmon attach`` shows the job in the TUI, whose screen goes when it closes;
``python script.py`` would have left the traceback in the terminal. These are
the lines to leave there: the last traceback on the job's stderr (chained
exceptions included, and a ``SyntaxError``, which Python prints without a
``Traceback`` header), else the last few lines of stderr (an ``argparse``
usage error, ``sys.exit("message")``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctmon.store.output import OutputBuffer

TRACEBACK_HEADER = "Traceback (most recent call last):"
GROUP_HEADER = "Exception Group Traceback (most recent call last):"
# What Python prints between the tracebacks of a chain of exceptions.
CHAIN_LINES = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
MAX_LINES = 60  # a deeper traceback keeps its header and its last lines; the output log has it all
TAIL_LINES = 10  # stderr's last lines, where it holds no traceback
LOOK_BACK = 400  # stderr lines searched for the traceback
# Python 3.13 colours a traceback on a terminal (the job's stderr under attach is one)
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def stderr_lines(output: OutputBuffer) -> list[str]:
    """The job's last stderr lines kept for the screen, the unfinished one included."""
    lines = [text for stream, text in output.lines if stream == "stderr"]
    partial = output.partial("stderr")
    if partial:
        lines.append(partial)
    return lines[-LOOK_BACK:]


def last_traceback(lines: Sequence[str]) -> list[str]:
    """The last traceback in ``lines`` (stderr's, in order) and what
    followed it; without one, the last TAIL_LINES lines. Trailing blank
    lines are left out; a traceback longer than MAX_LINES is cut in the
    middle, with a line saying how much. Lines come back as they were
    (colours included); they are matched without their colours."""
    plain = [_SGR.sub("", line) for line in lines]
    end = len(plain)
    while end and not plain[end - 1].strip():
        end -= 1
    if not end:
        return []
    start = _traceback_start(plain[:end])
    if start is not None and end - _exception_line(plain, start) > TAIL_LINES:
        start = None  # a traceback the job printed and went on from: not how it ended
    if start is None:
        return list(lines[max(0, end - TAIL_LINES) : end])
    shown = list(lines[start:end])
    if len(shown) > MAX_LINES:
        head, tail = shown[:1], shown[-(MAX_LINES - 2) :]
        left_out = len(shown) - len(head) - len(tail)
        shown = [*head, f"  [… {left_out} lines of the traceback: the output log has them all]", *tail]
    return shown


def _is_header(line: str) -> bool:
    """A top-level traceback's first line: an exception group's is drawn
    in a margin (``  + ``), the tracebacks nested in it further in."""
    return line.startswith(TRACEBACK_HEADER) or line.startswith("  + " + GROUP_HEADER)


def _traceback_start(text: list[str]) -> int | None:
    """Where the last traceback begins, the chain that led to it included."""
    headers = [i for i, line in enumerate(text) if _is_header(line)]
    bare = _bare_syntax_error(text)
    # a traceback's frames follow its header at once: a bare error's
    # ``File`` line further down is a later error than that header's
    if bare is not None and (not headers or bare > headers[-1] + 1):
        return bare
    if not headers:
        return None
    start = headers[-1]
    earlier = headers[:-1]
    while earlier and _chained(text, earlier[-1], start):
        start = earlier.pop()
    return start


def _exception_line(text: list[str], start: int) -> int:
    """Where the traceback that begins at ``start`` says its exception: the
    first line after it at the margin (an exception group's is all drawn
    inside one: then its end)."""
    last_header = max((i for i in range(start, len(text)) if _is_header(text[i])), default=start)
    for i in range(last_header + 1, len(text)):
        if text[i] and not text[i].startswith((" ", "\t")):
            return i
    return len(text) - 1


def _chained(text: list[str], before: int, start: int) -> bool:
    """The traceback at ``before`` runs into the one at ``start`` through
    Python's chaining line (and nothing else but the blank lines around it)."""
    between = [line for line in text[before:start] if line.strip()]
    return any(line in CHAIN_LINES for line in between[-1:])


def _bare_syntax_error(text: list[str]) -> int | None:
    """A SyntaxError in the script itself: ``  File "x.py", line 2``, the
    line and a caret, then the error, with no header above them."""
    end = len(text) - 1
    if text[end].startswith((" ", "\t")):
        return None
    i = end
    while i > 0 and text[i - 1].startswith((" ", "\t")):
        i -= 1
    first_file = next((j for j in range(i, end) if text[j].startswith('  File "')), None)
    return first_file
