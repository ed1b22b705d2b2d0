"""Rich ``Text`` to Textual strips, for widgets that redraw on every repaint.

Textual draws a widget's ``render()`` result by converting the Text into its
own Content, wrapping and formatting it, and resolving every span's style
again; for the steps chart that costs ~1.3 ms a redraw, three times the cost
of building the Text, five times a second while a job runs. Rich renders the
same lines into segments in a fraction of that, and the panels never wrap
(one line of text is one row, cut with an ellipsis), so they draw through
here instead. Styles combine as Textual's own path combines them: the
widget's style first, each span's style over it.
"""

from __future__ import annotations

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

from ctmon.tui.safe import safe_text


def text_strips(text: Text, width: int, height: int, base: Style, console: Console) -> list[Strip]:
    """One strip per line of ``text``, each exactly ``width`` cells, at most ``height``."""
    strips = []
    text = safe_text(text)  # recorded strings: no control character reaches the terminal
    for y, line in enumerate(text.split("\n", allow_blank=True)[: max(0, height)]):
        if line.cell_len > width:
            line.truncate(width, overflow="ellipsis")
        # the line's own style (Text(..., style=...)) is not in its segments
        style = base + console.get_style(line.style) if line.style else base
        # adjacent segments of one style are joined, as Textual's path joins them
        segments = Segment.simplify(Segment.apply_style(line.render(console, end=""), style))
        # offsets: what Textual's text selection reads to map a cell to the text
        strips.append(Strip(segments).extend_cell_length(width, base).simplify().apply_offsets(0, y))
    return strips
