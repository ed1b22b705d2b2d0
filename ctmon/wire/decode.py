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

from collections import Counter
from collections.abc import Iterable
from typing import Any

import msgspec

from ctmon.wire.events import KINDS, AnyEvent, Autotune, Event

MAX_LINE_BYTES = 1 << 20
MAX_DEPTH = 32


class _Head(msgspec.Struct, gc=False):
    """Just enough of a line to tell an unknown kind from a bad event."""

    kind: str


class Decoder:
    """Decodes lines and keeps count of what it skipped. One per stream."""

    def __init__(self) -> None:
        self._event = msgspec.json.Decoder(AnyEvent)
        self._head = msgspec.json.Decoder(_Head)
        self.bad = 0
        self.unknown: Counter[str] = Counter()

    def decode(self, line: bytes | str) -> Event | None:
        """The event on this line, or None (counted as bad or unknown)."""
        if len(line) > MAX_LINE_BYTES:
            self.bad += 1
            return None
        try:
            ev: Event = self._event.decode(line)
        except (msgspec.DecodeError, RecursionError):
            self._classify(line)
            return None
        if type(ev) is Autotune and too_deep(ev.kernels, MAX_DEPTH - 2):
            self.bad += 1
            return None
        return ev

    def decode_all(self, lines: Iterable[bytes]) -> list[Event]:
        """Every event among ``lines`` (blank ones are not lines); the rest counted."""
        out = []
        dec = self._event.decode
        for line in lines:
            if not line or line.isspace():
                continue
            try:
                ev = dec(line)
            except (msgspec.DecodeError, RecursionError):
                self._classify(line)
                continue
            if type(ev) is Autotune and too_deep(ev.kernels, MAX_DEPTH - 2):
                self.bad += 1
                continue
            out.append(ev)
        return out

    def _classify(self, line: bytes | str) -> None:
        try:
            kind = self._head.decode(line).kind
        except (msgspec.DecodeError, RecursionError):
            self.bad += 1
            return
        if kind in KINDS:
            self.bad += 1  # a kind we know, with a field we cannot trust
        else:
            self.unknown[kind[:40]] += 1


def too_deep(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """True if lists/objects nest deeper than ``limit`` (iterative: never recurses)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Iterable[Any] = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def from_dict(obj: dict[str, Any]) -> Event | None:
    """An event built in memory (tests, the supervisor's own events), validated
    like a decoded line; None when it is not a valid event of a known kind."""
    try:
        ev: Event = msgspec.convert(obj, AnyEvent)
    except (msgspec.ValidationError, RecursionError):
        return None
    return ev
