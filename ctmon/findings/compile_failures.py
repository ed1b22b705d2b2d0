"""Frames Dynamo failed to compile (the recompile limit aside, recompiles.py).

A failed frame runs eager -- unless it is a wrapper (a library's hook
wrapper, say) whose calls Dynamo then compiled as frames of their own: the
model's work is compiled and only the wrapper's own code is not, which is
worth knowing but not a warning.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING

from ctmon.findings.model import RANK_RECOMPILES, Finding
from ctmon.findings.pages import TROUBLESHOOTING_PAGE
from ctmon.findings.recompile_limits import first_line

if TYPE_CHECKING:
    from ctmon.store.compiles import CompileRecord, Frame
    from ctmon.store.session import Session


def rule_compile_failures(s: Session) -> list[Finding]:
    out = []
    for f in s.compile.frames.values():
        failed = [c for c in f.compiles if not c.ok and not c.limit_hit]
        if not failed:
            continue
        c0 = failed[0]
        inner = [] if any(c.ok for c in f.compiles) else _compiled_inside(s, f, c0)
        if inner:
            # a wrapper Dynamo gave up on (a library's hook wrapper, say):
            # the calls inside it are frames of their own and compiled
            names = ", ".join(sorted({g.title for g in inner})[:4])
            severity = "info"
            title = f"Compiling {f.title} failed ({c0.fail_type}); the code it calls still compiled ({names})"
            detail = (
                "Dynamo gave up on this frame and runs it eager, then compiled the functions it calls as frames "
                f"of their own ({names}): the model's work is compiled; only this frame's own code runs eager."
            )
        else:
            severity = "warning"
            title = f"Compiling {f.title} failed ({c0.fail_type}); it runs eager"
            detail = "torch.compile fell back to eager for this frame (errors are suppressed or the frame was skipped)."
        out.append(
            Finding(
                id=f"compile-failed:{f.frame_id}",
                rule="compile-failures",
                severity=severity,
                title=title,
                file=f.loc.file,
                line=f.loc.line,
                detail=detail,
                evidence=[f"{c.compile_id}: {first_line(c.fail_reason, 300)}" for c in failed[:5]],
                fix=(
                    "Nothing is needed for the model's speed: its work compiles in the frames named above. The "
                    "reason above is usually also a graph break with a finding of its own; removing it lets this "
                    "frame compile too."
                    if inner
                    else "Read the reason above; run once with torch._dynamo.config.suppress_errors = False to see "
                    "the full error, and fix or isolate the failing code (torch.compiler.disable on the offending "
                    f"function). PyTorch's troubleshooting guide: {TROUBLESHOOTING_PAGE}"
                ),
                rank=RANK_RECOMPILES - 50,
            )
        )
    return out


def _compiled_inside(s: Session, failed: Frame, c0: CompileRecord) -> list[Frame]:
    """Frames that compiled operations right after ``failed``'s failed
    compile, before the next step boundary: the calls made inside it."""
    series = s.steps.current
    times = series.times if series is not None else []
    nxt = times[bisect_right(times, c0.t)] if bisect_right(times, c0.t) < len(times) else float("inf")
    return [
        g
        for g in s.compile.frames.values()
        if g is not failed and any(c.ok and c.graph_ops and c0.span[0] <= c.span[0] < nxt for c in g.compiles)
    ]


RULES = (rule_compile_failures,)
