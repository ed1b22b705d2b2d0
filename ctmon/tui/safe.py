"""The TUI's side of ctmon.words.textsafe: rich ``Text`` cleaned with its styles kept.

Textual hands a segment's characters to the terminal as they are, and rich
only drops a few control codes (BEL, BS, VT, FF, CR), not ESC: a frame name
holding ``ESC ] 0 ; … BEL`` would set the window title from inside a panel.
Every place the TUI turns text into cells (panel strips, list rows, detail
screens, border titles, notifications) passes it through here. Rich markup is
never parsed from recorded text: it is always put in ``Text``/``Content``
objects, which show brackets literally.
"""

from __future__ import annotations

import msgspec
from rich.text import Text

from ctmon.wire import events as E
from ctmon.wire.decode import Fix
from ctmon.wire.event_base import Event, Unknown
from ctmon.words.textsafe import clean, clean_tree, dirty, plain_json, unsafe, unsafe_spans

__all__ = ["CLEAN_EVENTS", "ansi_text", "clean", "clean_event", "safe_text"]

# Kinds with no free text (numbers and fixed names only), and the job's
# output, which its own view cleans line by line (it keeps colours and
# carriage returns, which make progress bars).
_NO_TEXT_KINDS = (E.Steps, E.DeviceTime, E.Drops, E.Output, Unknown)


def clean_event(event: Event | Unknown) -> Event | Unknown:
    """``event`` with its strings cleaned; the same object when it is clean.

    For a viewer that folds events into a store and then builds styled text
    from it: rich drops BEL when text becomes a ``Text``, which would leave
    ``ESC ] 0 ; title`` unterminated (shown as ``]0;title`` garbage) by the
    time the view cleans it, so the viewer cleans events as they arrive.
    """
    kind = type(event)
    if kind in _NO_TEXT_KINDS:
        return event
    if kind is E.Sample:  # once a second: its only text is GPU names and an error
        assert isinstance(event, E.Sample)
        if not (event.gpu_error and unsafe(event.gpu_error)) and not any(
            g.name and unsafe(g.name) for g in event.gpus or ()
        ):
            return event
    if plain_json(_encode(event)):
        return event
    raw = msgspec.to_builtins(event)
    if not dirty(raw):
        return event
    cleaned: Event | Unknown = msgspec.convert(clean_tree(raw), kind)
    return cleaned


_encode = msgspec.json.Encoder().encode

#: clean_event, for a feed that decodes lines itself (see ctmon.wire.decode.Fix)
CLEAN_EVENTS = Fix(clean_event, frozenset(_NO_TEXT_KINDS))


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
