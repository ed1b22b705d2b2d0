"""The list panes: compiled frames, graph breaks, events, the job's output.

Tab moves between them; Enter opens details; ``/`` filters the focused one.
Rows are the store's own objects, rendered only when scrolled into view.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from rich.text import Text

from ctmon.store import LogEntry
from ctmon.store.compiles import BreakSite, CompileRecord, Frame
from ctmon.store.output import OutputLine
from ctmon.tui import fmt
from ctmon.tui.context import StoreView, ViewContext, put_title
from ctmon.tui.linelist import LineList
from ctmon.tui.panels import localize
from ctmon.tui.safe import ansi_text

_SPACES = re.compile(r"\s+")
_CID_PREFIX = re.compile(r"^\d+/\d+: ")


def one_line(text: str | None) -> str:
    return _SPACES.sub(" ", text or "").strip()


def reason_text(reason: str | None, cwd: str | None) -> str:
    """A recompile reason on one line, without the compile-id prefix Dynamo puts first."""
    if not reason:
        return ""
    return _CID_PREFIX.sub("", one_line(localize(fmt.first_line(reason), cwd)))


@dataclass
class Col:
    title: str
    min: int
    max: int
    flex: bool = False
    right: bool = False
    short: str | None = None  # the title when the column is narrower than it
    share: float = 0.0  # a flexible column gets at least this part of the width

    def heading(self, width: int) -> str:
        return self.title if len(self.title) <= width or not self.short else self.short


def layout(cols: Sequence[Col], ideal: Sequence[int], width: int) -> list[int]:
    """Column widths for ``width`` cells: fixed columns get their ideal width
    (within min..max), the flexible one the rest; when space runs out the
    fixed ones shrink toward their minimum."""
    gap = 2 if width >= 100 else 1
    widths = [max(c.min, min(c.max, i)) for c, i in zip(cols, ideal, strict=False)]
    avail = width - gap * (len(cols) - 1)
    flex = [k for k, c in enumerate(cols) if c.flex]
    fixed = [k for k in range(len(cols)) if k not in flex]
    flex_min = {k: max(cols[k].min, int(avail * cols[k].share)) for k in flex}
    need = sum(widths[k] for k in fixed) + sum(flex_min.values())
    while need > avail:
        shrinkable = [k for k in fixed if widths[k] > cols[k].min]
        if not shrinkable:
            break
        k = max(shrinkable, key=lambda j: widths[j] - cols[j].min)
        widths[k] -= 1
        need -= 1
    rest = avail - sum(widths[k] for k in fixed)
    for k in flex:
        widths[k] = max(cols[k].min, rest // max(1, len(flex)))  # may overflow: the row is cut at the edge
    return widths


def cells(
    cols: Sequence[Col],
    widths: Sequence[int],
    values: Sequence[tuple[str, str]],
    width: int,
    left_clip: Sequence[int] = (),
) -> Text:
    gap = " " * (2 if width >= 100 else 1)
    out = Text()
    for k, (c, w, (value, style)) in enumerate(zip(cols, widths, values, strict=False)):
        if k:
            out.append(gap)
        v = fmt.clip_left(value, w) if k in left_clip else fmt.clip(value, w)
        v = v.rjust(w) if c.right else v.ljust(w)
        out.append(v, style)
    return out


class Pane(StoreView, LineList):
    """A list pane bound to the store."""

    NAME = "pane"

    def __init__(
        self,
        ctx: ViewContext,
        render_row: Callable[[Any, int], Text],
        *,
        header: Callable[[int], Text] | None = None,
        follow: bool = False,
        empty: str = "",
        version: Callable[[Any], Any] | None = None,
        id: str | None = None,
    ) -> None:
        super().__init__(render_row, header=header, follow=follow, empty=empty, version=version, id=id)
        self.ctx = ctx
        self.filter_text = ""

    def set_filter(self, text: str) -> None:
        self.filter_text = text.strip()
        self.maybe_update(force=True)

    def matches(self, haystack: str) -> bool:
        return not self.filter_text or self.filter_text.lower() in haystack.lower()

    def filter_label(self) -> str:
        return f" [/{self.filter_text}]" if self.filter_text else ""


# ------------------------------------------------------------------ frames


FRAME_COLS = [
    Col("location", 16, 44),
    Col("frame", 12, 30),
    Col("compiles", 3, 8, right=True, short="n"),
    Col("budget", 5, 7, right=True),
    Col("last recompile reason", 20, 400, flex=True, short="last reason", share=0.35),
    Col("time", 6, 8, right=True),
]


def budget(frame: Frame) -> tuple[str, str]:
    limit = frame.recompile_limit
    if limit is None or limit <= 0:
        return (f"{frame.entries}/?", "")
    text = f"{frame.entries}/{limit}"
    if frame.limit_hit or frame.entries >= limit:
        return (text + "!", "bold red")
    if frame.entries >= 0.75 * limit:
        return (text, "yellow")
    return (text, "")


class FramesPane(Pane):
    NAME = "frames"
    SECTIONS = ("compile",)

    def __init__(self, ctx: ViewContext, id: str | None = None) -> None:
        super().__init__(
            ctx, self._row, header=self._header_row, empty="no frames compiled yet", version=self._row_version, id=id
        )
        self._ideal = [len(c.title) for c in FRAME_COLS]
        self._widths: tuple[int, list[int]] = (-1, [])

    def _narrow(self, width: int) -> bool:
        return width < 100

    def _row_version(self, f: Frame) -> Any:
        return (len(f.compiles), f.entries, f.limit_hit, f.recompile_limit, self._widths[0], tuple(self._widths[1]))

    def _cells(self, f: Frame, narrow: bool) -> list[tuple[str, str]]:
        cwd = self.ctx.cwd
        reason = reason_text(f.last_reason, cwd)
        if f.limit_hit and not reason:
            reason = "recompile limit hit"
        return [
            (fmt.where(f.loc.file, f.loc.line, cwd, narrow), ""),
            (f.title, "bold"),
            (str(len(f.compiles)), "yellow" if f.recompiles else ""),
            budget(f),
            (reason, "yellow" if reason else "dim"),
            (fmt.secs(f.time_s), ""),
        ]

    def _layout(self, width: int) -> list[int]:
        if self._widths[0] != width:
            self._widths = (width, layout(FRAME_COLS, self._ideal, width))
        return self._widths[1]

    def _header_row(self, width: int) -> Text:
        widths = self._layout(width)
        return cells(FRAME_COLS, widths, [(c.heading(w), "") for c, w in zip(FRAME_COLS, widths, strict=False)], width)

    def _row(self, f: Frame, width: int) -> Text:
        widths = self._layout(width)
        return cells(FRAME_COLS, widths, self._cells(f, self._narrow(width)), width, left_clip=(0,))

    def update_view(self) -> None:
        frames = self.ctx.session.compile.frames_sorted()
        total = len(frames)
        if self.filter_text:
            frames = [f for f in frames if self.matches(" ".join(v for v, _ in self._cells(f, False)))]
        width = self.scrollable_content_region.width or 120
        ideal = [len(c.title) for c in FRAME_COLS]
        narrow, cwd = self._narrow(width), self.ctx.cwd
        for f in islice(frames, 200):  # the columns that size to their content
            ideal[0] = max(ideal[0], len(fmt.where(f.loc.file, f.loc.line, cwd, narrow)))
            ideal[1] = max(ideal[1], len(f.title))
        self._ideal = ideal
        self._widths = (-1, [])
        shown = f"{len(frames)}/{total}" if self.filter_text else f"{total}"
        put_title(self, f"Frames · {shown}{self.filter_label()}")
        self.set_items(frames, key=lambda f: f.frame_id)


# ------------------------------------------------------------ graph breaks


BREAK_COLS = [
    Col("graph break reason", 20, 400, flex=True, short="reason"),
    Col("location", 18, 48),
    Col("count", 5, 7, right=True),
]


class BreaksPane(Pane):
    NAME = "breaks"
    SECTIONS = ("compile",)

    def __init__(self, ctx: ViewContext, id: str | None = None) -> None:
        super().__init__(
            ctx,
            self._row,
            header=self._header_row,
            empty="no graph breaks",
            version=lambda b: (b.count, b.reason, tuple(self._ideal)),
            id=id,
        )
        self._ideal = [len(c.title) for c in BREAK_COLS]
        self._widths: tuple[Any, list[int]] = (None, [])

    def _cells(self, b: BreakSite, narrow: bool) -> list[tuple[str, str]]:
        return [
            (one_line(b.reason), "magenta"),
            (fmt.where(b.file, b.line, self.ctx.cwd, narrow), ""),
            (f"{b.count:,}", "bold"),
        ]

    def _layout(self, width: int) -> list[int]:
        key = (width, tuple(self._ideal))
        if self._widths[0] != key:
            self._widths = (key, layout(BREAK_COLS, self._ideal, width))
        return self._widths[1]

    def _header_row(self, width: int) -> Text:
        widths = self._layout(width)
        return cells(BREAK_COLS, widths, [(c.heading(w), "") for c, w in zip(BREAK_COLS, widths, strict=False)], width)

    def _row(self, b: BreakSite, width: int) -> Text:
        widths = self._layout(width)
        return cells(BREAK_COLS, widths, self._cells(b, width < 100), width, left_clip=(1,))

    def update_view(self) -> None:
        c = self.ctx.session.compile
        sites = c.breaks_sorted()
        total = len(sites)
        if self.filter_text:
            sites = [
                b for b in sites if self.matches(" ".join(v for v, _ in self._cells(b, False)) + " " + (b.detail or ""))
            ]
        width = self.scrollable_content_region.width or 120
        ideal = [len(col.title) for col in BREAK_COLS]
        for b in islice(sites, 200):
            ideal[1] = max(ideal[1], len(fmt.where(b.file, b.line, self.ctx.cwd, width < 100)))
        self._ideal = ideal
        shown = f"{len(sites)}/{total}" if self.filter_text else f"{total}"
        put_title(
            self,
            f"Graph breaks · {shown} {'site' if total == 1 else 'sites'}, "
            f"{fmt.plural(c.graph_break_count, 'break')}{self.filter_label()}",
        )
        self.set_items(sites, key=lambda b: (b.file, b.line))


# ------------------------------------------------------------------ events


KIND_LABEL = {
    "compile": ("compile", "cyan"),
    "recompile": ("RECOMPILE", "bold yellow"),
    "graph_break": ("BREAK", "magenta"),
    "cache": ("cache", "blue"),
    "limit": ("LIMIT", "bold red"),
    "error": ("FAILED", "bold red"),
    "note": ("note", "dim"),
    "exit": ("exit", "bold"),
    "autotune": ("autotune", "blue"),
    "cudagraph": ("cudagraph", "yellow"),
}
SEVERITY_WORD = {"info": ("", ""), "warning": ("warn", "yellow"), "critical": ("CRIT", "bold red")}

#: What ``f`` cycles through in the events pane.
KIND_PRESETS: list[tuple[str, frozenset[str] | None]] = [
    ("all", None),
    ("compiles", frozenset({"compile", "recompile", "limit", "error"})),
    ("recompiles", frozenset({"recompile", "limit"})),
    ("graph breaks", frozenset({"graph_break"})),
    ("cache", frozenset({"cache", "autotune"})),
    ("alerts", frozenset({"limit", "error", "exit", "note", "cudagraph"})),
]
ALL_KINDS = list(KIND_LABEL)
LOG_VIEW_MAX = 5000


class EventsPane(Pane):
    NAME = "events"
    SECTIONS = ("log",)

    def __init__(self, ctx: ViewContext, id: str | None = None) -> None:
        super().__init__(ctx, self._row, follow=True, empty="no events yet", id=id)
        self.kinds: frozenset[str] | None = None
        self.preset = 0
        self._seen = (-1, -1)  # (gen, log revision) the list reflects
        self._index_of: Any = None
        self._index: dict[str, CompileRecord] = {}
        self._indexed = 0

    def set_kinds(self, kinds: frozenset[str] | None) -> None:
        self.kinds = kinds if kinds else None
        self.preset = next((i for i, (_, k) in enumerate(KIND_PRESETS) if k == self.kinds), -1)
        self._seen = (-1, -1)
        self.maybe_update(force=True)

    def cycle_kinds(self) -> str:
        self.preset = (self.preset + 1) % len(KIND_PRESETS)
        name, kinds = KIND_PRESETS[self.preset]
        self.kinds = kinds
        self._seen = (-1, -1)
        self.maybe_update(force=True)
        return name

    def set_filter(self, text: str) -> None:
        self._seen = (-1, -1)
        super().set_filter(text)

    def kinds_label(self) -> str:
        if self.kinds is None:
            return ""
        if 0 <= self.preset < len(KIND_PRESETS):
            return f" [{KIND_PRESETS[self.preset][0]}]"
        return " [" + ",".join(sorted(KIND_LABEL.get(k, (k,))[0].lower() for k in self.kinds)) + "]"

    def accept(self, e: LogEntry) -> bool:
        if self.kinds is not None and e.kind not in self.kinds:
            return False
        if not self.filter_text:
            return True
        return self.matches(f"{e.kind} {e.text} {self._text(e, False)}")

    def _compile(self, compile_id: Any) -> tuple[Frame, CompileRecord] | None:
        """The compile a log entry refers to (index built as compiles arrive)."""
        c = self.ctx.session.compile
        if self._index_of is not c or self._indexed > len(c.compiles):
            self._index_of, self._index, self._indexed = c, {}, 0
        if self._indexed < len(c.compiles):
            for rec in c.compiles[self._indexed :]:
                self._index[rec.compile_id] = rec
            self._indexed = len(c.compiles)
        found = self._index.get(str(compile_id))
        frame = c.frames.get(found.frame_id) if found is not None else None
        return (frame, found) if frame is not None and found is not None else None

    def _text(self, e: LogEntry, narrow: bool) -> str:
        """Recompiles lead with their reason: it is what the reader is after."""
        if e.kind == "recompile" and e.ref is not None:
            found = self._compile(e.ref)
            if found is not None:
                frame, rec = found
                where = fmt.where(frame.loc.file, frame.loc.line, self.ctx.cwd, narrow)
                reason = reason_text(rec.recompile_reason, self.ctx.cwd)
                return f"{rec.compile_id} {frame.title}: {reason} · {where} · {fmt.secs(rec.time_s)}"
        if e.kind == "graph_break" and isinstance(e.ref, tuple):
            site = self.ctx.session.compile.breaks.get(e.ref)
            if site is not None and len(site.reasons) == 1:  # else the entry's own words
                return f"{fmt.where(site.file, site.line, self.ctx.cwd, narrow)} {one_line(site.reason)}"
        return one_line(localize(e.text, self.ctx.cwd, narrow=narrow))

    def _row(self, e: LogEntry, width: int) -> Text:
        start = self.ctx.start_time()
        when = fmt.offset(e.t - start) if start and e.t else ""
        label, style = KIND_LABEL.get(e.kind, (e.kind, ""))
        sev, sev_style = SEVERITY_WORD.get(e.severity, ("", ""))
        text = self._text(e, narrow=width < 120)
        row = Text.assemble((f"{when:>8} ", "dim"), (f"{label:<9} ", style))
        if width >= 70:
            row.append(f"{sev:<4} ", sev_style)
        elif sev:
            row.append("! ", sev_style)
        row.append(text, "red" if e.severity == "critical" else "")
        return row

    def update_view(self) -> None:
        s = self.ctx.session
        rev = s.rev["log"]
        gen = self.ctx.gen
        seen_gen, seen_rev = self._seen
        new = rev - seen_rev
        if gen != seen_gen or new < 0 or new > len(s.log) or seen_rev < 0:
            self.set_items([e for e in s.log if self.accept(e)])
        elif new:
            fresh = list(islice(s.log, len(s.log) - new, len(s.log)))
            self.extend([e for e in fresh if self.accept(e)], limit=LOG_VIEW_MAX)
        self._seen = (gen, rev)
        put_title(self, f"Events · {len(self.items):,}{self.kinds_label()}{self.filter_label()}")


# ------------------------------------------------------------------ output


OUTPUT_VIEW_MAX = 5000


class OutputPane(Pane):
    NAME = "output"
    SECTIONS = ("output",)

    def __init__(self, ctx: ViewContext, id: str | None = None) -> None:
        super().__init__(ctx, self._row, follow=True, empty="no output yet", id=id)
        self._seen = (-1, -1)
        self._partials = 0

    def set_filter(self, text: str) -> None:
        self._seen = (-1, -1)
        super().set_filter(text)

    def _row(self, line: OutputLine, width: int) -> Text:
        return ansi_text(line.text)

    def update_view(self) -> None:
        out = self.ctx.session.output
        gen = self.ctx.gen
        seen_gen, seen_total = self._seen
        new = out.total_lines - seen_total
        if self._partials:
            del self.items[-self._partials :]
            self._partials = 0
        if gen != seen_gen or seen_total < 0 or new < 0 or new > len(out.lines):
            rows = [ln for ln in out.lines if self.matches(ln.text)]
            rows += self._partial_rows()
            self.set_items(rows)
        else:
            fresh = list(islice(out.lines, len(out.lines) - new, len(out.lines))) if new else []
            rows = [ln for ln in fresh if self.matches(ln.text)] + self._partial_rows()
            if rows:
                self.extend(rows, limit=OUTPUT_VIEW_MAX)
            else:
                self._update_size()
                self.refresh()
        self._seen = (gen, out.total_lines)
        put_title(self, f"Output{self.filter_label()}")

    def _partial_rows(self) -> list[OutputLine]:
        rows = []
        out = self.ctx.session.output
        for stream in ("stdout", "stderr"):
            tail = out.partial(stream)
            if tail:
                pieces = [p for p in tail.split("\r") if p]
                if pieces and self.matches(pieces[-1]):
                    rows.append(OutputLine(stream, pieces[-1]))
        self._partials = len(rows)
        return rows
