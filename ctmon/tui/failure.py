"""A failed job's traceback, first on the main screen.

When the job exits with an error and printed a Python traceback, the panel
shows it under the header, before anything else: the exception, the user's
own frames and the frame that raised it, as many lines as fit (library
frames between them are counted, not shown; the Output pane has every line).
A syntax error has no "Traceback" line: its file, line, caret and message
are found as Python prints them. Under a launcher (torchrun) the launcher's
own ``ChildFailedError`` comes last; the rank's traceback before it is the
one shown.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field

from rich.text import Text

from ctmon.store.output import OutputLine
from ctmon.tui import fmt
from ctmon.tui.context import put_title
from ctmon.tui.panels.base import Panel
from ctmon.words.locations import is_library_path

HEADER = "Traceback (most recent call last):"
MESSAGE_MAX = 40  # lines of the exception's message kept (PyTorch's run to a dozen or two)
_RANK_PREFIX = re.compile(r"^\[(?:default)?(?:rank)?\d+\]:\s?")  # torchrun: "[rank1]: Traceback ..."
_FILE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<fn>.*))?\s*$')
_SYNTAX = re.compile(r"^(SyntaxError|IndentationError|TabError)\b")


@dataclass
class Frame:
    file: str
    line: int
    fn: str | None
    code: list[str] = field(default_factory=list)  # the source line (and, for a syntax error, its caret)

    @property
    def library(self) -> bool:
        return is_library_path(self.file)


@dataclass
class Failure:
    """The last traceback the job printed: its frames and its exception's lines."""

    header: bool  # it began with "Traceback (most recent call last):" (a syntax error does not)
    frames: list[Frame]
    message: list[str]  # the exception's line, then the rest of its message

    @property
    def exception(self) -> str:
        return self.message[0] if self.message else ""


def _plain(text: str) -> str:
    return _RANK_PREFIX.sub("", text, count=1)


def find_failure(lines: Iterable[OutputLine]) -> Failure | None:
    """The last traceback in the job's stderr (its whole output when stderr
    has none: a terminal merges the two), as Python printed it."""
    kept = list(lines)
    for stream in ("stderr", None):
        text = [_plain(x.text) for x in kept if stream is None or x.stream == stream]
        found = _last_failure(text)
        if found is not None:
            return found
    return None


def _last_failure(text: list[str]) -> Failure | None:
    found = _failure_before(text, len(text))
    if found is None:
        return None
    failure, start = found
    if "ChildFailedError" in failure.exception:
        # the launcher's own report: the rank's traceback, printed before, says why
        earlier = _failure_before(text, start)
        if earlier is not None:
            return earlier[0]
    return failure


def _failure_before(text: list[str], end: int) -> tuple[Failure, int] | None:
    """The last traceback that starts before ``end``, and where it starts."""
    head = next((i for i in range(end - 1, -1, -1) if text[i].strip() == HEADER), None)
    syntax = next((i for i in range(end - 1, -1, -1) if _SYNTAX.match(text[i])), None)
    if syntax is not None and (head is None or syntax > _exception_at(text, head, end)):
        start = next((i for i in range(syntax - 1, max(-1, syntax - 6), -1) if _FILE.match(text[i])), None)
        if start is not None:
            return Failure(False, _frames(text[start:syntax], keep_carets=True), _message(text, syntax, end)), start
    if head is None:
        return None
    at = _exception_at(text, head, end)
    if at >= end:
        return None  # cut off before its exception
    return Failure(True, _frames(text[head + 1 : at], keep_carets=False), _message(text, at, end)), head


def _exception_at(text: list[str], head: int, end: int) -> int:
    """The exception's line: the first after the header that is not indented."""
    return next((i for i in range(head + 1, end) if text[i].strip() and not text[i][:1].isspace()), end)


def _message(text: list[str], at: int, end: int) -> list[str]:
    out = [x.rstrip() for x in text[at : min(end, at + MESSAGE_MAX)]]
    while out and not out[-1].strip():
        out.pop()
    return out


def _frames(lines: list[str], keep_carets: bool) -> list[Frame]:
    frames: list[Frame] = []
    for x in lines:
        m = _FILE.match(x)
        if m:
            frames.append(Frame(m.group("file"), int(m.group("line")), m.group("fn")))
        elif frames and x.strip():
            if keep_carets or not _pointer(x):  # carets only point into the line above; a syntax error's say where
                frames[-1].code.append(x.rstrip())
    return frames


# ----------------------------------------------------------------- drawing


def failure_lines(f: Failure, rows: int, cwd: str | None) -> list[Text]:
    """At most ``rows`` lines, in Python's order: the header, the frames that
    matter most (the user's own, innermost first, and the one that raised),
    the library frames between them counted, then the exception."""
    rows = max(1, rows)
    frames = f.frames
    n = len(frames)
    order = list(range(n - 1, -1, -1))  # innermost first
    message = _shown_message(f)
    keep: set[int] = set()
    msg_rows = 1
    header = False

    def cost(k: set[int], m: int, h: bool) -> int:
        return int(h) + sum(1 + len(_code_lines(frames[i])) for i in k) + _gaps(sorted(k), n) + m

    # the wish list, in order: each step taken while it fits
    wishes: list[tuple[str, int]] = []  # (what, which frame or how many message rows)
    user = [i for i in range(n - 1, -1, -1) if not frames[i].library]
    if user:  # where in the user's own code, then where it was raised
        wishes.append(("frame", user[0]))
    if order:
        wishes.append(("frame", order[0]))
    wishes += [("msg", 2), ("msg", 3), ("header", 0)]
    # (never more than the rows could hold: a recursion's traceback has thousands of frames)
    wishes += [("frame", i) for i in user[1:rows]]
    wishes += [("msg", m) for m in range(4, min(len(message), rows) + 1)]
    wishes += [("frame", i) for i in order if frames[i].library][:rows]  # innermost first
    for kind, arg in wishes:
        k, m, h = set(keep), msg_rows, header
        if kind == "frame":
            k.add(arg)
        elif kind == "msg":
            m = max(m, min(arg, len(message)))
        else:
            h = f.header
        if cost(k, m, h) <= rows:
            keep, msg_rows, header = k, m, h
    return _draw(f, keep, msg_rows, header, cwd)[:rows]


def _gaps(kept: list[int], n: int) -> int:
    """How many runs of frames ``kept`` (sorted) leaves out of ``n``: one "… N frames" line each."""
    if not kept:
        return 1 if n else 0
    inner = sum(1 for a, b in zip(kept, kept[1:], strict=False) if b > a + 1)
    return int(kept[0] > 0) + inner + int(kept[-1] < n - 1)


def _draw(f: Failure, keep: set[int], msg_rows: int, header: bool, cwd: str | None) -> list[Text]:
    out: list[Text] = []
    if header:
        out.append(Text(HEADER, "dim"))
    skipped = 0
    for i, fr in enumerate(f.frames):
        if i not in keep:
            skipped += 1
            continue
        if skipped:
            out.append(Text(f"  … {fmt.plural(skipped, 'frame')}", "dim italic"))
            skipped = 0
        where = fmt.where(fr.file, fr.line, cwd)
        fn = f" in {fr.fn}" if fr.fn else ""
        out.append(Text.assemble("  ", (where, "dim" if fr.library else "bold cyan"), (fn, "dim")))
        out += [Text("      " + piece, "dim" if fr.library else "") for piece in _code_lines(fr)]
    if skipped:
        out.append(Text(f"  … {fmt.plural(skipped, 'frame')}", "dim italic"))
    message = _shown_message(f)
    out.append(Text(message[0], "bold red"))
    out += [Text(extra) for extra in message[1:msg_rows]]
    return out


def _shown_message(f: Failure) -> list[str]:
    """The exception's lines without the blank ones (nor PyTorch's empty
    "Developer debug context:"): rows are few here."""
    kept = [x for x in f.message if x.strip() and x.strip() != "Developer debug context:" and not _pointer(x)]
    return kept or ["(no message)"]


def _pointer(line: str) -> bool:
    """A line of carets or tildes: it only points into the line above."""
    return not set(line.strip()) - set("^~ ")


def _code_lines(fr: Frame) -> list[str]:
    """A frame's source line; a syntax error's with its caret under it, as aligned."""
    if len(fr.code) <= 1:
        return [x.strip() for x in fr.code]
    return textwrap.dedent("\n".join(fr.code)).split("\n")


class FailurePanel(Panel):
    """The traceback of a job that failed (hidden otherwise). Its height is
    set by the screen: ``max_lines`` of traceback under its title."""

    SECTIONS = ("meta", "output")

    DEFAULT_CSS = """
    FailurePanel { display: none; }
    """

    max_lines = 8
    _failure: tuple[object, Failure | None] = (None, None)
    _lines: tuple[object, list[Text]] = (None, [])

    def failure(self) -> Failure | None:
        """The traceback shown, or None: the job has not failed, or printed none."""
        ctx = self.ctx
        s = ctx.session
        ex = s.exit
        if ex is None or not ex.known or ex.status == 0:
            return None
        key = (ctx.gen, s.output.total_lines, id(ex))
        if self._failure[0] != key:
            self._failure = (key, find_failure(s.output.lines))
        return self._failure[1]

    def shown_lines(self, rows: int) -> list[Text]:
        """The traceback's lines in ``rows`` (worked out once per traceback and height)."""
        f = self.failure()
        if f is None:
            return []
        key = (id(f), rows)
        if self._lines[0] != key:
            self._lines = (key, failure_lines(f, rows, self.ctx.cwd))
        return self._lines[1]

    def wanted_lines(self) -> int:
        return len(self.shown_lines(self.max_lines))

    def update_key(self) -> tuple[object, ...]:
        return (*super().update_key(), self.max_lines)

    def update_view(self) -> None:
        n = self.wanted_lines()
        self.display = n > 0
        self.styles.height = n + self.styles.gutter.height  # its border (and padding)
        place = getattr(self.screen, "place_failure", None)
        if place is not None:
            place(n)  # a small screen may give it the steps' and resources' place
        super().update_view()

    def set_title(self) -> None:
        ex = self.ctx.session.exit
        how = ""
        if ex is not None:
            how = f"exited with code {ex.code}" if ex.code is not None else f"killed by {ex.signal}"
        put_title(self, f"The job failed · {how} · its traceback (all of it: Output pane)")

    def render_text(self) -> Text:
        return Text("\n").join(self.shown_lines(self.content_height))
