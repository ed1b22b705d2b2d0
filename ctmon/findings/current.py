"""Which findings are current for a session: the one place the rules' answer is kept.

The rules (``analyze``) are a pure function of the store, and the store says
what changed through its revision counters. ``findings_of`` runs the rules
again only when something they read has changed, so a report, a test and
the screen asking twice cost one run. ``paced_findings`` is the screen's
way in: a compile storm changes the store many times a second, and the rules
need not run that often (see its docstring).

The answer is held beside the session (a weak reference: a session that is
dropped takes its findings with it), never inside it: the store stays a
store, and the rules are not imported back into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import monotonic
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from ctmon.findings import analyze
from ctmon.findings.model import Finding
from ctmon.findings.rank_divergence import OPEN_RECOMPILE_S

if TYPE_CHECKING:
    from ctmon.store.session import Session

__all__ = ["FINDINGS_EVERY_S", "FINDINGS_SHARE", "findings_of", "paced_findings"]

FINDINGS_EVERY_S = 2.0  # live: findings that depend on steps or samples are refreshed this often
FINDINGS_SHARE = 0.1  # and never more often than keeps the rules under this share of the UI's time

StateKey = tuple[int, int, int, int, int, bool, int]


@dataclass
class _Held:
    key: StateKey  # the store's state the rules last saw
    found: list[Finding]
    at: float  # monotonic time of that run
    cost: float  # how long that run took
    gen: int  # the screen's replay generation it was asked for
    in_backlog: bool  # asked while a backlog was being folded


_held: WeakKeyDictionary[Session, _Held] = WeakKeyDictionary()


def state_key(s: Session) -> StateKey:
    """What the rules read, as counters: equal keys, equal findings."""
    return (
        s.rev["compile"],
        s.rev["rank_compiles"],  # another rank's compile: the ranks may now differ
        s.rev["steps"],
        s.rev["samples"] // 5,
        s.rev["meta"],
        s.exit is not None,
        _open_recompiles_due(s),
    )


def _open_recompiles_due(s: Session) -> int:
    """How many ranks' open compiles have run long enough to count as a
    divergence (the rule needs no new event to become true: only time)."""
    if len(s.ranks) < 2 or s.last_t is None:
        return 0
    due = s.last_t - OPEN_RECOMPILE_S
    return sum(1 for rs in s.ranks.values() for st in rs.session.compile.active.values() if st.t <= due)


def _run(s: Session, key: StateKey, gen: int, in_backlog: bool) -> list[Finding]:
    start = monotonic()
    found = analyze(s)
    now = monotonic()
    _held[s] = _Held(key, found, now, now - start, gen, in_backlog)
    return found


def findings_of(s: Session) -> list[Finding]:
    """The session's findings for its current state, most severe first."""
    key = state_key(s)
    held = _held.get(s)
    if held is not None and held.key == key:
        return held.found
    return _run(s, key, held.gen if held is not None else 0, False)


def paced_findings(s: Session, *, gen: int, catching_up: bool, force: bool = False) -> list[Finding]:
    """The findings as the screen asks for them: run again at most every
    FINDINGS_EVERY_S (and spaced by their own cost), not while a backlog is
    folded, and at once after a replay jump (a new ``gen``), the job's exit,
    the end of a backlog, or when ``force`` is given."""
    key = state_key(s)
    held = _held.get(s)
    if held is None or force or held.gen != gen or held.key[5] != key[5]:
        return _run(s, key, gen, catching_up)
    if held.key == key:
        return held.found
    # While a backlog is folded the rules would judge a past moment, and the
    # first run over a history of tens of thousands of compiles takes a large
    # fraction of a second (each guard is classified once): hold them until
    # it is folded, then run them at once.
    if catching_up:
        return held.found
    # Live, a storm makes one run cost more as the store grows: space the
    # runs by their own cost as well.
    if not held.in_backlog and monotonic() - held.at < max(FINDINGS_EVERY_S, held.cost / FINDINGS_SHARE):
        return held.found
    return _run(s, key, gen, catching_up)
