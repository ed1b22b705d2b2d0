"""The text of the detail screens, wrapped once: at the width it is drawn at.

A ``Doc`` is a list of paragraphs. Each has a prefix (a bullet, a label such
as ``fix:``, an indent) and a body; a body longer than the line wraps under
its own first character, never back to column 0, and only when drawn, so a
finding's fix fills an 80-column screen as it fills a 200-column one. Source
code is never reflowed: a cropped paragraph is cut at the edge with an
ellipsis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions
from rich.measure import Measurement
from rich.segment import Segment
from rich.text import Text

Part = str | tuple[str, str] | Text


@dataclass
class Para:
    prefix: Text
    body: Text
    crop: bool = False  # code: cut at the edge, never wrapped

    def plain(self) -> str:
        return self.prefix.plain + self.body.plain


def _text(part: Part, style: str = "") -> Text:
    if isinstance(part, Text):
        return part
    if isinstance(part, tuple):
        return Text(part[0], style=part[1])
    return Text(part, style=style)


class Doc:
    """Paragraphs that Rich draws at the width it is given (see the module doc)."""

    def __init__(self) -> None:
        self.paras: list[Para] = []

    def line(self, *parts: Part, crop: bool = False) -> Doc:
        """One paragraph of ``parts`` (str, (str, style) or Text), no prefix."""
        body = Text.assemble(*(_text(p) for p in parts))
        for piece in body.split("\n", allow_blank=True) if "\n" in body.plain else [body]:
            self.paras.append(Para(Text(), piece, crop))
        return self

    def para(self, body: Part, prefix: Part = "", style: str = "", *, crop: bool = False) -> Doc:
        """``body`` after ``prefix``; each of its lines a paragraph, the first
        after the prefix and the others under it, wrapped under its body."""
        head = _text(prefix)
        hang = Text(" " * head.cell_len)
        text = _text(body, style)
        lines = text.split("\n", allow_blank=True) if "\n" in text.plain else [text]
        for i, piece in enumerate(lines):
            self.paras.append(Para(head if i == 0 else hang, piece, crop))
        return self

    def blank(self) -> Doc:
        self.paras.append(Para(Text(), Text()))
        return self

    def extend(self, other: Doc) -> Doc:
        self.paras.extend(other.paras)
        return self

    def map(self, fn: Callable[[Text], Text]) -> Doc:
        """A copy with ``fn`` applied to every piece of text (cleaning)."""
        out = Doc()
        out.paras = [Para(fn(p.prefix), fn(p.body), p.crop) for p in self.paras]
        return out

    @property
    def plain(self) -> str:
        return "\n".join(p.plain() for p in self.paras)

    def lines(self, width: int, console: Console) -> Iterator[Text]:
        """Every screen line at ``width`` cells."""
        for p in self.paras:
            yield from _layout(p, max(1, width), console)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterable[Segment]:
        for line in self.lines(options.max_width, console):
            yield from line.render(console, end="")
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max((p.prefix.cell_len + p.body.cell_len for p in self.paras), default=1)
        return Measurement(min(widest, options.max_width), min(widest, options.max_width))


def _layout(p: Para, width: int, console: Console) -> Iterator[Text]:
    lead = p.prefix.cell_len
    if p.crop or lead + p.body.cell_len <= width or lead >= width - 8:
        line = Text.assemble(p.prefix, p.body)
        line.truncate(width, overflow="ellipsis")
        yield line
        return
    hang = Text(" " * lead)
    for i, piece in enumerate(p.body.wrap(console, width - lead, overflow="fold")):
        piece.rstrip()
        yield Text.assemble(p.prefix if i == 0 else hang, piece)
