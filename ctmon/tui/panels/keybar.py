"""The key bar at the foot of the main screen."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.widget import Widget

from ctmon.tui.context import ViewContext


class KeyBar(Widget):
    DEFAULT_CSS = """
    KeyBar { height: 1; dock: bottom; background: $panel; }
    """

    def __init__(self, ctx: ViewContext, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ctx = ctx
        self._key: tuple[tuple[str, str], ...] | None = None

    def maybe_update(self) -> None:
        key = tuple(self.keys())
        if key != self._key:
            self._key = key
            self.refresh()

    def keys(self) -> Iterable[tuple[str, str]]:
        """The keys in the order they matter: what ctmon found and how to fix
        it comes right after quitting; a narrow bar keeps the first that fit."""
        ctx = self.ctx
        yield "q", "quit"
        yield "a", "findings"
        if ctx.session.ranks:
            yield "r", "ranks"
        yield "Tab", "pane"
        yield "⏎", "details"
        if ctx.job_running:
            yield "^C", "stop job"
        yield "?", "help"
        yield "/", "filter"
        yield "space", "resume" if ctx.paused else "pause"
        if ctx.replay is not None:
            yield "[ ]", "step"
            yield "p", "pause" if ctx.replay.playing else "play"
            yield "{ }", "±10%"

    def render(self) -> Text:
        w = max(1, self.size.width)
        out = Text()
        for key, label in self.keys():
            piece = Text.assemble((f" {key} ", "bold reverse"), f" {label} ")
            if out.cell_len + piece.cell_len > w:
                continue  # a shorter one further on may still fit
            out.append_text(piece)
        return out
