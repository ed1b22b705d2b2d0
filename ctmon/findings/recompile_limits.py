"""The recompile limit: a frame that hit it (and now runs eager), and one close
to it with no single repeated cause; the helpers the other recompile rules
share to say a frame's budget and a guard's evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctmon.findings import causes as C
from ctmon.findings import guards as G
from ctmon.findings import levers as L
from ctmon.findings.guard_advice import fix_for, fixes_for, values_seen, what_changed
from ctmon.findings.guard_advice import values_taken as _values
from ctmon.findings.model import RANK_LIMIT, RANK_RECOMPILES, Finding, Fix, config_fix
from ctmon.findings.pytorch_hints import DYNAMO_CONFIG
from ctmon.words.phrases import cut

if TYPE_CHECKING:
    from ctmon.store.compiles import CompileRecord, Frame
    from ctmon.store.session import Session

LIMIT_WARN_FRACTION = 0.75
# guards on a number: their values are the cached versions' (no "actual")
_NUMBERS = (G.ITEM, G.SCALAR, G.LOOP_BOUND)

Group = C.Group


def first_line(text: str | None, n: int = 160) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0]
    return line if len(line) <= n else line[: n - 1] + "…"


def _ev(c: CompileRecord, g: G.Guard) -> str:
    text = f"compile {c.compile_id}: {cut(g.text, 200)}" + (f"  (at {g.file}:{g.line})" if g.file else "")
    others = [cut(x.text, 120) for x in G.failed(c.guard_failures) if x.text != g.text]
    if others:
        # the other cached versions failed on other guards: all of them are the cause
        text += f"; also failed: {'; '.join(others[:3])}" + (" …" if len(others) > 3 else "")
    return text


_recompiles = C.recompiles


def _limit(s: Session, frame: Frame) -> int | None:
    limit = frame.recompile_limit or s.compile.recompile_limit
    # A recorded limit is an int of any size; past 2**31 it means "no limit"
    # and must not overflow the float arithmetic below.
    return min(limit, 1 << 31) if limit else limit


_key = C.key


def _dominant(frame: Frame) -> Group:
    groups = C.causes_of(frame)
    return max(groups.values(), key=len) if groups else []


def rule_recompile_limit(s: Session) -> list[Finding]:
    out = []
    for f in s.compile.frames.values():
        if f.limit_hit:
            out.append(_limit_finding(s, f))
    return out


# A number read out of the previous graph (.item(), time.time()) takes a new
# value on most calls: seen once, it is still a series, not one more version.
_SERIES_BY_NATURE = (G.ITEM,)


def bounded_versions(frame: Frame) -> bool:
    """Whether the recompiles that led to the limit show a bounded set of
    versions: each has a cause of its own, seen once. A cause that recurs (a
    shape or scalar series, a loop bound) keeps taking new values, and a
    higher limit only postpones the next refusal."""
    groups = C.causes_of(frame).values()
    return bool(groups) and all(len(g) == 1 and g[0][1].kind not in _SERIES_BY_NATURE for g in groups)


def versions_seen(frame: Frame) -> int:
    """The versions the frame was asked for: those it compiled, and one for
    each compile the limit refused (a lower bound: once refused, Dynamo stops
    trying, so later new inputs leave no record)."""
    return frame.entries + sum(1 for c in frame.compiles if c.limit_hit)


def _limit_finding(s: Session, f: Frame) -> Finding:
    limit = _limit(s, f)
    bounded = bounded_versions(f)
    dom = C.read_loops(s, f, _dominant(f))
    if bounded:
        fix, fixes = _raise_limit_fix(f)
        cause = " Each recompile had a cause of its own, seen once: the versions it needs are few."
    else:
        fix, fixes = _dominant_fix(s, f, dom, limit)
        cause = f" Most recompiles came from: {what_changed(dom[0][1])}." if dom else ""
    return Finding(
        id=f"recompile-limit:{f.frame_id}",
        rule="recompile-limit",
        severity="critical",
        title=f"{f.title} hit the recompile limit ({limit}) and now runs eager",
        file=f.loc.file,
        line=f.loc.line,
        detail=(
            f"After {f.entries} compiled versions Dynamo refused to compile {f.title} again; every call that "
            "matches none of the cached versions now runs uncompiled, silently losing the speed-up." + cause
        ),
        evidence=_limit_evidence(s, f),
        fix=fix.strip(),
        fixes=fixes,
        rank=RANK_LIMIT + len(_recompiles(f)),
    )


def _limit_evidence(s: Session, f: Frame) -> list[str]:
    evidence = []
    for group in sorted(C.causes_of(f).values(), key=len, reverse=True)[:6]:
        g = C.read_loops(s, f, group)[0][1]
        vals = _values(group) if g.kind not in _NUMBERS else [x.expected for _, x in group if x.expected]
        shown = f" ({' → '.join(vals[:8])}{' …' if len(vals) > 8 else ''})" if vals else ""
        evidence.append(f"{len(group)}× {what_changed(g)}{shown}")
    refused = [c.compile_id for c in f.compiles if c.limit_hit]
    evidence.append(f"refused compile(s): {', '.join(refused[:5])}")
    return evidence


def _raise_limit_fix(f: Frame) -> tuple[str, list[Fix]]:
    """A bounded set of versions: a limit that holds them all is the fix
    (each version keeps a graph of its own, compiled once)."""
    n = versions_seen(f)
    text = (
        f"{f.title} was asked for at least {n} versions, each for a different cause seen once (see the guard "
        "findings for each), so the set of versions is bounded: remove the causes you can, and if the versions "
        f"are all needed, raise torch._dynamo.config.recompile_limit to at least {n} ({n + 2} leaves room for "
        "two more); each version then compiles once and keeps its graph."
    )
    return text, [config_fix(DYNAMO_CONFIG, "recompile_limit", n + 2)]


def _dominant_fix(s: Session, f: Frame, dom: Group, limit: int | None) -> tuple[str, list[Fix]]:
    """A cause that keeps taking new values: its own fix; a higher limit only postpones."""
    if not dom:
        return _POSTPONES, []
    config = s.compile.config_in_force(c.compile_id for c, _ in dom)
    site = L.call_site(s, f, dom[0][0])
    g = dom[0][1]
    fix = fix_for(g, _values(dom), config=config, seen=values_seen(dom, limit_hit=True), site=site)
    if g.kind != G.LOOP_BOUND:
        # a loop bound that takes a few values is the one case a higher
        # limit fixes: its advice says so, with the count of values seen
        fix += _POSTPONES
    return fix, fixes_for(g, _values(dom), config=config, site=site)


_POSTPONES = (
    " Raising torch._dynamo.config.recompile_limit only postpones the problem (and each recompile stalls the loop)."
)


def rule_limit_approaching(s: Session) -> list[Finding]:
    """A frame close to its limit, when no single repeated cause already says so."""
    out = []
    for f in s.compile.frames.values():
        limit = _limit(s, f)
        if f.limit_hit or not limit or f.entries < max(3, int(limit * LIMIT_WARN_FRACTION)):
            continue
        pairs = _recompiles(f)
        if any(len(group) >= 2 for group in C.causes_of(f).values()):
            continue  # the shape/scalar/guard finding for that cause warns, and names the budget
        out.append(
            Finding(
                id=f"recompile-budget:{f.frame_id}",
                rule="recompile-limit",
                severity="warning",
                title=f"{f.title} has used {f.entries} of its {limit} recompiles",
                file=f.loc.file,
                line=f.loc.line,
                detail=(
                    "Each recompile below had its own cause; a few more new inputs and Dynamo stops compiling this "
                    "frame, which then runs eager."
                ),
                evidence=[f"recompiled: {first_line(c.recompile_reason)}" for c, _ in pairs[-6:]],
                fix=(
                    f"Remove the causes you can (see the guard findings for {f.title}); if the versions are all needed, "
                    f"raise torch._dynamo.config.recompile_limit above {f.entries + 2}."
                ),
                fixes=[config_fix(DYNAMO_CONFIG, "recompile_limit", f.entries + 3)],
                rank=RANK_RECOMPILES - 100 + f.entries,
            )
        )
    return out


def _severity(n: int, frame: Frame) -> str:
    return "warning" if n >= 2 or frame.limit_hit else "info"


def _budget(s: Session, frame: Frame) -> str:
    limit = _limit(s, frame)
    if frame.limit_hit:
        return f" The frame has hit its recompile limit ({limit}) and now runs eager."
    if limit and frame.entries >= max(3, int(limit * LIMIT_WARN_FRACTION)):
        return f" It has used {frame.entries} of its {limit} recompiles; at {limit} it stops compiling and runs eager."
    return ""
