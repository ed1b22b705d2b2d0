"""Text that is safe to put on a terminal.

Every string ctmon shows comes from somewhere it does not control: PyTorch's
messages, the job's frame and file names, the command line, notes, a
recording someone sent you. A terminal acts on control characters and escape
sequences in that text (set the window title, clear the screen, write the
clipboard with OSC 52, ...), so nothing recorded may reach it raw.

Strings are cleaned where they are *shown*, not where they enter the store:
the recording and ``report --json`` keep exactly what was recorded (JSON
escapes control characters itself), and every terminal output (text and
Markdown reports, record's summary, the TUI) goes through :func:`clean` or
through :func:`unsafe_spans` for styled text. Documents a viewer shows (the
timeline export's SVG and Perfetto JSON) go through :func:`clean_markup`,
which also replaces what XML forbids. Stdlib only: the report, the
supervisor and the viewer all use it.

What is replaced, each by one :data:`PLACEHOLDER`: a whole escape sequence
(CSI, OSC, DCS/SOS/PM/APC, two-character ESC sequences, their C1 forms) where
it is well formed, else the lone introducer; every other C0 control but
newline and tab; DEL; the C1 range U+0080–U+009F; the line and paragraph
separators and the bidirectional embedding, override and isolate characters
(which reorder what a reader sees). ``\\r\\n`` becomes ``\\n``.
"""

from __future__ import annotations

import re
from typing import Any

#: What one removed character or sequence becomes (visible, one cell, and
#: never mistaken for text: U+FFFD REPLACEMENT CHARACTER).
PLACEHOLDER = "\ufffd"

# Anything a terminal may act on, or that reorders text for the reader.
_UNSAFE_CHARS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_FAST = re.compile(f"[{_UNSAFE_CHARS}]")
_SAFE_ASCII = bytes(range(0x20, 0x7F)) + b"\n\t"


def unsafe(text: str) -> bool:
    """Whether ``text`` holds anything a terminal would act on."""
    return _unsafe(text)


def _unsafe(text: str) -> bool:
    """Whether ``text`` holds anything to replace. Most text is ASCII (a flag
    CPython keeps on the string): deleting the safe bytes in C is five times
    faster than a regex scan, and the TUI asks this of every line it draws."""
    if text.isascii():
        return bool(text.encode("ascii").translate(None, _SAFE_ASCII))
    return _FAST.search(text) is not None


# What JSON text holds, at most, when one of its strings is unsafe: ESC and
# every C0 control but newline and tab are written as escapes (\u001b, \r, \b,
# \f); C1 controls, when escaped, as \u0080-\u009f; the line separators and
# bidi controls as \u2028-\u202e and \u2066-\u2069 (or raw, then not ASCII);
# DEL as itself. Matching more than that (\u0041, \u2010) only costs the slow
# path. DEL is looked for apart: a pattern that starts with one literal byte
# is searched for five times faster.
_JSON_ESCAPE = re.compile(rb"\\(?:u00|u20[26]|[rbf])").search


def plain_json(data: bytes) -> bool:
    """A quick, sure yes: JSON text ``data`` holds no string a terminal would
    act on. False means "look closer" (most such text is safe after all).
    A few scans in C: about 0.5 us for a 400-byte line."""
    return data.isascii() and b"\x7f" not in data and _JSON_ESCAPE(data) is None


# The payload of a string sequence (OSC, DCS, ...): printable text only, so a
# sequence never swallows a line break or another sequence. One that is not
# terminated is not matched as a whole: its introducer is replaced and the
# rest shows as text, which is harmless once the introducer is gone.
_PAYLOAD = r"[^\x00-\x1f\x7f-\x9f]{0,4096}"
_ST = r"(?:\x07|\x1b\\|\x9c)"
_SEQUENCE = re.compile(
    "|".join(
        (
            r"(?P<sgr>\x1b\[[0-9;:]{0,64}m)",  # colours and attributes (kept on request)
            r"(?:\x1b\[|\x9b)[0-?]{0,64}[ -/]{0,8}[@-~]",  # CSI
            rf"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]){_PAYLOAD}{_ST}",  # OSC, DCS, SOS, PM, APC
            r"\x1b[ -/]{0,8}[0-~]",  # ESC c (reset), ESC 7, ESC ( B, ...
            "\r\n",
            f"[{_UNSAFE_CHARS}]",  # anything left, one by one
        )
    )
)


def unsafe_spans(text: str, keep_sgr: bool = False) -> list[tuple[int, int, str]]:
    """``(start, end, replacement)`` for each unsafe piece of ``text``, in order.

    For callers that must keep styles attached to the surrounding text (the
    TUI's rich ``Text``); :func:`clean` is this applied to a plain string.
    """
    if not _unsafe(text):
        return []
    spans = []
    for m in _SEQUENCE.finditer(text):
        if m.group("sgr") is not None and keep_sgr:
            continue
        spans.append((m.start(), m.end(), "\n" if m.group() == "\r\n" else PLACEHOLDER))
    return spans


def clean(text: str, keep_sgr: bool = False, tab: str = "\t") -> str:
    """``text`` with every unsafe character or sequence replaced (see the module).

    ``keep_sgr`` leaves colour/attribute sequences (``ESC [ … m``) in place for
    a caller that parses them itself (the job's output in the TUI); ``tab`` is
    what a tab becomes (a single-row cell cannot hold a real tab).
    """
    if tab != "\t" and "\t" in text:
        text = text.replace("\t", tab)
    if not _unsafe(text):
        return text
    out = []
    pos = 0
    for start, end, repl in unsafe_spans(text, keep_sgr):
        out.append(text[pos:start])
        out.append(repl)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def clean_tree(value: Any, depth: int = 0) -> Any:
    """A copy of a JSON-like value with every string (keys too) cleaned.

    For renderers that cut and wrap text: cleaning first keeps a sequence
    whole, so it becomes one placeholder instead of being split by a wrap.
    Values nested deeper than any report is are left as they are; the
    renderer's final :func:`clean` of its output still covers them.
    """
    if isinstance(value, str):
        return clean(value)
    if depth > _MAX_DEPTH:
        return value
    if isinstance(value, dict):
        return {clean_tree(k, depth + 1): clean_tree(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_tree(v, depth + 1) for v in value]
    return value


_MAX_DEPTH = 32


def dirty(value: Any, depth: int = 0) -> bool:
    """Whether any string in ``value`` (a JSON-like tree) would need cleaning."""
    return _dirty(value, depth)


def _dirty(value: Any, depth: int) -> bool:
    # the hot path of a viewer catching up: plain loops, strings checked
    # inline, containers only recursed into
    if type(value) is dict:
        for k, v in value.items():
            t = type(v)
            if t is str:
                if _unsafe(v):
                    return True
            elif (t is dict or t is list) and depth < _MAX_DEPTH and _dirty(v, depth + 1):
                return True
            # an event's own keys are only ever looked up; nested ones (the
            # torch event's env) may be shown
            if depth and _unsafe(k):
                return True
        return False
    if type(value) is list:
        for v in value:
            t = type(v)
            if t is str:
                if _unsafe(v):
                    return True
            elif (t is dict or t is list) and depth < _MAX_DEPTH and _dirty(v, depth + 1):
                return True
        return False
    return isinstance(value, str) and _unsafe(value)


# What XML 1.0 forbids in a document (besides the C0 controls that
# :func:`clean` replaces): lone surrogates -- not text at all, a UTF-8 encoder
# refuses them -- and the non-characters U+FFFE and U+FFFF.
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def clean_markup(text: str) -> str:
    """``text`` fit for a document a viewer shows (an SVG, the JSON a trace
    viewer opens): :func:`clean`, then every character XML 1.0 forbids
    replaced too, so the result can always be encoded as UTF-8 and, once
    escaped (``html.escape``), parsed as XML. Newline and tab are kept."""
    text = clean(text)
    if text.isascii():
        return text
    return _NOT_XML.sub(PLACEHOLDER, text)
