"""One finding for one cause that recompiled several frames at once.

causes.py decides which recompiles share a cause (the same guard kind, in
frames that recompiled back to back at the same moments); this rule says it
once: the frames, every guard that failed, and what the cause cost in all.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from ctmon.findings import breaks as B
from ctmon.findings import causes as C
from ctmon.findings import guard_advice as A
from ctmon.findings import guards as G
from ctmon.findings import levers as L
from ctmon.findings import recompiles as R
from ctmon.findings.model import CONFIG, RANK_RECOMPILES, Finding, Fix, code_fix

if TYPE_CHECKING:
    from ctmon.store.compiles import Frame
    from ctmon.store.session import Session

_KWARG = re.compile(r"^kwargs\[['\"](?P<name>\w+)['\"]\]$")
MAX_EVIDENCE = 12


def _rule(kind: str) -> str:
    if kind == G.SHAPE:
        return "shape-recompiles"
    if kind in (G.SCALAR, G.ITEM, G.LOOP_BOUND):
        return "scalar-recompiles"
    return "guard-recompiles"


def _named(g: G.Guard) -> G.Guard:
    """kwargs['input_ids'] -> input_ids: the keyword the user passed."""
    m = _KWARG.match(g.name)
    return replace(g, name=m.group("name")) if m else g


def _unique(frames: list[Frame]) -> list[Frame]:
    out: list[Frame] = []
    for f in frames:
        if all(f is not x for x in out):
            out.append(f)
    return out


def _numbers_from_calls(s: Session, frames: list[Frame], fix: str, fixes: list[Fix]) -> tuple[str, list[Fix]]:
    """Frames that resume with a number a call Dynamo cannot trace returned
    (``time.time()``): capture_scalar_outputs does not capture that call
    (measured: tests/test_findings_advice_older.py), so the advice names the call, and
    the setting stays a fix only if some frame's number came from a tensor."""
    calls = []
    for f in frames:
        _, _, site = R._resume_origin(s, f)
        if site is not None and B.category(site) == B.CALL:
            calls.append((f, B.skipped_function(site) or "the call", site))
    if not calls:
        return fix, fixes
    for f, fn, site in calls:
        fix += (
            f" {f.title} resumes with the number {fn} returned, which Dynamo cannot trace and no setting captures: "
            "call it outside the compiled function and pass the result in as a tensor argument."
        )
        fixes = [*fixes, code_fix(f"call {fn} outside the compiled function", site.file, site.line)]
    if len(calls) == len(frames):
        fixes = [x for x in fixes if x.kind != CONFIG]
    return fix, fixes


def rule_cascades(s: Session) -> list[Finding]:
    out = []
    for k in C.cascades(s):
        pairs = k.pairs
        frames = _unique(k.frames)
        first, first_pairs = k.members[0]
        c0, raw = C.read_loops(s, first, first_pairs)[0]
        g = _named(raw)
        n = len(k.moments)
        vals = A.values_taken(pairs) if g.kind not in (G.ITEM, G.SCALAR, G.LOOP_BOUND) else []
        shown = f" ({' → '.join(vals[:8])}{' …' if len(vals) > 8 else ''})" if vals else ""
        names = ", ".join(f.title for f in frames)
        cost = sum(c.time_s for c, _ in pairs)
        what = A.what_changed(g)
        warm = all(R._warm_up_only(s, f) for f in frames)
        if n >= 2:
            title = f"{len(frames)} frames recompile together on every change: {what}{shown}"
        else:
            title = f"One change recompiled {len(frames)} frames: {what}{shown}"
        detail = (
            f"One call into compiled code reached {names}; each guarded on the changed input (under its own "
            f"name there), so {'every' if n >= 2 else 'the'} change compiled all of them again: "
            f"{len(pairs)} recompiles, {cost:.2f} s of compiling."
        )
        limited = [f for f in frames if f.limit_hit]
        if limited:
            detail += f" {', '.join(f.title for f in limited)} hit the recompile limit and now run(s) eager."
        if warm:
            detail += " " + R._WARM_UP_DETAIL
        evidence = [
            f"{s.compile.frames[c.frame_id].title if c.frame_id in s.compile.frames else '?'}: {R._ev(c, x)}"
            for c, x in pairs[:MAX_EVIDENCE]
        ]
        if len(pairs) > MAX_EVIDENCE:
            evidence.append(f"… and {len(pairs) - MAX_EVIDENCE} more recompiles")
        evidence.append(f"in all: {len(pairs)} recompiles of {len(frames)} frames, {cost:.2f} s")
        if warm:
            severity = "info"
        else:
            severity = "warning" if n >= 2 or limited else "info"
        top = frames[0]
        # the guard as the first frame received it (kwargs['input_ids']):
        # the user's line names what it passed under that keyword
        site = L.call_site(s, first, c0)
        fix = A.fix_for(raw, vals, seen=A.values_seen(first_pairs, first.limit_hit), site=site)
        fixes = A.fixes_for(raw, vals, site=site)
        if g.kind == G.ITEM:
            fix, fixes = _numbers_from_calls(s, frames, fix, fixes)
        out.append(
            Finding(
                id=f"{_rule(g.kind)}:{'+'.join(str(f.frame_id) for f in frames)}:{g.name}"
                + (f":{g.dim}" if g.dim is not None else ""),
                rule=_rule(g.kind),
                severity=severity,
                title=title,
                file=top.loc.file,
                line=top.loc.line,
                detail=detail,
                evidence=evidence,
                fix=fix,
                fixes=fixes,
                rank=RANK_RECOMPILES + len(pairs) - (200 if warm else 0),
            )
        )
    return out


RULES = (rule_cascades,)
