"""The records of a session's compiles: frames, compile attempts, graph
breaks and cache counts, and the names and reasons they are shown by
(folded by ctmon/store/compile_state.py).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ctmon.wire import events_compile as EC
from ctmon.wire import guard_reasons

LIMIT_MARKERS = ("recompile limit", "recompile_limit", "cache_size_limit", "cache size limit")

# a Dynamo setting's value, as ``compile_start`` carries it (see compile_state.py)
ConfigValue = bool | int | float | str


_RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")


_VERSION_PREFIX = re.compile(r"^(\d+/\d+): ")


def split_reason(reason: str) -> tuple[str | None, str]:
    """PyTorch's recompile reason "2/0: tensor 'x' size mismatch ..." names
    the cached version whose guard failed (2/0), not the recompile (2/1):
    that version's id, and the reason without it, for saying so apart."""
    m = _VERSION_PREFIX.match(reason)
    return (m.group(1), reason[m.end() :]) if m else (None, reason)


def display_name(name: str | None) -> str | None:
    """Dynamo's resume functions, named for the user: 'forward (resumed at line 14)'."""
    if not name:
        return name
    m = _RESUME.match(name)
    if m:
        return f"{m.group(1)} (resumed at line {m.group(2)})"
    return name


def is_limit_hit(fail_type: object, fail_reason: object) -> bool:
    if not isinstance(fail_reason, str):
        return False
    head = fail_reason.lower()[:400]
    return any(m in head for m in LIMIT_MARKERS) and ("exceeded" in head or "hit" in head or "reached" in head)


@dataclass(slots=True)
class Location:
    file: str | None = None
    line: int | None = None
    name: str | None = None

    def text(self) -> str:
        if not self.file:
            return self.name or "?"
        return f"{self.file}:{self.line}" if self.line is not None else self.file


@dataclass(slots=True)
class GuardFailures:
    reasons: list[str]
    counts: list[int]
    total: int


_MAX_KEPT = 1 + guard_reasons.MAX_KINDS + guard_reasons.HEAD


def guard_failures(ev: EC.RecompileReasons) -> GuardFailures:
    """The guard failures a ``recompile_reasons`` event carries. A recording
    made before the agent summarized them holds PyTorch's whole list (n
    reasons on the n-th recompile): summarized here the same way, so it gives
    the same results as a newer recording of the same run."""
    if ev.total is None:
        kept, counts = guard_reasons.summarize(ev.reasons)
        return GuardFailures(kept, counts, len(ev.reasons))
    kept = ev.reasons[:_MAX_KEPT]
    counts = ev.counts[: len(kept)] + [1] * (len(kept) - len(ev.counts))
    return GuardFailures(kept, counts, max(ev.total, sum(counts)))


@dataclass(slots=True)  # thousands a second in a recompile storm
class CompileRecord:
    compile_id: str
    frame_id: int | None
    t: float
    start_t: float | None = None
    time_s: float = 0.0
    backend_s: float | None = None
    inductor_s: float | None = None
    code_gen_s: float | None = None
    recompile_reason: str | None = None
    # the kinds of guard failure behind a recompile (ctmon/wire/guard_reasons.py),
    # how many cached versions each stands for, and how many failed in all
    guard_failures: list[str] = field(default_factory=list)
    guard_counts: list[int] = field(default_factory=list)
    versions_failed: int = 0
    fail_type: str | None = None
    fail_reason: str | None = None
    limit_hit: bool = False
    cache_size: int | None = None
    graph_ops: int | None = None
    guards: int | None = None
    restarts: list[str] = field(default_factory=list)
    cudagraph_skip: str | None = None
    graph_breaks: int = 0
    fx_hits: int = 0
    fx_misses: int = 0
    ok: bool = True
    called_from: EC.StackFrame | None = None  # the user's own line into a library's frame
    started_at: EC.StackFrame | None = None  # the innermost line of the user's code when it began
    guard: Any = field(default=None, repr=False, compare=False)  # the findings engine's parse of the reason

    @property
    def is_recompile(self) -> bool:
        # a refused attempt is a recompile's, with or without its reason
        # (the limit counts a code object's compiled versions)
        return bool(self.recompile_reason) or self.limit_hit

    @property
    def span(self) -> tuple[float, float]:
        start = self.start_t if self.start_t is not None else self.t - self.time_s
        return (start, start + self.time_s)


@dataclass
class Frame:
    frame_id: int | None
    loc: Location  # where the user should look
    code: Location  # the code object Dynamo compiled
    module: str | None = None
    compiles: list[CompileRecord] = field(default_factory=list)
    limit_hit: bool = False
    entries: int = 0  # cache entries (compiled versions) held for the code object
    recompile_limit: int | None = None
    called_from: EC.StackFrame | None = None  # a library's frame: the user's line that first led there

    @property
    def recompiles(self) -> int:
        return sum(1 for c in self.compiles if c.is_recompile)

    @property
    def time_s(self) -> float:
        return sum(c.time_s for c in self.compiles)

    @property
    def last_reason(self) -> str | None:
        for c in reversed(self.compiles):
            if c.recompile_reason:
                return c.recompile_reason
        return None

    @property
    def title(self) -> str:
        return self.loc.name or self.code.name or "?"


@dataclass
class BreakSite:
    file: str | None
    line: int | None
    reason: str  # one-line summary (PyTorch's graph-break type)
    detail: str | None = None  # full reason text
    explanation: str | None = None
    hints: list[str] = field(default_factory=list)
    user_stack: list[EC.StackFrame] = field(default_factory=list)
    url: str | None = None
    gb_id: str | None = None
    called_from: EC.StackFrame | None = None  # a library's break: the user's line that leads there
    count: int = 0
    first_t: float = 0.0
    last_t: float = 0.0
    compile_ids: list[str] = field(default_factory=list)
    frame_ids: set[int | None] = field(default_factory=set)
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def loc(self) -> Location:
        return Location(self.file, self.line)


@dataclass
class CacheCounts:
    hit: int = 0
    miss: int = 0
    bypass: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"hit": self.hit, "miss": self.miss, "bypass": self.bypass}
