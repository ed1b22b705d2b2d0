"""Slow steps with a known cause other than a compile of this rank: the
prompt of a generate() call, another rank's compile."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctmon.findings.model import Finding

if TYPE_CHECKING:
    from ctmon.store.compiles import CompileRecord
    from ctmon.store.session import Session


def prompt_steps(s: Session, source: str | None, ks: list[int]) -> set[int]:
    """Of the slow steps ``ks``, those that run into a ``generate()`` call's
    first decode call: such a step spans the end of the call before and this
    call's prompt (its prefill, eager where only decode is compiled), not a
    token."""
    firsts = {ev.i0 for ev in s.generation.calls if ev.src == source and ev.i0 > 0 and ev.decode_calls > 0}
    return {k for k in ks if k in firsts}


def prompts_finding(series: Any, p50: float, spikes: list[tuple[int, float]]) -> Finding:
    return Finding(
        id="spikes:generate-prompt",
        rule="step-spikes",
        severity="info",
        title=f"{len(spikes)} slow step(s) began a generate() call (p50 {p50:.1f} ms)",
        detail=(
            "A step here runs from one compiled decode call to the next; the step that runs into a generate() "
            "call's first decode call also holds the end of the call before and this call's prompt (its prefill, "
            "which runs eager where only the decode step is compiled): its time is not a token's."
        ),
        evidence=[f"step {series.number(k)}: {v:.1f} ms" for k, v in sorted(spikes, key=lambda x: -x[1])[:8]],
        fix="Nothing to change for these steps: the report's time to the first token measures the prompt.",
        rank=len(spikes) / 20,
    )


def waited_for_ranks(
    s: Session, times: Any, spikes: list[tuple[int, float]]
) -> dict[int, list[tuple[int, CompileRecord]]]:
    """Slow steps of the job's own rank during which another rank compiled."""
    if not spikes or len(s.ranks) < 2:
        return {}
    theirs = [(r, c) for r, rs in sorted(s.ranks.items()) if r != s.primary_rank for c in rs.session.compile.compiles]
    out: dict[int, list[tuple[int, CompileRecord]]] = {}
    for k, _ in spikes:
        lo, hi = times[k - 1], times[k]
        inside = [(r, c) for r, c in theirs if c.span[0] < hi and c.span[1] > lo]
        if inside:
            out[k] = inside
    return out
