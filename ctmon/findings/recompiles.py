"""Rules about recompiles: the recompile limit (recompile_limits.py), shapes, Python scalars
(a loop bound: loop_bounds.py), other guards.

Each recompile carries the guard that failed (see guards.py and causes.py).
Recompiles of one frame are grouped by the guarded value (a cause shared by
several frames at once is cascades.py's single finding); a group that recompiled twice or
more keeps recompiling as the value changes (warning), a single recompile is
usually Dynamo generalising once (info).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ctmon.findings import breaks as B
from ctmon.findings import causes as C
from ctmon.findings import guards as G
from ctmon.findings import levers as L
from ctmon.findings.guard_advice import fix_for, fixes_for
from ctmon.findings.guard_advice import tensor_names as _tensor
from ctmon.findings.guard_advice import values_taken as _values
from ctmon.findings.guard_names import reachable
from ctmon.findings.guards import strip_comment
from ctmon.findings.loop_bounds import loop_bound_finding
from ctmon.findings.model import RANK_RECOMPILES, Finding, Fix, code_fix
from ctmon.findings.recompile_limits import (
    Group,
    _budget,
    _ev,
    _severity,
    rule_limit_approaching,
    rule_recompile_limit,
)

if TYPE_CHECKING:
    from ctmon.store.compiles import BreakSite, Frame
    from ctmon.store.session import Session

_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")


def _groups(s: Session, kinds: set[str]) -> list[tuple[Frame, Group]]:
    """Per-frame causes; those shared with other frames are cascades.py's."""
    out = []
    shared = C.merged(s)
    for f in s.compile.frames.values():
        for key, pairs in C.causes_of(f).items():
            if key[0] in kinds and (f.frame_id, key) not in shared:
                out.append((f, pairs))
    return out


def _warm_up_only(s: Session, frame: Frame) -> bool:
    """Every compile of the frame ended before the first step boundary, and
    steps have run since without more: a deliberate warm-up (bucketed inputs
    compiled one by one before serving), not a storm in the loop."""
    series = s.steps.current
    if series is None or len(series) < 2 or frame.limit_hit:
        return False
    first = series.times[0]
    return all(c.span[1] <= first for c in frame.compiles)


_WARM_UP_DETAIL = (
    "Every size was compiled before the first step and no step has compiled since: if these are the "
    "sizes the job pads or buckets its inputs to, this is that practice working. Each size still "
    "costs a compile when the cache is cold."
)


def rule_shape_recompiles(s: Session) -> list[Finding]:
    out = []
    for frame, pairs in _groups(s, {G.SHAPE}):
        g0 = pairs[0][1]
        name, dim = g0.name, g0.dim
        sizes = _values(pairs)
        shown = f"sizes {', '.join(sizes[:8])}{' …' if len(sizes) > 8 else ''}"
        n = len(pairs)
        if _warm_up_only(s, frame):
            severity, rank = "info", RANK_RECOMPILES - 200 + n
            title = f"{frame.title} compiled {n + 1} sizes of dim {dim} of tensor '{name}' in its warm-up, none since"
            detail = _WARM_UP_DETAIL
            site = L.call_site(s, frame, pairs[0][0])
            named = _tensor(name, site)
            mark = (
                f", or mark the dim dynamic to compile once: torch._dynamo.mark_dynamic({named.code}, {dim})"
                f"{named.note}"
                if (reachable(name) or named.expr is not None) and site.lever not in L.LIBRARY_LOOPS
                else ""
            )
            fixes: list[Fix] = (
                [code_fix(f"torch._dynamo.mark_dynamic({named.code}, {dim})", *_line_of(site))] if mark else []
            )
            fix = (
                "Nothing while the steps see only these sizes. To make the warm-up cheap, keep the compile "
                "caches between runs (a persistent TORCHINDUCTOR_CACHE_DIR, or "
                f"torch.compiler.save_cache_artifacts / load_cache_artifacts){mark}."
            )
        else:
            severity, rank = _severity(n, frame), RANK_RECOMPILES + n
            title = f"{frame.title} recompiled {n}× because dim {dim} of tensor '{name}' changed"
            if any(g.expected and "<=" in g.expected for _, g in pairs):
                detail = (
                    f"Dim {dim} of '{name}' is dynamic, but a new size fell outside what the cached graph "
                    f"accepts ({g0.expected}); Dynamo compiled again."
                )
            elif n >= 2 and {"0", "1"} & set(sizes):
                # Dynamo always specialises sizes 0 and 1: a dim that takes
                # them (decode steps of generate(), a batch of one) gets a
                # graph of its own whatever the dynamic setting.
                detail = (
                    f"Dynamo specialised the graph on the size of '{name}' along dim {dim}; each new size "
                    "compiles a new version. Sizes 0 and 1 are always specialised (a batch of one, a decode "
                    "step of one token), so they keep graphs of their own even when the dim is dynamic."
                )
            elif n >= 2:
                # Which of these applies is not in the recording: say all three.
                detail = (
                    f"Dynamo specialised the graph on the size of '{name}' along dim {dim}; each new size "
                    "compiles a new version. Automatic dynamic shapes did not absorb it: either "
                    "torch.compile(..., dynamic=False) was passed, the dim was marked static "
                    "(torch._dynamo.mark_static), or the size is used in a way that forces a specialisation."
                )
            else:
                detail = (
                    f"One recompile for a new size of '{name}' along dim {dim}; Dynamo usually makes the dim "
                    "dynamic after it."
                )
            detail += _budget(s, frame) if n >= 2 else ""
            fix = fix_for(g0, sizes, site=L.call_site(s, frame, pairs[0][0]))
            fixes = fixes_for(g0, sizes, site=L.call_site(s, frame, pairs[0][0]))
        out.append(
            Finding(
                id=f"shape-recompiles:{frame.frame_id}:{name}:{dim}",
                rule="shape-recompiles",
                severity=severity,
                title=f"{title} ({shown})",
                file=frame.loc.file,
                line=frame.loc.line,
                detail=detail,
                evidence=[_ev(c, g) for c, g in pairs[:8]],
                fix=fix,
                fixes=fixes,
                rank=rank,
            )
        )
    return out


def _line_of(site: L.CallSite | None) -> tuple[str | None, int | None]:
    """The user's calling line into the compiled code, where known."""
    return (site.line.file, site.line.line) if site is not None and site.line is not None else (None, None)


def _resume_origin(s: Session, frame: Frame) -> tuple[str | None, int | None, BreakSite | None]:
    """For a resume function, the graph break it resumes after: where the number was produced."""
    m = _RESUME.match(frame.code.name or "")
    if not m:
        return None, None, None
    line = int(m.group("line"))
    file = frame.code.file
    site = s.compile.breaks.get((file, line))
    if site is None:
        site = next((b for b in s.compile.breaks.values() if b.line == line and b.file == file), None)
    return file, line, site


def rule_scalar_recompiles(s: Session) -> list[Finding]:
    out = []
    for frame, group in _groups(s, {G.SCALAR, G.ITEM, G.LOOP_BOUND}):
        pairs = C.read_loops(s, frame, group)
        if pairs[0][1].kind == G.LOOP_BOUND:
            out.append(loop_bound_finding(s, frame, pairs))
            continue
        n = len(pairs)
        g0 = pairs[0][1]
        kind, name = g0.kind, g0.name
        values = [g.expected for _, g in pairs if g.expected]
        file, line = (g0.file, g0.line) if g0.file else (frame.loc.file, frame.loc.line)
        config = s.compile.config_in_force(c.compile_id for c, _ in pairs)
        fix = fix_for(g0, config=config)
        scalar_fixes = fixes_for(g0, config=config, site=L.call_site(s, frame, pairs[0][0]))
        if kind == G.ITEM:
            bfile, bline, site = _resume_origin(s, frame)
            if site is not None and B.category(site) == B.CALL:
                fn = B.skipped_function(site) or "the call"
                scalar_fixes = [code_fix(f"call {fn} outside the compiled function", site.file, site.line)]
                fix = (
                    f"The number comes from {fn}, which Dynamo cannot trace: call it outside the compiled function "
                    "and pass the result in as a tensor argument (or keep it out of tensor code), so the graph "
                    "neither breaks nor guards on its value."
                )
            produced = ""
            if site is not None and site.user_stack and site.user_stack[-1].code:
                produced = f"`{strip_comment(site.user_stack[-1].code)}`"
            elif site is not None:
                produced = f"the call that broke the graph ({site.reason})"
            where = f"line {bline}" if bline else "the graph break"
            if g0.code and g0.line == bline:
                used = f"the rest of line {bline}"
            elif g0.code:
                used = f"`{strip_comment(g0.code)}`" + (f" (line {g0.line})" if g0.line else "")
            else:
                used = "the code after it"
            if n >= 2:
                title = f"{frame.title} recompiles for every new value of the number produced at {where}"
            else:
                title = f"{frame.title} recompiled once on the number produced at {where}"
            title += f" ({produced})" if produced.startswith("`") else ""
            detail = (
                f"{produced or 'A call'} at {where} breaks the graph and returns a Python number "
                f"(.item()/.tolist() or an untraceable call); {used} runs in the next graph, where Dynamo bakes "
                "that number in as a constant and guards on it — so every new value is a new graph"
            )
            detail += (
                ", and soon the recompile limit."
                if n >= 2
                else "; here automatic dynamic shapes absorbed it after one recompile."
            )
            if bfile and bline:
                file, line = bfile, bline  # the fix belongs where the number is produced
        else:
            title = f"{frame.title} recompiled {n}× on the Python number '{name}'"
            detail = (
                f"Dynamo specialises Python ints and floats to their value; '{name}' took {n + 1} values so far. "
                "It keeps recompiling when automatic dynamic shapes cannot apply (dynamic=False, or a float that "
                "is specialised)."
            )
        out.append(
            Finding(
                id=f"scalar-recompiles:{frame.frame_id}:{name}",
                rule="scalar-recompiles",
                severity=_severity(n, frame),
                title=title,
                file=file,
                line=line,
                detail=detail + (_budget(s, frame) if n >= 2 else ""),
                evidence=[_ev(c, g) for c, g in pairs[:8]]
                + ([f"values seen: {', '.join(values[:10])}"] if values else []),
                fix=fix,
                fixes=scalar_fixes,
                rank=RANK_RECOMPILES + n,
            )
        )
    return out


OTHER_KINDS = {
    G.DTYPE,
    G.DEVICE,
    G.DISPATCH,
    G.REQUIRES_GRAD,
    G.RANK,
    G.STRIDE,
    G.GRAD_MODE,
    G.GLOBAL_STATE,
    G.TRAINING,
    G.MODULE_ATTR,
    G.GLOBAL,
    G.LENGTH,
    G.CONTAINER,
    G.FLAG,
    G.IDENTITY,
    G.TYPE,
    G.INVALIDATED,
    G.OTHER,
}


def rule_other_guards(s: Session) -> list[Finding]:
    out = []
    for frame, pairs in _groups(s, OTHER_KINDS):
        n = len(pairs)
        g0 = pairs[0][1]
        kind, name = g0.kind, g0.name
        what = G.DESCRIPTIONS.get(kind, "a guard failed")
        vals = _values(pairs)
        config = s.compile.config_in_force(c.compile_id for c, _ in pairs)
        binary = (G.DEVICE, G.DISPATCH, G.TRAINING, G.REQUIRES_GRAD, G.GRAD_MODE, G.GLOBAL_STATE, G.INVALIDATED)
        seen = f" Values seen: {', '.join(vals[:8])}." if vals and kind not in binary else ""
        hint = f" Dynamo's hint: {g0.hint}" if g0.hint else ""
        out.append(
            Finding(
                id=f"guard-recompiles:{frame.frame_id}:{kind}:{name}",
                rule="guard-recompiles",
                severity=_severity(n, frame),
                title=f"{frame.title} recompiled {n}× because {what}: {name}",
                file=g0.file or frame.loc.file,
                line=g0.line or frame.loc.line,
                detail=(
                    f"Guard kind: {kind}. Dynamo checks it on every call; when it fails, the frame compiles again."
                    + seen
                    + (_budget(s, frame) if n >= 2 else "")
                    + hint
                ),
                evidence=[_ev(c, g) for c, g in pairs[:8]],
                fix=fix_for(g0, vals, config=config, site=L.call_site(s, frame, pairs[0][0])),
                fixes=fixes_for(g0, vals, config=config, site=L.call_site(s, frame, pairs[0][0])),
                rank=RANK_RECOMPILES + n,
            )
        )
    return out


RULES = (
    rule_recompile_limit,
    rule_limit_approaching,
    rule_shape_recompiles,
    rule_scalar_recompiles,
    rule_other_guards,
)
