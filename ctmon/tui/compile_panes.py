"""The list panes of the compile side: compiled frames and graph breaks, and
what every list pane shares (the events and output panes: stream_panes.py).

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

from ctmon.store.compiles import BreakSite, Frame
from ctmon.tui import fmt
from ctmon.tui.context import StoreView, ViewContext, put_title, rank_label
from ctmon.tui.linelist import LineList
from ctmon.tui.panels import localize

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
    Col("last recompile reason", 10, 400, flex=True, short="last reason", share=0.35),
    Col("time", 6, 8, right=True),
    Col("calls", 5, 5, right=True),
    Col("step %", 4, 6, right=True, short="%"),
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


def step_share(runtime: dict[str, Any] | None) -> tuple[str, str]:
    """A frame's share of step time (its graphs and its eager glue); yellow
    when the glue alone takes a tenth or more."""
    if runtime is None or runtime["share"] is None:
        return ("—", "dim")
    share = runtime["share"] + runtime["glue_share"]
    return (f"{share:.0%}", "yellow" if runtime["glue_share"] >= 0.1 else "")


def graph_calls(runtime: dict[str, Any] | None) -> tuple[str, str]:
    """How many times the frame's compiled graphs ran."""
    calls = None if runtime is None else runtime.get("calls")
    return ("—", "dim") if calls is None else (fmt.short_count(calls), "")


class FramesPane(Pane):
    SCOPED = True
    NAME = "frames"
    SECTIONS = ("compile", "hotness")

    def __init__(self, ctx: ViewContext, id: str | None = None) -> None:
        super().__init__(
            ctx, self._row, header=self._header_row, empty="no frames compiled yet", version=self._row_version, id=id
        )
        self._ideal = [len(c.title) for c in FRAME_COLS]
        self._widths: tuple[int, list[int]] = (-1, [])

    def _narrow(self, width: int) -> bool:
        return width < 100

    def _row_version(self, f: Frame) -> Any:
        hot = self.ctx.view.rev["hotness"]  # calls and shares come after the compiles
        return (
            len(f.compiles),
            f.entries,
            f.limit_hit,
            f.recompile_limit,
            hot,
            self._widths[0],
            tuple(self._widths[1]),
        )

    def _cells(self, f: Frame, narrow: bool) -> list[tuple[str, str]]:
        cwd = self.ctx.cwd
        reason = reason_text(f.last_reason, cwd)
        if f.limit_hit and not reason:
            reason = "recompile limit hit"
        runtime = self.ctx.view.hotness.frame_runtime(f)
        return [
            (fmt.place(f.loc.file, f.loc.line, f.called_from, cwd, narrow), ""),
            (f.title, "bold"),
            (str(len(f.compiles)), "yellow" if f.recompiles else ""),
            budget(f),
            (reason, "yellow" if reason else "dim"),
            (fmt.seconds(f.time_s), ""),
            graph_calls(runtime),
            step_share(runtime),
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
        frames = self.ctx.view.compile.frames_sorted()
        total = len(frames)
        if self.filter_text:
            frames = [f for f in frames if self.matches(" ".join(v for v, _ in self._cells(f, False)))]
        width = self.scrollable_content_region.width or 120
        ideal = [len(c.title) for c in FRAME_COLS]
        narrow, cwd = self._narrow(width), self.ctx.cwd
        for f in islice(frames, 200):  # the columns that size to their content
            ideal[0] = max(ideal[0], len(fmt.place(f.loc.file, f.loc.line, f.called_from, cwd, narrow)))
            ideal[1] = max(ideal[1], len(f.title))
        self._ideal = ideal
        self._widths = (-1, [])
        shown = f"{len(frames)}/{total}" if self.filter_text else f"{total}"
        put_title(self, f"Frames · {shown}{rank_label(self.ctx)}{self.filter_label()}")
        self.set_items(frames, key=lambda f: f.frame_id)


# ------------------------------------------------------------ graph breaks


BREAK_COLS = [
    Col("graph break reason", 20, 400, flex=True, short="reason"),
    Col("location", 18, 48),
    Col("count", 5, 7, right=True),
]


class BreaksPane(Pane):
    SCOPED = True
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
            (fmt.place(b.file, b.line, b.called_from, self.ctx.cwd, narrow), ""),
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
        c = self.ctx.view.compile
        sites = c.breaks_sorted()
        total = len(sites)
        if self.filter_text:
            sites = [
                b for b in sites if self.matches(" ".join(v for v, _ in self._cells(b, False)) + " " + (b.detail or ""))
            ]
        width = self.scrollable_content_region.width or 120
        ideal = [len(col.title) for col in BREAK_COLS]
        for b in islice(sites, 200):
            ideal[1] = max(ideal[1], len(fmt.place(b.file, b.line, b.called_from, self.ctx.cwd, width < 100)))
        self._ideal = ideal
        shown = f"{len(sites)}/{total}" if self.filter_text else f"{total}"
        put_title(
            self,
            f"Graph breaks · {shown} {'site' if total == 1 else 'sites'}, "
            f"{fmt.plural(c.graph_break_count, 'break')}{rank_label(self.ctx)}{self.filter_label()}",
        )
        self.set_items(sites, key=lambda b: (b.file, b.line))


# ------------------------------------------------------------------ events
