"""A loop Dynamo unrolled, recompiled for each new value of its bound."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctmon.findings import causes as C
from ctmon.findings import guards as G
from ctmon.findings.guard_advice import bound_name, fix_for, fixes_for, loop_header, values_seen
from ctmon.findings.guards import strip_comment
from ctmon.findings.model import RANK_RECOMPILES, Finding
from ctmon.findings.recompile_limits import Group, _budget, _ev, _severity

if TYPE_CHECKING:
    from ctmon.store.compiles import Frame
    from ctmon.store.session import Session
    from ctmon.wire.events_compile import Specialization


def loop_bound_finding(s: Session, frame: Frame, pairs: Group) -> Finding:
    """A loop Dynamo unrolled, recompiled for each new bound. Neither
    dynamic=True nor a tensor bound helps (PyTorch pins a dynamic bound
    again, and breaks the graph on a tensor one): the advice is what works."""
    n = len(pairs)
    g0 = pairs[0][1]
    header, bound = loop_header(g0), bound_name(g0)
    seen = values_seen(pairs, frame.limit_hit)
    pinned = _pinned_at(s, frame, g0)
    file, line = _loop_line(frame, pairs, pinned)
    if "range(" in header:
        tensor_bound = (
            "range() of a tensor breaks the graph (PyTorch's GB0059: it cannot trace builtin `range` on a Tensor)"
        )
    else:
        tensor_bound = "a loop condition on a tensor breaks the graph (PyTorch's GB0170, data-dependent branching)"
    detail = (
        f"Dynamo unrolls `{header}` into the graph, one copy of the loop's body per iteration, so each graph holds "
        f"one value of {bound} and guards on it: every new value compiles again (guard kind: {G.LOOP_BOUND}). "
        f"{bound[0].upper()}{bound[1:]} has taken {seen} values so far. "
    )
    if g0.name.startswith("___stack"):
        detail += (
            "The bound reached this frame as a Python value after a graph break before the loop, and the code "
            f"after the break guards on it: {tensor_bound}, and so does an .item(). "
        )
    else:
        detail += (
            "Making it dynamic does not help (torch.compile(..., dynamic=True), or automatic dynamic shapes after "
            "a recompile): PyTorch specialises a dynamic int again at the loop (its reason: "
            f"{C.PINNED}); and passing it as a tensor does not either: {tensor_bound}. "
        )
    if g0.hint:  # PyTorch's words stay, with what they do for a loop bound
        detail += f"Dynamo's hint for this guard: {g0.hint} "
        if "dynamic" in g0.hint or "tensor" in g0.hint:
            detail += (
                "For a loop bound neither helps: an int made dynamic is specialised again at the loop, and a "
                "tensor breaks the graph there. "
            )
    values = [g.expected for _, g in pairs if g.expected]
    evidence = [_ev(c, g) for c, g in pairs[:8]]
    if values:  # the values the failed guards held: the cached graphs', not the newest
        evidence.append(f"values of the cached graphs: {', '.join(values[:10])}")
    if pinned:
        first = pinned[0]
        evidence.append(
            f"PyTorch specialised {', '.join(first.sources) or bound} to one value at "
            f"{first.file}:{first.line} (`{strip_comment(first.code or '')}`), reason {C.PINNED}, in "
            f"{len(pinned)} compile(s): "
            + ", ".join(str(sp.compile_id) for sp in pinned[:6])
            + (" …" if len(pinned) > 6 else "")
        )
    config = s.compile.config_in_force(c.compile_id for c, _ in pairs)
    times = f"{n}×" if n >= 2 else "once"
    return Finding(
        id=f"scalar-recompiles:{frame.frame_id}:{g0.name}",
        rule="scalar-recompiles",
        severity=_severity(n, frame),
        title=f"{frame.title} recompiled {times} on the bound of `{header}`, a loop Dynamo unrolls",
        file=file,
        line=line,
        detail=(detail.strip() + (_budget(s, frame) if n >= 2 else "")),
        evidence=evidence,
        fix=fix_for(g0, config=config, seen=seen),
        fixes=fixes_for(g0, config=config, seen=seen),
        rank=RANK_RECOMPILES + n,
    )


def _pinned_at(s: Session, frame: Frame, g: G.Guard) -> list[Specialization]:
    """PyTorch's records of this bound pinned to one value at a loop header."""
    return [sp for sp in C.loop_pins(s, frame) if g.name in C.pinned_names([sp])]


def _loop_line(frame: Frame, pairs: Group, pinned: list[Specialization]) -> tuple[str | None, int | None]:
    """The loop's own line: where a guard or PyTorch's record places it."""
    for _, g in pairs:
        if g.file and g.code and G.loop_header(g.code) is not None:
            return g.file, g.line
    if pinned and pinned[0].file:
        return pinned[0].file, pinned[0].line
    g0 = pairs[0][1]
    return (g0.file, g0.line) if g0.file else (frame.loc.file, frame.loc.line)
