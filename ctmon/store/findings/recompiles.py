"""Rules about recompiles: the recompile limit, shapes, Python scalars, other guards."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from ctmon.store.findings import guards as G
from ctmon.store.findings.model import Finding

if TYPE_CHECKING:
    from ctmon.store.compiles import CompileRecord, Frame
    from ctmon.store.session import Session

LIMIT_WARN_FRACTION = 0.75


def _first(text: str | None, n: int = 160) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0]
    return line if len(line) <= n else line[: n - 1] + "…"


def _ev(c: CompileRecord, g: G.Guard) -> str:
    return f"compile {c.compile_id}: {g.text[:200]}" + (f"  (at {g.file}:{g.line})" if g.file else "")


def _recompiles(frame: Frame) -> list[tuple[CompileRecord, G.Guard]]:
    return [(c, G.classify(c.recompile_reason)) for c in frame.compiles if c.recompile_reason]


def _dominant_fix(pairs: list[tuple[CompileRecord, G.Guard]]) -> str:
    kinds = [g.kind for _, g in pairs]
    if not kinds:
        return ""
    kind = max(set(kinds), key=kinds.count)
    guard = next(g for _, g in pairs if g.kind == kind)
    return fix_for(guard)


def fix_for(g: G.Guard) -> str:
    name = g.name
    if g.kind == G.SHAPE:
        return (
            f"Make dim {g.dim} of '{name}' dynamic before the compiled call: "
            f"torch._dynamo.mark_dynamic({name}, {g.dim}) — or compile with torch.compile(..., dynamic=True). "
            f"If only a few sizes occur, pad/bucket dim {g.dim} to them (e.g. multiples of 64) so each compiles once."
        )
    if g.kind == G.ITEM:
        return (
            "Keep the value a tensor instead of calling .item()/.tolist() (e.g. `x / t` rather than "
            "`x / t.item()`), so it stays inside the graph; or set "
            "torch._dynamo.config.capture_scalar_outputs = True so .item() is captured symbolically "
            "instead of being baked in as a constant."
        )
    if g.kind == G.SCALAR:
        return (
            f"Pass '{name}' as a tensor (e.g. torch.tensor({name})) rather than a Python number, or compile with "
            "dynamic=True so Dynamo treats it symbolically. A value that takes only a few fixed values is fine: "
            "each compiles once."
        )
    if g.kind == G.DTYPE:
        return f"Give '{name}' one dtype on every call (cast before the compiled call, e.g. {name}.to(torch.float32)), or keep autocast settings consistent."
    if g.kind == G.DEVICE:
        return f"Keep '{name}' on one device (move it before the compiled call); a changed device or dispatch key (autocast, inference tensors) forces a new graph."
    if g.kind == G.REQUIRES_GRAD:
        return f"'{name}' alternates between requiring grad and not: detach it (or set requires_grad consistently), or compile separate functions for training and evaluation."
    if g.kind == G.RANK:
        return f"'{name}' arrives with a different number of dimensions: reshape it consistently (e.g. always batch it) before the compiled call."
    if g.kind == G.STRIDE:
        return f"'{name}' arrives with a different memory layout: call {name}.contiguous() before the compiled call, or mark the dim dynamic."
    if g.kind == G.GRAD_MODE:
        return "The function runs both with and without torch.no_grad(): expected once per mode; if it alternates often, compile separate functions for training and evaluation."
    if g.kind == G.TRAINING:
        return "module.train()/eval() switched: expected once per mode; avoid toggling it inside the compiled loop, or compile the evaluation model separately."
    if g.kind == G.MODULE_ATTR:
        return f"'{name}' is read as a Python constant and changed between calls: if it changes often, store it as a tensor (register_buffer) and update it in place; otherwise keep it fixed while the loop runs."
    if g.kind == G.GLOBAL:
        return f"The global '{name}' changed between calls: pass it as an argument (a tensor if it changes often) or keep it constant while the loop runs."
    if g.kind == G.LENGTH:
        return f"'{name}' has a different length on each call: stack it into one tensor (padding if needed), or keep its length fixed."
    if g.kind == G.CONTAINER:
        return f"A value inside '{name}' changed between calls: pass values that change as tensors, or keep the container's contents constant."
    if g.kind == G.FLAG:
        return f"The flag '{name}' changed: each value compiles its own graph, which is fine for a few values; if it flips every call, move the branch out of the compiled function."
    if g.kind in (G.IDENTITY, G.TYPE):
        return f"A new object is passed as '{name}' on each call (e.g. a lambda or module built inside the loop): create it once, outside the loop."
    return "Keep the values the compiled code reads (arguments, globals, module attributes) stable between calls; see the guard text above."


def rule_recompile_limit(s: Session) -> list[Finding]:
    out = []
    for f in s.compile.frames.values():
        if not f.limit_hit:
            continue
        pairs = _recompiles(f)
        limit = f.recompile_limit or s.compile.recompile_limit
        reasons = []
        for c, _ in pairs:
            r = _first(c.recompile_reason)
            if r not in reasons:
                reasons.append(r)
        refused = [c.compile_id for c in f.compiles if c.limit_hit]
        evidence = [f"recompiled: {r}" for r in reasons[:8]]
        if len(reasons) > 8:
            evidence.append(f"… and {len(reasons) - 8} more reasons")
        evidence.append(f"refused compile(s): {', '.join(refused[:5])}")
        fix = _dominant_fix(pairs)
        fix += (" Raising torch._dynamo.config.recompile_limit only postpones the problem"
                " (and each recompile stalls the loop).")
        out.append(Finding(
            id=f"recompile-limit:{f.frame_id}",
            rule="recompile-limit",
            severity="critical",
            title=f"{f.title} hit the recompile limit ({limit}) and now runs eager",
            file=f.loc.file, line=f.loc.line,
            detail=(f"After {f.entries} compiled versions Dynamo refused to compile {f.title} again; every call that "
                    "matches none of the cached versions now runs uncompiled, silently losing the speed-up."),
            evidence=evidence, fix=fix.strip(), rank=100 + len(pairs),
        ))
    return out


def rule_limit_approaching(s: Session) -> list[Finding]:
    out = []
    for f in s.compile.frames.values():
        limit = f.recompile_limit or s.compile.recompile_limit
        if f.limit_hit or not limit or f.entries < max(3, int(limit * LIMIT_WARN_FRACTION)):
            continue
        pairs = _recompiles(f)
        out.append(Finding(
            id=f"recompile-budget:{f.frame_id}",
            rule="recompile-limit",
            severity="warning",
            title=f"{f.title} has used {f.entries} of its {limit} recompiles",
            file=f.loc.file, line=f.loc.line,
            detail="A few more new inputs and Dynamo stops compiling this frame; it then runs eager.",
            evidence=[f"recompiled: {_first(c.recompile_reason)}" for c, _ in pairs[-5:]],
            fix=_dominant_fix(pairs), rank=50 + f.entries,
        ))
    return out


def _group(s: Session, kinds: set[str]) -> dict[tuple[object, str, str, int | None], list[tuple[CompileRecord, G.Guard]]]:
    groups: dict[tuple[object, str, str, int | None], list[tuple[CompileRecord, G.Guard]]] = defaultdict(list)
    for f in s.compile.frames.values():
        for c, g in _recompiles(f):
            if g.kind in kinds:
                groups[(f.frame_id, g.kind, g.name, g.dim)].append((c, g))
    return groups


def _severity(n: int, frame: Frame) -> str:
    return "warning" if n >= 2 or frame.limit_hit else "info"


def rule_shape_recompiles(s: Session) -> list[Finding]:
    out = []
    for (fid, _, name, dim), pairs in _group(s, {G.SHAPE}).items():
        frame = s.compile.frames[fid]
        sizes: list[str] = []
        for _, g in pairs:
            for v in (g.expected, g.actual):
                if v is not None and v not in sizes:
                    sizes.append(v)
        n = len(pairs)
        out.append(Finding(
            id=f"shape-recompiles:{fid}:{name}:{dim}",
            rule="shape-recompiles",
            severity=_severity(n, frame),
            title=f"{frame.title} recompiled {n}× because dim {dim} of tensor '{name}' changed (sizes {', '.join(sizes[:8])})",
            file=frame.loc.file, line=frame.loc.line,
            detail=(f"Dynamo specialised the graph on the size of '{name}' along dim {dim}; each new size compiles a new "
                    "version (automatic dynamic shapes did not absorb it: the frame is compiled with dynamic=False, or the "
                    "dim was marked static)." if n >= 2 else
                    f"One recompile for a new size of '{name}' along dim {dim}; Dynamo usually makes the dim dynamic after it."),
            evidence=[_ev(c, g) for c, g in pairs[:8]],
            fix=fix_for(pairs[0][1]), rank=10 + n,
        ))
    return out


def rule_scalar_recompiles(s: Session) -> list[Finding]:
    out = []
    for (fid, kind, name, _), pairs in _group(s, {G.SCALAR, G.ITEM}).items():
        frame = s.compile.frames[fid]
        n = len(pairs)
        values = [g.expected for _, g in pairs if g.expected]
        g0 = pairs[0][1]
        file, line = (g0.file, g0.line) if g0.file else (frame.loc.file, frame.loc.line)
        if kind == G.ITEM:
            title = f"{frame.title} recompiles for every new value of a number read out of the graph"
            detail = (f"`{g0.code or name}` uses a Python number that came out of a tensor (.item()/.tolist()) before a "
                      "graph break; Dynamo bakes it into the next graph as a constant, so every new value is a new "
                      "graph — and soon the recompile limit.")
        else:
            title = f"{frame.title} recompiled {n}× on the Python number '{name}'"
            detail = (f"Dynamo specialises Python ints and floats to their value; '{name}' took {n + 1} values so far. "
                      "It keeps recompiling when automatic dynamic shapes cannot apply (dynamic=False, or a float that is "
                      "specialised).")
        out.append(Finding(
            id=f"scalar-recompiles:{fid}:{name}",
            rule="scalar-recompiles",
            severity=_severity(n, frame),
            title=title, file=file, line=line, detail=detail,
            evidence=[_ev(c, g) for c, g in pairs[:8]]
            + ([f"values seen: {', '.join(values[:10])}"] if values else []),
            fix=fix_for(g0), rank=10 + n,
        ))
    return out


OTHER_KINDS = {
    G.DTYPE, G.DEVICE, G.REQUIRES_GRAD, G.RANK, G.STRIDE, G.GRAD_MODE, G.GLOBAL_STATE, G.TRAINING,
    G.MODULE_ATTR, G.GLOBAL, G.LENGTH, G.CONTAINER, G.FLAG, G.IDENTITY, G.TYPE, G.OTHER,
}


def rule_other_guards(s: Session) -> list[Finding]:
    out = []
    for (fid, kind, name, _), pairs in _group(s, OTHER_KINDS).items():
        frame = s.compile.frames[fid]
        n = len(pairs)
        g0 = pairs[0][1]
        what = G.DESCRIPTIONS.get(kind, "a guard failed")
        out.append(Finding(
            id=f"guard-recompiles:{fid}:{kind}:{name}",
            rule="guard-recompiles",
            severity=_severity(n, frame),
            title=f"{frame.title} recompiled {n}× because {what}: {name}",
            file=g0.file or frame.loc.file, line=g0.line or frame.loc.line,
            detail=f"Guard kind: {kind}. Dynamo checks it on every call; when it fails, the frame compiles again.",
            evidence=[_ev(c, g) for c, g in pairs[:8]],
            fix=fix_for(g0), rank=5 + n,
        ))
    return out


def rule_compile_failures(s: Session) -> list[Finding]:
    out = []
    for f in s.compile.frames.values():
        failed = [c for c in f.compiles if not c.ok and not c.limit_hit]
        if not failed:
            continue
        c0 = failed[0]
        out.append(Finding(
            id=f"compile-failed:{f.frame_id}",
            rule="compile-failures",
            severity="warning",
            title=f"Compiling {f.title} failed ({c0.fail_type}); it runs eager",
            file=f.loc.file, line=f.loc.line,
            detail="torch.compile fell back to eager for this frame (errors are suppressed or the frame was skipped).",
            evidence=[f"{c.compile_id}: {_first(c.fail_reason, 300)}" for c in failed[:5]],
            fix="Read the reason above; run once with torch._dynamo.config.suppress_errors = False to see the full "
                "error, and fix or isolate the failing code (torch.compiler.disable on the offending function).",
            rank=20,
        ))
    return out


RULES = (rule_recompile_limit, rule_limit_approaching, rule_shape_recompiles, rule_scalar_recompiles,
         rule_other_guards, rule_compile_failures)
