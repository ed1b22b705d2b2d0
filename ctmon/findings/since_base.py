"""Which findings are new since BASE: the one place that decides it, for
every output (``report --baseline``'s text, JSON and Markdown, ``record
--baseline``'s summary) and the live screen (``attach``/``replay``/``watch
--baseline``).

What is new is what ``ctmon diff BASE NEW`` calls new (ctmon/report/diff.py):
a graph-break site (its ``file:line`` and reason), a frame that now hits the
recompile limit, a recompile reason a frame had not. ``NewPlace`` holds one,
with the place NEW's findings are compared at. The reports take them from the
diff they compute anyway; the screen compares the live store with BASE's
facts (``BaseFacts``, read once at start) in ``new_places``, the same rules.

A finding shows a new place where it is at it (files relative to each run's
working directory: two checkouts name one place): every finding at a new
break site or limit hit, and at a new recompile's frame only the findings
whose evidence quotes that reason (a frame's cost finding is no newer for it).
Pure: no I/O; BaseFacts are built by the command that read BASE.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from ctmon.words.locations import where

if TYPE_CHECKING:
    from ctmon.findings.model import Finding
    from ctmon.store.compiles import Frame
    from ctmon.store.session import Session

GRAPH_BREAK, LIMIT_HIT, RECOMPILE = "graph_break", "limit_hit", "recompile"
MARKED_KINDS = (GRAPH_BREAK, LIMIT_HIT, RECOMPILE)
MARKS_SHOWN = 2  # a finding at a site with many new reasons says the first two
_COMPILE_ID = re.compile(r"^\s*\[?\d+/\d+\]?\s*:\s*")  # "0/0: " before a recompile reason (ids differ across runs)

FrameKey = tuple[str | None, int | None, str | None]  # file (relative), line, name
BreakKey = tuple[str | None, int | None, str | None]  # file (relative), line, reason


@dataclass(frozen=True)
class NewPlace:
    """One thing NEW has and BASE had not, where NEW's findings are."""

    kind: str  # one of MARKED_KINDS
    file: str | None  # relative to the run's working directory
    line: int | None
    what: str  # as ``ctmon diff`` says it: "new graph break at model.py:61: item() (2×)"
    reason: str | None = None  # a recompile's reason: only findings that quote it show it


@dataclass(frozen=True)
class BaseFacts:
    """What of BASE a live run is compared with (files relative to BASE's
    working directory)."""

    name: str  # BASE as the user named it, for the marks: "main.jsonl"
    breaks: frozenset[BreakKey] = frozenset()
    limit_hits: frozenset[FrameKey] = frozenset()
    recompile_reasons: Mapping[FrameKey, frozenset[str]] = field(default_factory=dict)  # every frame BASE compiled


def recompile_reason(text: str) -> str:
    """A recompile reason without the compile id it begins with."""
    return _COMPILE_ID.sub("", text).strip()


def relative(file: str | None, cwd: str | None) -> str | None:
    """A file as the job's working directory saw it (as ``ctmon diff`` pairs places)."""
    if file and cwd and file.startswith(cwd.rstrip("/") + "/"):
        return file[len(cwd.rstrip("/")) + 1 :]
    return file


def shows(file: str | None, line: int | None, evidence: Iterable[str], new: NewPlace) -> bool:
    """Whether a finding at ``file:line`` (relative) with this evidence is at ``new``."""
    if line is None or (new.file, new.line) != (file, line):
        return False
    if new.kind == RECOMPILE:
        return any(str(new.reason) in str(e) for e in evidence)
    return new.kind in (GRAPH_BREAK, LIMIT_HIT)


def marks(file: str | None, line: int | None, evidence: Iterable[str], news: Iterable[NewPlace]) -> list[str]:
    """What is new since BASE at a finding's place (``what`` of each new
    place it shows, at most MARKS_SHOWN); empty: nothing it says is new."""
    said = list(evidence)
    return [n.what for n in news if shows(file, line, said, n)][:MARKS_SHOWN]


# -------------------------------------------------------- the live store


def _title(f: Frame, cwd: str | None) -> str:
    return f"{f.title} ({where(relative(f.loc.file, cwd), f.loc.line) if f.loc.file else '?'})"


def _reasons(f: Frame) -> list[str]:
    out: list[str] = []
    for c in f.compiles:
        if c.recompile_reason:
            text = recompile_reason(c.recompile_reason)
            if text not in out:
                out.append(text)
    return out


def new_places(base: BaseFacts, session: Session) -> list[NewPlace]:
    """What the session (NEW, live) has and BASE had not, as ``ctmon diff``
    would say it of the two: limit hits, break sites, recompile reasons."""
    cs, cwd = session.compile, session.meta.cwd
    out: list[NewPlace] = []
    frames = cs.frames_sorted()
    for f in frames:
        key = (relative(f.loc.file, cwd), f.loc.line, f.title)
        if f.limit_hit and key not in base.limit_hits:
            what = f"{_title(f, cwd)} now hits the recompile limit ({f.recompile_limit}) and runs eager"
            out.append(NewPlace(LIMIT_HIT, key[0], key[1], what))
    for b in cs.breaks_sorted():
        at = relative(b.file, cwd)
        if (at, b.line, b.reason) not in base.breaks:
            what = f"new graph break at {where(at, b.line) if at else '?'}: {b.reason} ({b.count}×)"
            out.append(NewPlace(GRAPH_BREAK, at, b.line, what, b.reason))
    for f in frames:
        key = (relative(f.loc.file, cwd), f.loc.line, f.title)
        before = base.recompile_reasons.get(key, frozenset())
        for reason in _reasons(f):
            if reason not in before:
                what = f"new recompile of {_title(f, cwd)}: {reason}"
                out.append(NewPlace(RECOMPILE, key[0], key[1], what, reason))
    return out


Place = tuple[str | None, int | None]


@dataclass
class _Held:
    found: list[Finding]  # the findings marked (held: their ids stay theirs)
    marks: dict[int, list[str]]  # id of a finding → what is new since BASE at it


@dataclass
class SinceBase:
    """BASE, for a live screen: the marks of the session's findings. They
    are found again only when the findings are (ctmon/findings/current.py
    paces the rules): in a compile storm the new places are thousands, and
    finding them on every repaint would cost more than the screen."""

    base: BaseFacts
    _held: WeakKeyDictionary[Session, _Held] = field(default_factory=WeakKeyDictionary, repr=False)

    @property
    def name(self) -> str:
        return self.base.name

    def marks_of(self, finding: Finding, found: list[Finding], session: Session) -> list[str]:
        """What is new since BASE at ``finding``, one of ``found``: the
        session's findings as last run (empty: nothing new)."""
        held = self._held.get(session)
        if held is None or held.found is not found:
            held = self._held[session] = _Held(found, self._marks(found, session))
        return held.marks.get(id(finding), [])

    def _marks(self, found: list[Finding], session: Session) -> dict[int, list[str]]:
        at: dict[Place, list[NewPlace]] = {}
        for n in new_places(self.base, session):
            at.setdefault((n.file, n.line), []).append(n)
        out: dict[int, list[str]] = {}
        for f in found:
            file = relative(f.file, session.meta.cwd)
            said = marks(file, f.line, f.evidence, at.get((file, f.line), [])) if f.line is not None else []
            if said:
                out[id(f)] = said
        return out
