"""The TUI's side of ctmon.textsafe: rich ``Text`` cleaned with its styles kept.

Textual hands a segment's characters to the terminal as they are, and rich
only drops a few control codes (BEL, BS, VT, FF, CR), not ESC: a frame name
holding ``ESC ] 0 ; … BEL`` would set the window title from inside a panel.
Every place the TUI turns text into cells (panel strips, list rows, detail
screens, border titles, notifications) passes it through here. Rich markup is
never parsed from recorded text: it is always put in ``Text``/``Content``
objects, which show brackets literally.
"""

from __future__ import annotations

from rich.text import Text

from ctmon.textsafe import clean, unsafe_spans

__all__ = ["ansi_text", "clean", "safe_text"]


def safe_text(text: Text, tab_size: int | None = 4) -> Text:
    """``text`` with unsafe characters replaced (styles kept); the same object
    when there is nothing to replace. ``tab_size`` expands tabs (a strip's
    cell cannot hold one); None leaves them to Textual."""
    plain = text.plain
    spans = unsafe_spans(plain)
    if not spans and not (tab_size and "\t" in plain):
        return text
    if spans:
        cuts = [offset for start, end, _ in spans for offset in (start, end)]
        pieces = text.divide(cuts)
        out = text.blank_copy()
        bad = {start: repl for start, _, repl in spans}
        pos = 0
        for piece in pieces:
            repl = bad.get(pos) if piece.plain and pos in bad else None
            if repl is None:
                out.append_text(piece)
            else:
                # the placeholder keeps the style the sequence sat in
                swap = Text(repl)
                for span in piece.spans:
                    swap.stylize(span.style, 0, len(repl))
                out.append_text(swap)
            pos += len(piece.plain)
        text = out
    else:
        text = text.copy()
    if tab_size and "\t" in text.plain:
        text.expand_tabs(tab_size)
    return text


def ansi_text(data: str) -> Text:
    """The job's output as styled text: its colours (SGR) kept, every other
    sequence (title, clipboard, hyperlinks, cursor moves) replaced first."""
    data = clean(data, keep_sgr=True, tab="    ")
    return safe_text(Text.from_ansi(data)) if "\x1b" in data else Text(data)
