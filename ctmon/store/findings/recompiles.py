"""Rules about recompiles: the recompile limit, shapes, Python scalars, other guards.

Each recompile carries the guard that failed (see guards.py and causes.py).
Recompiles of one frame are grouped by the guarded value (a cause shared by
several frames at once is cascades.py's single finding); a group that recompiled twice or
more keeps recompiling as the value changes (warning), a single recompile is
usually Dynamo generalising once (info).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ctmon.store.findings import breaks as B
from ctmon.store.findings import causes as C
from ctmon.store.findings import guards as G
from ctmon.store.findings.guards import strip_comment
from ctmon.store.findings.model import RANK_LIMIT, RANK_RECOMPILES, Finding

if TYPE_CHECKING:
    from ctmon.store.compiles import BreakSite, CompileRecord, Frame
    from ctmon.store.session import Session

LIMIT_WARN_FRACTION = 0.75
_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")
_ARG = re.compile(r"^(?:args\[\d+\]|kwargs\[['\"].+['\"]\])$")

Group = C.Group


def _first(text: str | None, n: int = 160) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0]
    return line if len(line) <= n else line[: n - 1] + "…"


def _ev(c: CompileRecord, g: G.Guard) -> str:
    text = f"compile {c.compile_id}: {g.text[:200]}" + (f"  (at {g.file}:{g.line})" if g.file else "")
    others = [x.text[:120] for x in G.failed(c.guard_failures) if x.text != g.text]
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


def _values(pairs: Group) -> list[str]:
    """The values the guarded thing took, in order, without repeats."""
    out: list[str] = []
    for _, g in pairs:
        for v in (g.expected, g.actual):
            if v is not None and v not in out:
                out.append(v)
    return out


def _tensor(name: str) -> tuple[str, str]:
    """How to name a guarded tensor in prose, and in code."""
    if _ARG.match(name):
        return f"the tensor passed as {name}", "x"
    return f"'{name}'", name


def what_changed(g: G.Guard) -> str:
    """A short phrase for titles and evidence: what changed."""
    if g.kind == G.SHAPE:
        return f"dim {g.dim} of tensor '{g.name}' changed"
    if g.kind == G.SCALAR:
        return f"the Python number '{g.name}' changed"
    if g.kind == G.ITEM:
        return "a number read out of the previous graph changed"
    if g.kind in (G.GRAD_MODE, G.GLOBAL_STATE):
        return f"global state '{g.name}' changed"
    return f"{G.DESCRIPTIONS.get(g.kind, 'a guard failed')}: {g.name}"


def fix_for(g: G.Guard, values: list[str] | None = None) -> str:
    name = g.name
    k = g.kind
    if k == G.SHAPE:
        who, code = _tensor(name)
        if g.expected and "<=" in g.expected:
            return (
                f"Dim {g.dim} of {who} left the range the graph was compiled for ({g.expected}): widen the range "
                f"given to torch._dynamo.mark_dynamic({code}, {g.dim}, min=..., max=...), or pad/bucket that dim "
                "into it."
            )
        return (
            f"Make dim {g.dim} of {who} dynamic before the compiled call: "
            f"torch._dynamo.mark_dynamic({code}, {g.dim}) — or compile with torch.compile(..., dynamic=True). "
            f"If only a few sizes occur, pad/bucket dim {g.dim} to them (e.g. multiples of 64) so each compiles once."
        )
    if k == G.ITEM:
        return (
            "Keep the value a tensor instead of calling .item()/.tolist() on it (e.g. `x / t` rather than "
            "`x / t.item()`; torch.where/clamp instead of Python branches), so it stays inside the graph; "
            "or set torch._dynamo.config.capture_scalar_outputs = True so .item() is traced as a symbolic value "
            "instead of breaking the graph and being baked in as a constant."
        )
    if k == G.SCALAR:
        return (
            f"Pass '{name}' as a 0-d tensor (torch.tensor({name})) rather than a Python number, or compile with "
            "dynamic=True so Dynamo treats it symbolically. A value that takes only a few fixed values is fine: "
            "each compiles once."
        )
    if k == G.DTYPE:
        vals = values or [v for v in (g.expected, g.actual) if v]
        seen = f" (it arrived as {', '.join(vals[:-1])} and {vals[-1]})" if len(vals) >= 2 else ""
        return (
            f"Give {_tensor(name)[0]} one dtype on every call{seen}: cast it before the compiled call, e.g. "
            f"{_tensor(name)[1]}.to(torch.float32), or keep autocast settings consistent."
        )
    if k == G.DEVICE:
        return (
            f"Keep {_tensor(name)[0]} on one device: move it before the compiled call "
            f"({_tensor(name)[1]}.to(device)); a tensor on another device needs a different graph."
        )
    if k == G.DISPATCH:
        return (
            f"{_tensor(name)[0]} was created differently on some calls — typically under torch.inference_mode(), "
            "which makes inference tensors with other dispatch keys: create the inputs the same way every time "
            "(torch.no_grad() instead of torch.inference_mode() around code that feeds the compiled function)."
        )
    if k == G.REQUIRES_GRAD:
        who, code = _tensor(name)
        return (
            f"{who} sometimes requires grad and sometimes not: pass {code}.detach() where no gradient is needed "
            "(or set requires_grad the same way every time); each variant otherwise keeps its own graph."
        )
    if k == G.RANK:
        return (
            f"{_tensor(name)[0]} arrives with a different number of dimensions: reshape it consistently before "
            "the compiled call (e.g. always keep the batch dimension)."
        )
    if k == G.STRIDE:
        who, code = _tensor(name)
        return (
            f"{who} arrives with a different memory layout (e.g. a transposed or sliced view): call "
            f"{code}.contiguous() before the compiled call."
        )
    if k == G.GRAD_MODE:
        return (
            "Expected once per mode: the graphs with and without torch.no_grad() both stay cached, so switching "
            "back and forth costs nothing more. If the no-grad calls are rare (evaluation), run them on the "
            "uncompiled function/module to skip this compile; never toggle grad mode inside the compiled region."
        )
    if k == G.GLOBAL_STATE:
        low = name.lower()
        if "autocast" in low:
            return (
                "The function ran both inside and outside torch.autocast (or with another autocast dtype): call "
                "it under the same autocast context every time, or move the autocast block inside it."
            )
        if "default_dtype" in low:
            return "torch.set_default_dtype() changed between calls: set it once at start-up, before compiling."
        if "deterministic" in low:
            return "torch.use_deterministic_algorithms() was toggled between calls: set it once at start-up."
        return f"Global torch state '{name}' changed between calls: set it once at start-up, not inside the loop."
    if k == G.TRAINING:
        return (
            "Expected once per mode: after module.train()/eval() both graphs stay cached, so switching back and "
            "forth costs nothing more. If evaluation is rare, run it on the uncompiled module (the module you "
            "passed to torch.compile, or compiled._orig_mod) to skip this compile."
        )
    if k == G.MODULE_ATTR:
        attr = name.rsplit(".", 1)[-1]
        owner = name.rsplit(".", 1)[0] if "." in name else "self"
        if G.is_int(g.expected) or (g.hint and "integer attributes" in g.hint):
            return (
                f"'{name}' is an int attribute, which torch.compile treats as a constant: every new value is a "
                f"new graph. Keep it in a tensor instead — {owner}.register_buffer('{attr}', torch.zeros((), "
                f"dtype=torch.long)) and update it in place ({name}.fill_(value) or {name} += 1) — or set "
                "torch._dynamo.config.allow_unspec_int_on_nn_module = True so int attributes are traced as "
                "dynamic values."
            )
        return (
            f"'{name}' is read as a Python constant and changed between calls: if it changes often, store it as a "
            f"tensor ({owner}.register_buffer('{attr}', torch.tensor(...))) and update it in place "
            f"({name}.fill_(value)); otherwise keep it fixed while the loop runs."
        )
    if k == G.GLOBAL:
        return (
            f"The global '{name}' is read inside the compiled function and changed between calls: pass it as an "
            f"argument instead — a tensor if it changes every step (e.g. fn(x, torch.tensor({name}))) — or keep "
            "it constant while the loop runs."
        )
    if k == G.LENGTH:
        return (
            f"'{name}' has a different length on each call: stack its items into one tensor (torch.stack, "
            "padding if needed), or keep its length fixed."
        )
    if k == G.CONTAINER:
        return (
            f"A value inside '{name}' changed between calls: pass values that change as tensors, or read them "
            "outside the compiled function."
        )
    if k == G.FLAG:
        return (
            f"The flag '{name}' changed: each value compiles its own graph, which is fine for a few values; if it "
            "flips every call, move the branch out of the compiled function."
        )
    if k == G.IDENTITY:
        return (
            f"A new object is passed as '{name}' on each call (e.g. a lambda, closure or module built inside the "
            "loop): create it once, outside the loop, and reuse it."
        )
    if k == G.TYPE:
        if g.actual and "Parameter" in g.actual:
            return (
                f"'{name}' is sometimes an nn.Parameter and sometimes a plain tensor: pass {name}.detach() (or "
                "always the parameter) so it has one type."
            )
        return f"'{name}' changed type between calls: pass the same type every time (e.g. always a tensor, or always an int)."
    if k == G.INVALIDATED:
        return (
            "An object a cached graph depends on was freed, so the graph was dropped and compiled again: create "
            "models, modules and helper objects once and keep them alive instead of re-creating them in the loop."
        )
    return "Keep the values the compiled code reads (arguments, globals, module attributes) stable between calls; see the guard text above."


_key = C.key
_by_cause = C.by_cause


def _dominant(pairs: Group) -> Group:
    groups = _by_cause(pairs)
    return max(groups.values(), key=len) if groups else []


def rule_recompile_limit(s: Session) -> list[Finding]:
    out = []
    for f in s.compile.frames.values():
        if not f.limit_hit:
            continue
        pairs = _recompiles(f)
        limit = _limit(s, f)
        evidence = []
        for group in sorted(_by_cause(pairs).values(), key=len, reverse=True)[:6]:
            g = group[0][1]
            vals = _values(group) if g.kind not in (G.ITEM, G.SCALAR) else [x.expected for _, x in group if x.expected]
            shown = f" ({' → '.join(vals[:8])}{' …' if len(vals) > 8 else ''})" if vals else ""
            evidence.append(f"{len(group)}× {what_changed(g)}{shown}")
        refused = [c.compile_id for c in f.compiles if c.limit_hit]
        evidence.append(f"refused compile(s): {', '.join(refused[:5])}")
        dom = _dominant(pairs)
        fix = fix_for(dom[0][1]) if dom else ""
        fix += (
            " Raising torch._dynamo.config.recompile_limit only postpones the problem"
            " (and each recompile stalls the loop)."
        )
        cause = f" Most recompiles came from: {what_changed(dom[0][1])}." if dom else ""
        out.append(
            Finding(
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
                evidence=evidence,
                fix=fix.strip(),
                rank=RANK_LIMIT + len(pairs),
            )
        )
    return out


def rule_limit_approaching(s: Session) -> list[Finding]:
    """A frame close to its limit, when no single repeated cause already says so."""
    out = []
    for f in s.compile.frames.values():
        limit = _limit(s, f)
        if f.limit_hit or not limit or f.entries < max(3, int(limit * LIMIT_WARN_FRACTION)):
            continue
        pairs = _recompiles(f)
        if any(len(group) >= 2 for group in _by_cause(pairs).values()):
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
                evidence=[f"recompiled: {_first(c.recompile_reason)}" for c, _ in pairs[-6:]],
                fix=(
                    f"Remove the causes you can (see the guard findings for {f.title}); if the versions are all needed, "
                    f"raise torch._dynamo.config.recompile_limit above {f.entries + 2}."
                ),
                rank=RANK_RECOMPILES - 100 + f.entries,
            )
        )
    return out


def _groups(s: Session, kinds: set[str]) -> list[tuple[Frame, Group]]:
    """Per-frame causes; those shared with other frames are cascades.py's."""
    out = []
    shared = C.merged(s)
    for f in s.compile.frames.values():
        for key, pairs in _by_cause(_recompiles(f)).items():
            if key[0] in kinds and (f.frame_id, key) not in shared:
                out.append((f, pairs))
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
            fix = (
                "Nothing while the steps see only these sizes. To make the warm-up cheap, keep the compile "
                "caches between runs (a persistent TORCHINDUCTOR_CACHE_DIR, or "
                "torch.compiler.save_cache_artifacts / load_cache_artifacts), or mark the dim dynamic "
                f"(torch._dynamo.mark_dynamic({_tensor(name)[1]}, {dim})) to compile once."
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
            fix = fix_for(g0)
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
                rank=rank,
            )
        )
    return out


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
    for frame, pairs in _groups(s, {G.SCALAR, G.ITEM}):
        n = len(pairs)
        g0 = pairs[0][1]
        kind, name = g0.kind, g0.name
        values = [g.expected for _, g in pairs if g.expected]
        file, line = (g0.file, g0.line) if g0.file else (frame.loc.file, frame.loc.line)
        fix = fix_for(g0)
        if kind == G.ITEM:
            bfile, bline, site = _resume_origin(s, frame)
            if site is not None and B.category(site) == B.CALL:
                fn = B.skipped_function(site) or "the call"
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
                fix=fix_for(g0, vals),
                rank=RANK_RECOMPILES + n,
            )
        )
    return out


def rule_compile_failures(s: Session) -> list[Finding]:
    out = []
    for f in s.compile.frames.values():
        failed = [c for c in f.compiles if not c.ok and not c.limit_hit]
        if not failed:
            continue
        c0 = failed[0]
        out.append(
            Finding(
                id=f"compile-failed:{f.frame_id}",
                rule="compile-failures",
                severity="warning",
                title=f"Compiling {f.title} failed ({c0.fail_type}); it runs eager",
                file=f.loc.file,
                line=f.loc.line,
                detail="torch.compile fell back to eager for this frame (errors are suppressed or the frame was skipped).",
                evidence=[f"{c.compile_id}: {_first(c.fail_reason, 300)}" for c in failed[:5]],
                fix="Read the reason above; run once with torch._dynamo.config.suppress_errors = False to see the full "
                "error, and fix or isolate the failing code (torch.compiler.disable on the offending function).",
                rank=RANK_RECOMPILES - 50,
            )
        )
    return out


RULES = (
    rule_recompile_limit,
    rule_limit_approaching,
    rule_shape_recompiles,
    rule_scalar_recompiles,
    rule_other_guards,
    rule_compile_failures,
)
