"""A scrolling list that renders only the rows on screen.

Used for every list pane (frames, graph breaks, events, output): thousands
of rows cost nothing until they are scrolled into view, appending is O(new
rows), and a row's text is built by a callback from the store's own objects.
A fixed header line (for tables) and a cursor (for Enter) are optional.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ctmon.tui.safe import safe_text

RenderRow = Callable[[Any, int], Text]


class LineList(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    LineList {
        scrollbar-size-vertical: 1;
        scrollbar-size-horizontal: 0;
        overflow-x: hidden;
        overflow-y: scroll;
    }
    LineList > .line-list--cursor {
        background: $accent 25%;
    }
    LineList:focus > .line-list--cursor {
        background: $accent 55%;
        text-style: bold;
    }
    LineList > .line-list--header {
        text-style: bold;
        color: $text-muted;
    }
    LineList > .line-list--empty {
        color: $text-muted;
        text-style: italic;
    }
    """

    COMPONENT_CLASSES = {"line-list--cursor", "line-list--header", "line-list--empty"}

    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "jump(0)", "First", show=False),
        Binding("end,G", "jump(-1)", "Last", show=False),
        Binding("enter", "select", "Details", show=False),
    ]

    class Selected(Message):
        """Enter (or a double click) on a row."""

        def __init__(self, line_list: LineList, item: Any) -> None:
            super().__init__()
            self.line_list = line_list
            self.item = item

        @property
        def control(self) -> LineList:
            return self.line_list

    def __init__(
        self,
        render_row: RenderRow,
        *,
        header: Callable[[int], Text] | None = None,
        follow: bool = False,
        cursor: bool = True,
        empty: str = "",
        version: Callable[[Any], Any] | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self._render_row = render_row
        self._version = version  # what a row's text depends on, for rows that change
        self._header = header
        self.follow = follow  # stick to the last row as rows are added
        self.show_cursor = cursor
        self.empty_text = empty
        self.items: list[Any] = []
        self.cursor = -1
        self._stuck = follow  # following the newest rows
        # rendered rows by (item id, version, cursor): kept across updates, so
        # appending or scrolling renders only the rows not seen before
        self._cache: dict[tuple[int, Any, bool], tuple[Any, Strip]] = {}
        self._cache_width = -1
        self._styles: tuple[bool, tuple[Style, Style, Style, Style]] | None = None

    # ---- data ----

    @property
    def header_height(self) -> int:
        return 1 if self._header is not None else 0

    def set_items(self, items: Sequence[Any], key: Callable[[Any], Any] | None = None) -> None:
        """Replace all rows; the cursor stays on the same item when ``key`` finds it."""
        old_item = self.items[self.cursor] if 0 <= self.cursor < len(self.items) else None
        at_end = self.cursor == len(self.items) - 1
        self.items = list(items)
        if self.follow and self._at_bottom():
            self._stuck = True
        if not self.items:
            self.cursor = -1
        elif self.cursor >= 0:
            new = -1
            if old_item is not None and key is not None:
                wanted = key(old_item)
                for i, it in enumerate(self.items):
                    if key(it) == wanted:
                        new = i
                        break
            if new < 0:
                new = len(self.items) - 1 if (self.follow and at_end) else min(self.cursor, len(self.items) - 1)
            self.cursor = new
        elif self.show_cursor and self.has_focus:
            self.cursor = len(self.items) - 1 if self.follow else 0
        self._update_size()
        if self.follow and (self.cursor < 0 or at_end) and self._stuck:
            if self.cursor >= 0:
                self.cursor = len(self.items) - 1
            self._to_end()
        self.refresh()

    def extend(self, items: Sequence[Any], limit: int | None = None) -> None:
        if not items:
            return
        following = self._stuck or self._at_bottom()
        was_last = self.cursor == len(self.items) - 1
        self.items.extend(items)
        if limit is not None and len(self.items) > limit:
            cut = len(self.items) - limit
            del self.items[:cut]
            if self.cursor >= 0:
                self.cursor = max(0, self.cursor - cut)
        if self.follow and self.cursor >= 0 and was_last:
            self.cursor = len(self.items) - 1
        self._update_size()
        if self.follow and (following or was_last):
            self._to_end()
        self.refresh()

    def invalidate(self) -> None:
        """Rows' content changed (same items): render them again."""
        self._cache.clear()
        self.refresh()

    def current(self) -> Any:
        return self.items[self.cursor] if 0 <= self.cursor < len(self.items) else None

    def _at_bottom(self) -> bool:
        return self.scroll_y >= self.max_scroll_y - 0.5

    def _to_end(self) -> None:
        """Show the last rows, now and once the new size is laid out."""
        self._stuck = True
        self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
        self.call_after_refresh(self._settle_end)

    def _settle_end(self) -> None:
        if self._stuck:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)

    def _update_size(self) -> None:
        """New row count. Setting ``virtual_size`` the usual way would lay out
        the whole screen on every change; the vertical scrollbar is always
        there (overflow-y: scroll), so only this widget needs redrawing."""
        size = Size(self.size.width, len(self.items) + self.header_height)
        if size != self.virtual_size:
            self.set_reactive(LineList.virtual_size, size)
            self._scroll_update(size)
            self.refresh()

    # ---- cursor ----

    def _body_height(self) -> int:
        return max(1, self.scrollable_content_region.height - self.header_height)

    def _move_to(self, index: int) -> None:
        if not self.items:
            self.cursor = -1
            return
        index = max(0, min(index, len(self.items) - 1))
        self.cursor = index
        self._stuck = self.follow and index == len(self.items) - 1
        top = int(self.scroll_y)
        h = self._body_height()
        if index < top:
            self.scroll_to(y=index, animate=False, immediate=True)
        elif index >= top + h:
            self.scroll_to(y=index - h + 1, animate=False, immediate=True)
        self.refresh()

    def action_cursor(self, delta: int) -> None:
        if self.cursor < 0:
            self._move_to(int(self.scroll_y) if delta > 0 else int(self.scroll_y) + self._body_height() - 1)
        else:
            self._move_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        step = self._body_height()
        if self.cursor < 0:
            self.cursor = int(self.scroll_y)
        self._move_to(self.cursor + direction * step)

    def action_jump(self, where: int) -> None:
        self._move_to(0 if where == 0 else len(self.items) - 1)

    def action_select(self) -> None:
        item = self.current()
        if item is None and len(self.items) == 1:
            item = self.items[0]
        if item is not None:
            self.post_message(self.Selected(self, item))

    def on_focus(self) -> None:
        if self.show_cursor and self.cursor < 0 and self.items:
            self.cursor = len(self.items) - 1 if self.follow else int(self.scroll_y)
            self.cursor = max(0, min(self.cursor, len(self.items) - 1))
        self._cache.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._cache.clear()
        self.refresh()

    def on_click(self, event: events.Click) -> None:
        y = event.y - self.header_height
        if y < 0:
            return
        index = int(self.scroll_y) + y
        if 0 <= index < len(self.items):
            self._move_to(index)
            if event.chain >= 2:
                self.action_select()

    def on_resize(self, event: events.Resize) -> None:
        self._cache.clear()
        self._update_size()
        if self.follow and self._stuck:
            self._to_end()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._stuck = False

    # ---- rendering ----

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = None
        self._cache.clear()

    def _style_set(self) -> tuple[Style, Style, Style, Style]:
        """Base, cursor, header and empty-text styles (computed once, not per line)."""
        focused = self.has_focus
        if self._styles is None or self._styles[0] != focused:
            self._styles = (
                focused,
                (
                    self.rich_style,
                    self.get_component_rich_style("line-list--cursor"),
                    self.get_component_rich_style("line-list--header"),
                    self.get_component_rich_style("line-list--empty"),
                ),
            )
            self._cache.clear()
        return self._styles[1]

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if width != self._cache_width:
            self._cache.clear()
            self._cache_width = width
        base, cursor_style, header_style, empty_style = self._style_set()
        if self._header is not None:
            if y == 0:
                text = self._header(width)
                text.stylize(header_style)
                return self._strip(text, width, base)
            y -= 1
        index = int(self.scroll_y) + y
        if not self.items:
            if y == 0 and self.empty_text:
                return self._strip(Text(self.empty_text, style=empty_style), width, base)
            return Strip.blank(width, base)
        if index >= len(self.items):
            return Strip.blank(width, base)
        item = self.items[index]
        selected = self.show_cursor and index == self.cursor
        key = (id(item), self._version(item) if self._version else None, selected)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is item:
            return hit[1]
        text = self._render_row(item, width)
        if selected:
            text.truncate(width, overflow="ellipsis", pad=True)
            text.stylize(cursor_style)
        strip = self._strip(text, width, base)
        if len(self._cache) > 4000:
            self._cache.clear()
        self._cache[key] = (item, strip)
        return strip

    def _strip(self, text: Text, width: int, base: Style) -> Strip:
        text = safe_text(text)  # recorded strings: no control character reaches the terminal
        text.no_wrap = True
        text.truncate(width, overflow="ellipsis", pad=True)
        if base:
            text.stylize_before(base)
        return Strip(list(text.render(self.app.console, end="")), width)
