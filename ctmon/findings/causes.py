"""What caused each recompile, and which recompiles share one cause.

Per frame, recompiles are grouped by their cause: (guard kind, guarded name,
dim) of the failed guard that explains them best (guards.cause reads every
failed guard, not only the first).

Across frames, one change of the user's input recompiles, one after another,
every compiled frame it reaches -- with a Hugging Face GPT-2 and a new
sequence length: the hook wrapper, forward(), the loss function and the
output dataclass. Each frame names the input its own way (kwargs['input_ids'],
input_ids, labels, logits), so names cannot join them; time and kind can.

The grouping key:

* a *moment* is a run of recompiles back to back: each starts within GAP_S
  of the end of the one before, and no step boundary lies between them (one
  call into compiled code, or one step of the loop);
* per-frame causes of the same guard kind that recompiled in the same moment
  are one cause; this is transitive, so a cause that recurs (every new
  sequence length) keeps its frames together across moments.

A cause of a single frame keeps the per-frame findings (recompiles.py); a
cause across frames is one finding listing the frames (cascades.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from ctmon.findings import guards as G

if TYPE_CHECKING:
    from ctmon.store.compiles import CompileRecord, Frame
    from ctmon.store.session import Session
    from ctmon.wire.events_compile import Specialization

GAP_S = 2.0

# cascades(), per session and store revision: several rules ask within one
# analysis, and over a long storm one answer costs a large part of a second
_cascades: WeakKeyDictionary[Session, tuple[tuple[int, int], list[Cascade]]] = WeakKeyDictionary()

Group = list[tuple["CompileRecord", G.Guard]]
Key = tuple[str, str, "int | None"]


# recompiles() and by_cause() per frame, for as long as the frame gains no
# compile: every recompile rule asks for each frame, on every analysis. The
# frame is kept with its entry (an id alone could be reused by a new frame).
_memo: dict[int, tuple[Frame, int, Group, dict[Key, Group]]] = {}
_MEMO_FRAMES = 8192


def recompiles(frame: Frame) -> Group:
    """(record, cause) of each of the frame's recompiles, in order. Shared: not to be changed."""
    return _memoised(frame)[2]


def causes_of(frame: Frame) -> dict[Key, Group]:
    """The frame's recompiles grouped by cause. Shared: not to be changed."""
    return _memoised(frame)[3]


def _memoised(frame: Frame) -> tuple[Frame, int, Group, dict[Key, Group]]:
    n = len(frame.compiles)
    hit = _memo.get(id(frame))
    if hit is not None and hit[0] is frame and hit[1] == n:
        return hit
    pairs = _recompiles_of(frame)
    entry = (frame, n, pairs, by_cause(pairs))
    if len(_memo) >= _MEMO_FRAMES:
        _memo.clear()
    _memo[id(frame)] = entry
    return entry


def _recompiles_of(frame: Frame) -> Group:
    out = []
    for c in frame.compiles:
        if c.recompile_reason:
            g = c.guard  # classified once per compile record, not on every analysis
            if g is None:
                g = c.guard = G.cause(c.guard_failures or [c.recompile_reason])
            out.append((c, g))
    return _one_loop_bound(out)


def _one_loop_bound(pairs: Group) -> Group:
    """A value one of the frame's guards shows to bound a loop is that
    loop's bound in all of them: its first guard points at its first use
    (``n = k * 2``), the later ones at the loop -- one cause, not two."""
    headers: dict[str, str | None] = {}
    for _, g in pairs:
        if g.kind == G.LOOP_BOUND:
            headers.setdefault(g.name, g.code)
    return _as_loop_bounds(pairs, headers)


def _as_loop_bounds(pairs: Group, headers: dict[str, str | None]) -> Group:
    """``pairs`` with every int guard on a name in ``headers`` read as the
    bound of the loop there (``headers``: name -> the loop's source line)."""
    names = set(headers)
    if not any(_int_guard_on(g, names) for _, g in pairs):
        return pairs
    return [(c, G.as_loop_bound(g, headers[g.name]) if _int_guard_on(g, names) else g) for c, g in pairs]


def _int_guard_on(g: G.Guard, names: set[str]) -> bool:
    return g.kind in G.INT_KINDS and g.name in names and G.is_int(g.expected)


# PyTorch's reason when a dynamic int is pinned to one value by comparisons:
# at a loop header (``for _ in range(k)``, ``while i < k``), the unrolled loop.
PINNED = "range_refined_to_singleton"


def loop_pins(s: Session, frame: Frame) -> list[Specialization]:
    """PyTorch's records (``symbolic_shape_specialization``) of a value it
    pinned to one value at a loop header while compiling this frame."""
    if not s.compile.specializations:
        return []
    ids = {c.compile_id for c in frame.compiles}
    return [
        sp
        for sp in s.compile.specializations
        if sp.reason == PINNED
        and sp.code
        and G.loop_header(sp.code) is not None
        and (sp.compile_id in ids or (sp.compile_id is None and sp.frame_id == frame.frame_id))
    ]


def pinned_names(pins: list[Specialization]) -> set[str]:
    """The pinned values, by the names guards give them (L['k'] -> k)."""
    return {G.clean_name(src) for sp in pins for src in sp.sources}


def read_loops(s: Session, frame: Frame, pairs: Group) -> Group:
    """The frame's recompiles, with an int guard on a value PyTorch pinned at
    a loop header read as that loop's bound (a bound computed from it:
    ``n = k * 2; for _ in range(n)`` guards ``k``)."""
    headers: dict[str, str | None] = {}
    for sp in loop_pins(s, frame):
        for name in pinned_names([sp]):
            headers.setdefault(name, sp.code)
    return _as_loop_bounds(pairs, headers)


def key(g: G.Guard) -> Key:
    return (g.kind, g.name, g.dim)


def by_cause(pairs: Group) -> dict[Key, Group]:
    out: dict[Key, Group] = defaultdict(list)
    for c, g in pairs:
        out[key(g)].append((c, g))
    return out


def moments(s: Session) -> dict[str, int]:
    """Compile id -> moment number, for every recompile (see the module docstring)."""
    series = s.steps.current
    recs = sorted((c for c in s.compile.compiles if c.recompile_reason), key=lambda c: c.span[0])
    out: dict[str, int] = {}
    moment, end, step = -1, None, None
    for c in recs:
        start, stop = c.span
        at = series.times.count_until(start) if series is not None else 0
        if end is None or start - end > GAP_S or at != step:
            moment, end = moment + 1, stop
        end = max(end, stop)
        step = at
        out[c.compile_id] = moment
    return out


@dataclass
class Cascade:
    """One cause that recompiled several frames at the same moments."""

    kind: str
    members: list[tuple[Frame, Group]]  # per frame, in the order the frames first recompiled
    moments: list[int]  # the moments it recompiled at, in order

    @cached_property  # sorted once: the rules and the ordering of cascades ask several times
    def pairs(self) -> Group:
        return sorted((p for _, g in self.members for p in g), key=lambda p: p[0].span[0])

    @property
    def frames(self) -> list[Frame]:
        return [f for f, _ in self.members]


def cascades(s: Session) -> list[Cascade]:
    rev = (s.rev["compile"], s.rev["steps"])
    hit = _cascades.get(s)
    if hit is not None and hit[0] == rev:
        return hit[1]
    out = _cascades_of(s)
    _cascades[s] = (rev, out)
    return out


def _cascades_of(s: Session) -> list[Cascade]:
    mom = moments(s)
    groups: list[tuple[Frame, Group]] = []
    for f in s.compile.frames.values():
        groups.extend((f, pairs) for pairs in causes_of(f).values())
    parent = list(range(len(groups)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    buckets: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i, (_, pairs) in enumerate(groups):
        for c, g in pairs:
            if c.compile_id in mom:
                # one global state (autocast, deterministic algorithms) is named alike in every frame, and
                # two of them changing at one moment are two causes
                same_cause = f"{g.kind}:{g.name}" if g.kind in (G.GLOBAL_STATE, G.GRAD_MODE) else g.kind
                buckets[(same_cause, mom[c.compile_id])].append(i)
    for same in buckets.values():
        for i in same[1:]:
            parent[root(i)] = root(same[0])
    comps: dict[int, list[int]] = defaultdict(list)
    for i in range(len(groups)):
        comps[root(i)].append(i)
    out = []
    for idx in comps.values():
        members = [groups[i] for i in idx]
        if len({id(f) for f, _ in members}) < 2:
            continue
        members.sort(key=lambda m: min(c.span[0] for c, _ in m[1]))
        seen = sorted({mom[c.compile_id] for _, pairs in members for c, _ in pairs if c.compile_id in mom})
        out.append(Cascade(members[0][1][0][1].kind, members, seen))
    out.sort(key=lambda k: min(c.span[0] for c, _ in k.pairs))
    return out


def merged(s: Session) -> set[tuple[Any, Key]]:
    """(frame id, cause) of every per-frame cause that is part of a cascade."""
    return {(f.frame_id, key(pairs[0][1])) for k in cascades(s) for f, pairs in k.members}
