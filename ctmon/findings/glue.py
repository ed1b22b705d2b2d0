"""Eager code between graph breaks, by what it costs at run time.

A graph break is counted where it happens; what it costs is the time the
compiled frame spends in its own eager code between its graphs (the break's
``print``, ``.item()``, a function Dynamo skips) on every call. The agent
samples where the main thread is (ctmon/agent/hotness.py); a frame whose
eager code takes a tenth of the step time or more is worth un-breaking.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctmon.findings.model import RANK_BREAKS, Finding

if TYPE_CHECKING:
    from ctmon.store.session import Session

GLUE_SHARE = 0.10  # of step time, in one frame's eager code
MIN_SAMPLES = 40  # two seconds of sampling: no finding from a handful


def rule_eager_glue(s: Session) -> list[Finding]:
    h = s.hotness
    if h.samples < MIN_SAMPLES:
        return []
    out = []
    cs = s.compile
    for frame in cs.frames_sorted():
        rt = h.frame_runtime(frame)
        if rt is None or rt["glue_share"] is None or rt["glue_share"] < GLUE_SHARE:
            continue
        file = frame.code.file
        sites = [b for b in cs.breaks_sorted() if b.file == file][:5]
        evidence = [
            f"{rt['glue_share']:.0%} of step time in {frame.title}'s eager code, {rt['share']:.0%} in its graphs "
            f"({rt['samples']} of {h.samples} samples of the main thread, host time)"
        ] + [f"graph break at {b.file}:{b.line}: {b.reason}" for b in sites]
        out.append(
            Finding(
                id=f"eager-glue:{frame.title}",
                rule="eager-glue",
                severity="warning",
                title=f"Eager code between graph breaks in {frame.title} takes {rt['glue_share']:.0%} of step time",
                file=frame.loc.file,
                line=frame.loc.line,
                detail=(
                    "Between its compiled graphs the frame runs its own code eagerly on every call (the graph "
                    "breaks' print, .item() or skipped function, and everything Dynamo could not put in a graph). "
                    "That time is not optimised and splits the work into smaller graphs."
                ),
                evidence=evidence,
                fix=(
                    "Remove the graph breaks in this frame (the graph-break findings say how for each), or move "
                    "the eager work out of the step (log every N steps, keep .item() out of the forward); "
                    "torch.compile(..., fullgraph=True) makes each remaining break an error at its line."
                ),
                rank=RANK_BREAKS + 20 + rt["glue_share"] * 100,
            )
        )
    return out


RULES = (rule_eager_glue,)
