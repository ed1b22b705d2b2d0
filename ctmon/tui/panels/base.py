"""What every summary panel shares: the ``Panel`` base and text helpers."""

from __future__ import annotations

import re

from rich.text import Text
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from ctmon.tui import fmt
from ctmon.tui.context import StoreView, ViewContext
from ctmon.tui.strips import text_strips


class Panel(StoreView, Widget):
    """Base: a widget drawn from the store, refreshed only when its sections change."""

    DEFAULT_CSS = """
    Panel { height: auto; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, ctx: ViewContext, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.ctx = ctx

    _strips: list[Strip] | None = None
    _strips_size: Size | None = None

    def update_view(self) -> None:
        self.set_title()
        self._strips = None
        self.refresh()

    def notify_style_update(self) -> None:
        self._strips = None  # a theme or class change restyles the text
        super().notify_style_update()

    def render_line(self, y: int) -> Strip:
        # drawn through ctmon.tui.strips, not Textual's content path: the
        # panels redraw on every repaint of a running job (see that module)
        size = self.size
        if self._strips is None or self._strips_size != size:
            base = self.visual_style.rich_style
            self._strips = text_strips(self.render(), size.width, size.height, base, self.app.console)
            self._strips_size = size
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(size.width, self.visual_style.rich_style)

    def set_title(self) -> None:
        pass

    def render(self) -> Text:
        text = self.render_text()
        if text.no_wrap is None:
            text.no_wrap = True
            text.overflow = "ellipsis"
        return text

    def render_text(self) -> Text:
        return Text()

    @property
    def content_width(self) -> int:
        return max(1, self.size.width)

    @property
    def content_height(self) -> int:
        return max(1, self.size.height)


_ABS_PY = re.compile(r"(?<![\w.])(/[^\s:'\"()\[\],]+\.py)\b")


def localize(text: str, cwd: str | None, narrow: bool = False) -> str:
    """Absolute source paths in free text, written as the tables write them:
    relative to the job's directory when below it, the base name when narrow."""
    if "/" not in text:
        return text
    return _ABS_PY.sub(lambda m: fmt.short_path(m.group(1), cwd, narrow and not _below(m.group(1), cwd)), text)


def _below(path: str, cwd: str | None) -> bool:
    return bool(cwd) and path.startswith(cwd.rstrip("/") + "/")  # type: ignore[union-attr]


def num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
