"""Bytes to typed events: where lines are validated, once.

A line is one JSON object. ``Decoder`` turns it into the Struct of its kind
(ctmon/wire/events.py) or says why not:

* a kind this version does not know (a newer writer): skipped and counted by
  kind, never an error (protocol 1's compatibility rule);
* anything else that is not a valid event of a known kind (not JSON, not an
  object, a field of the wrong type, nested too deep): a bad line.

Free-form fields (``autotune`` kernels, which hold whatever PyTorch reports)
are the only place lists and objects can nest without a schema; they are
refused past ``MAX_DEPTH`` levels, so no renderer downstream can hit Python's
recursion limit on them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from ctmon.wire.event_base import Event, Unknown
from ctmon.wire.events import KINDS, AnyEvent
from ctmon.wire.events_compile import Autotune
from ctmon.wire.protocol import MAX_DEPTH, MAX_LINE_BYTES, too_deep
from ctmon.words.textsafe import plain_json

__all__ = ["MAX_DEPTH", "MAX_LINE_BYTES", "Decoder", "from_dict", "too_deep", "typed"]


@dataclass(frozen=True)
class Fix:
    """What a reader does to some events as it decodes them (a viewer cleans
    terminal controls out of their strings): ``apply`` to each event of a
    kind not in ``skip`` whose line ``plain_json`` cannot pass at a glance."""

    apply: Callable[[Event | Unknown], Event | Unknown]
    skip: frozenset[type] = frozenset()


class _Head(msgspec.Struct, gc=False):
    """Just enough of a line to tell an unknown kind from a bad event."""

    kind: str
    t: Any = None


class Decoder:
    """Decodes lines and keeps count of what it skipped. One per stream."""

    def __init__(self) -> None:
        self._event = msgspec.json.Decoder(AnyEvent)
        self._head = msgspec.json.Decoder(_Head)
        self.bad = 0
        self.unknown: Counter[str] = Counter()
        self.last_error = ""  # why the last bad line was refused (for a note)

    def decode(self, line: bytes | str) -> Event | Unknown | None:
        """The event on this line; ``Unknown`` for a kind this version does not
        know; None for a bad line. Both are counted."""
        if len(line) > MAX_LINE_BYTES:
            self.last_error = f"longer than {MAX_LINE_BYTES} bytes"
            self.bad += 1
            return None
        try:
            ev: Event = self._event.decode(line)
        except (msgspec.DecodeError, ValueError, RecursionError) as e:  # ValueError: invalid UTF-8
            fixed = _repaired(line)
            if fixed is None:
                self.last_error = _reason(e)
                return self._classify(line)
            return self.decode(fixed)
        if type(ev) is Autotune and too_deep(ev.kernels, MAX_DEPTH - 2):
            self.last_error = f"nested deeper than {MAX_DEPTH} levels"
            self.bad += 1
            return None
        return ev

    def decode_all(self, lines: Iterable[bytes], fix: Fix | None = None) -> list[Event | Unknown]:
        """Every event among ``lines`` (blank ones are not lines, bad ones are
        left out and counted). ``fix``: see ``Fix``; judged on the bytes at
        hand, where the event would otherwise be encoded again to judge it."""
        out: list[Event | Unknown] = []
        add = out.append
        dec = self._event.decode
        for line in lines:
            # the hot path of reading a recording: one C call per line
            try:
                if len(line) > MAX_LINE_BYTES:
                    raise ValueError("oversized")
                ev = dec(line)
            except (msgspec.DecodeError, ValueError, RecursionError):  # ValueError: invalid UTF-8, oversized
                if not line.strip():
                    continue  # a blank line is not a line
                other = self.decode(line)
                if other is not None:
                    add(other if fix is None else fix.apply(other))
                continue
            if type(ev) is Autotune and too_deep(ev.kernels, MAX_DEPTH - 2):
                self.bad += 1
                continue
            if fix is not None and type(ev) not in fix.skip and not plain_json(line):
                ev = fix.apply(ev)
            add(ev)
        return out

    def _classify(self, line: bytes | str) -> Unknown | None:
        try:
            head = self._head.decode(line)
        except (msgspec.DecodeError, ValueError, RecursionError):  # ValueError: invalid UTF-8
            self.bad += 1
            return None
        if head.kind in KINDS:
            self.bad += 1  # a kind we know, with a field we cannot trust
            return None
        self.unknown[head.kind[:40]] += 1
        return Unknown(kind=head.kind, t=_time(head.t))


_BOM = b"\xef\xbb\xbf"
_SURROGATE_BYTES = re.compile(rb"\xed[\xa0-\xbf][\x80-\xbf]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _repaired(line: bytes | str) -> bytes | None:
    """A line that failed on surrogates (or starts with a byte-order mark),
    with each surrogate as U+FFFD; None when there is nothing to repair (the
    line is bad for another reason).

    Earlier writers encoded file names whose bytes are not UTF-8 (Python
    holds them as lone surrogates) with ``surrogatepass``, which strict UTF-8
    refuses: those recordings stay readable, the odd bytes shown as U+FFFD."""
    raw = line.encode("utf-8", "surrogatepass") if isinstance(line, str) else line
    fixed = _SURROGATE_ESCAPE.sub(rb"\\ufffd", _SURROGATE_BYTES.sub("\ufffd".encode(), raw))
    if fixed.startswith(_BOM):  # a recording saved by an editor that marks UTF-8
        fixed = fixed[len(_BOM) :]
    return fixed if fixed != raw else None


def _reason(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "nested too deep"
    if isinstance(e, UnicodeDecodeError):
        return "not UTF-8"
    return str(e)[:200]


def typed(obj: Event | Unknown | dict[str, Any]) -> Event | Unknown | None:
    """An event given in memory (a feed of events, a test), as the decoder
    would have given it: validated, an unknown kind as ``Unknown``, None when
    it is not a valid event."""
    if not isinstance(obj, dict):
        return obj
    kind = obj.get("kind")
    if isinstance(kind, str) and kind not in KINDS:
        return Unknown(kind=kind, t=_time(obj.get("t")))
    return from_dict(obj)


def _time(t: Any) -> float:
    """An unknown event's ``t``, as far as it is a time at all."""
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return 0.0
    try:
        f = float(t)
    except OverflowError:
        return 0.0
    return f if f == f and abs(f) != float("inf") else 0.0


def from_dict(obj: dict[str, Any]) -> Event | None:
    """An event built in memory (tests, the supervisor's own events), validated
    like a decoded line; None when it is not a valid event of a known kind."""
    try:
        ev: Event = msgspec.convert(obj, AnyEvent)
    except (msgspec.ValidationError, RecursionError, UnicodeEncodeError):  # a lone surrogate: not text
        return None
    return ev
