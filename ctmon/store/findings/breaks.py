"""Graph breaks, grouped by cause, each site at the user's file:line, with the fix.

A break in code that runs every step costs every step (the graph is split, and
the Python in between runs eagerly); a break met once (set-up, a final
evaluation) costs once. The first kind ranks above the second: a break counts
as "in the loop" when Dynamo met it before the last step boundary of the run.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from ctmon.store.findings.model import Finding

if TYPE_CHECKING:
    from ctmon.store.compiles import BreakSite
    from ctmon.store.session import Session

LOGGING, SCALAR_OUT, BRANCH, DYN_SHAPE, NUMPY, CALL, OTHER = (
    "logging", "scalar-output", "data-dependent-branch", "dynamic-shape-op", "numpy", "unsupported-call", "other")

TITLES = {
    LOGGING: "Graph breaks on logging / print",
    SCALAR_OUT: "Graph breaks on .item() / .tolist()",
    BRANCH: "Graph breaks on data-dependent branches",
    DYN_SHAPE: "Graph breaks on operators with data-dependent output shapes",
    NUMPY: "Graph breaks on NumPy calls",
    CALL: "Graph breaks on calls Dynamo cannot trace",
    OTHER: "Graph breaks",
}

FIXES = {
    LOGGING: ("Move the print/log call out of the compiled function (log the returned tensors after the call), or let "
              "Dynamo defer it: torch._dynamo.config.reorderable_logging_functions.add(print) (works for print and "
              "logging functions whose arguments are constants or tensors); for logging.Logger methods, "
              "torch._dynamo.config.ignore_logging_functions.add(logger.info) drops the call under compile."),
    SCALAR_OUT: ("Keep the value a tensor: replace `t.item()` with tensor ops (`torch.where`, broadcasting, `t.clamp`); "
                 "if a Python number is truly needed, set torch._dynamo.config.capture_scalar_outputs = True so .item() "
                 "is captured in the graph as a symbolic value instead of splitting it."),
    BRANCH: ("Make the branch tensor code: `y = torch.where(cond, a, b)` computes both sides without leaving the graph; "
             "for expensive or side-effecting branches use torch.cond(pred, true_fn, false_fn, (operands,)). "
             "Branch on Python values (shapes, flags) instead of tensor values where you can."),
    DYN_SHAPE: ("Set torch._dynamo.config.capture_dynamic_output_shape_ops = True so nonzero()/unique()/masked "
                "indexing stay in the graph, or rewrite with fixed-shape ops (torch.where with a mask, padding)."),
    NUMPY: ("Use the torch equivalent of the NumPy call (torch.sin, torch.linalg, torch.random …) on the tensor, so it "
            "stays in the graph; convert to NumPy only outside the compiled function."),
    CALL: ("Wrap the call as a custom operator (torch.library.custom_op) so Dynamo treats it as one opaque op in the "
           "graph, or — if it is traceable Python — allow it: torch.compiler.allow_in_graph(fn). Calls with side effects "
           "only (timers, pids) can move outside the compiled function."),
    OTHER: "See PyTorch's explanation and hints for this break (the link in the evidence), and the source line.",
}


def category(site: BreakSite) -> str:
    summary = (site.reason or "").lower()
    full = " ".join(x for x in (site.reason, site.detail, site.explanation) if x).lower()
    if "print" in summary or "logging" in summary or "logging function" in full or "warnings.warn" in full or "_warnings.warn" in full:
        return LOGGING
    if "item()" in summary or "tolist" in summary or "capture_scalar_outputs" in full:
        return SCALAR_OUT
    if "data-dependent branching" in summary or "data dependent branch" in full or "generic_jump" in full:
        return BRANCH
    if "dynamic shape operator" in summary or "capture_dynamic_output_shape_ops" in full:
        return DYN_SHAPE
    if "numpy" in full or "ndarray" in full:
        return NUMPY
    if "marked as skipped" in summary or "unsupported" in summary or "builtin" in full or "custom op" in full:
        return CALL
    return OTHER


def in_loop(s: Session, site: BreakSite) -> bool:
    series = s.steps.current
    if series is None or len(series) < 2:
        return False
    last = series.times[-1]
    return site.first_t <= last


def rule_graph_breaks(s: Session) -> list[Finding]:
    groups: dict[str, list[BreakSite]] = defaultdict(list)
    for site in s.compile.breaks.values():
        groups[category(site)].append(site)
    out = []
    for cat, sites in groups.items():
        looped = [b for b in sites if in_loop(s, b)]
        sites.sort(key=lambda b: (b not in looped, -b.count, b.file or "", b.line or 0))
        top = sites[0]
        total = sum(b.count for b in sites)
        evidence = []
        for b in sites[:10]:
            where = f"{b.file}:{b.line}" if b.file else "?"
            when = "in the loop" if b in looped else "outside the step loop"
            code = ""
            if b.user_stack and b.user_stack[-1].get("code"):
                code = f"  `{b.user_stack[-1]['code']}`"
            evidence.append(f"{where} ×{b.count} ({when}): {b.reason}{code}")
        if len(sites) > 10:
            evidence.append(f"… and {len(sites) - 10} more sites")
        if top.url:
            evidence.append(f"PyTorch: {top.url}")
        n_sites = len(sites)
        out.append(Finding(
            id=f"graph-breaks:{cat}",
            rule="graph-breaks",
            severity="warning" if looped else "info",
            title=f"{TITLES[cat]}: {n_sites} site{'s' if n_sites != 1 else ''}, {total} break{'s' if total != 1 else ''}",
            file=top.file, line=top.line,
            detail=("Each break splits the graph: the code around it runs eagerly between two compiled graphs, "
                    "on every step where the break is in the loop, and fusion across it is lost."
                    if looped else "Met outside the step loop: it costs once, not every step."),
            evidence=evidence, fix=FIXES[cat],
            rank=(1000 if looped else 0) + total,
        ))
    return out


RULES = (rule_graph_breaks,)
