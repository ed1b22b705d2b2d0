"""Compile budgets for CI: ``--fail-on 'recompiles>2'``.

A budget is ``METRIC OP NUMBER``; it is broken when the comparison holds for
the run, e.g. ``recompiles>2`` breaks when there were 3 or more recompiles.
Broken budgets make ctmon exit 3 (unless the job itself failed: its own
non-zero exit code wins).

A gate fails closed on a capture gap. When the job's logging set-up switched
PyTorch's trace logger off and a compile started before ctmon switched it
back on (a ``capture`` note at level warning, see ctmon/agent/trace.py), the
compile counts are lower than the truth by an unknown amount: the lost
compile may be exactly the recompile the budget is there to catch. Passing
with a warning would let CI go green on a number ctmon knows to be wrong, so
every budget on a compile-derived metric fails with a line saying why; step
metrics (read from the step ring, which the logger does not carry) are still
checked normally. A gap in which no compile started (level info) loses
nothing and gates nothing.

A gate fails closed on an incomplete recording too. When the disk kept
events out of the recording to the end of the run, every count read from it
(compiles and steps alike) may be short, so every budget not already broken
is unverified: ``ctmon record`` then exits ``RECORDING_EXIT`` (4), not 3, so
that CI can tell "the run broke a budget" from "ctmon could not keep what it
needed to judge" (retry on a disk with room); the job's own non-zero exit
code still wins over both. The file says so itself: ctmon ends it with an
error note of source ``recording`` (``recording_notes``) where the disk left
room, so ``ctmon report --fail-on`` on it fails as well (exit 3, as any
failed budget there). Without a gate, ``ctmon record`` exits as the job did,
incomplete recording or not, and says what is missing on stderr.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from ctmon.report.model import Note, Noted, Report, steps_of

BUDGET_EXIT = 3
RECORDING_EXIT = 4  # a gate's budgets unverified: the recording is incomplete or unreadable

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}


def _findings(severity: str) -> Callable[[Report], float]:
    return lambda r: float(sum(1 for f in r.get("findings") or [] if f.get("severity") == severity))


METRICS: dict[str, Callable[[Report], float | None]] = {
    "recompiles": lambda r: r["compile"]["recompiles"],
    "compiles": lambda r: r["compile"]["compiles"],
    "graph_breaks": lambda r: r["compile"]["graph_breaks"],
    "graph_break_sites": lambda r: len(r.get("graph_breaks") or []),
    "limit_hits": lambda r: r["compile"]["limit_hits"],
    "compile_failures": lambda r: r["compile"]["failures"],
    "compile_time_s": lambda r: r["compile"]["total_time_s"],
    "fx_cache_misses": lambda r: r["cache"]["fx_graph"]["miss"],
    "aot_cache_misses": lambda r: r["cache"]["aot_autograd"]["miss"],
    "cache_bypasses": lambda r: r["cache"]["fx_graph"]["bypass"] + r["cache"]["aot_autograd"]["bypass"],
    "critical_findings": _findings("critical"),
    "warning_findings": _findings("warning"),
    "p50_ms": lambda r: steps_of(r)["p50_ms"],
    "p90_ms": lambda r: steps_of(r)["p90_ms"],
    "steps": lambda r: steps_of(r)["count"],
}

# Counted from the step ring, not from PyTorch's trace logger.
STEP_METRICS = frozenset({"p50_ms", "p90_ms", "steps"})
CAPTURE_SOURCE = "capture"  # ctmon.agent.trace.CAPTURE_SOURCE (the report layer never imports the agent)
RECORDING_SOURCE = "recording"  # ctmon.launch.supervisor.RECORDING_SOURCE: the note ending an incomplete recording

_EXPR = re.compile(r"^\s*([a-z_0-9]+)\s*(>=|<=|==|!=|>|<)\s*(-?\d+(?:\.\d+)?)\s*$")


class BudgetError(ValueError):
    pass


@dataclass(frozen=True)
class Budget:
    metric: str
    op: str
    limit: float
    text: str

    def check(self, report: Report) -> tuple[bool, float | None]:
        value = METRICS[self.metric](report)
        if value is None:
            return False, None
        return _OPS[self.op](float(value), self.limit), float(value)


def parse(text: str) -> Budget:
    m = _EXPR.match(text)
    if not m:
        raise BudgetError(f"bad --fail-on '{text}': expected METRIC OP NUMBER, e.g. 'recompiles>2'")
    metric, op, num = m.groups()
    if metric not in METRICS:
        raise BudgetError(f"bad --fail-on '{text}': unknown metric '{metric}' (metrics: {', '.join(METRICS)})")
    return Budget(metric, op, float(num), text.strip())


def capture_notes(report: Noted) -> list[Note]:
    """The notes that say compile capture was off for a while."""
    return [n for n in report.get("notes") or [] if isinstance(n, dict) and n.get("source") == CAPTURE_SOURCE]


def capture_lost(report: Noted) -> bool:
    """Compile events are (or may be) missing from this run."""
    return any(n.get("level") != "info" for n in capture_notes(report))


def recording_notes(report: Noted) -> list[Note]:
    """The note that ends a recording the disk kept events from (empty: none)."""
    return [n for n in report.get("notes") or [] if isinstance(n, dict) and n.get("source") == RECORDING_SOURCE]


def capture_lines(report: Noted, quiet: bool = False, incomplete_notes: bool = True) -> list[str]:
    """What `record` and `report` print about capture gaps, and about a
    recording that says it is incomplete (warnings even when quiet;
    ``incomplete_notes=False``: the caller says that itself)."""
    out = []
    notes = capture_notes(report) + (recording_notes(report) if incomplete_notes else [])
    for n in notes:
        if n.get("level") == "info" and quiet:
            continue
        msg = _CONTROL.sub("?", str(n.get("message") or ""))[:600]  # a recording is anyone's bytes
        out.append(f"{'note' if n.get('level') == 'info' else 'warning'}: {msg}")
    return out


def incomplete_line(path: str, events: int, steps: int, reason: str) -> str:
    """What `record` says of a recording the disk kept events from."""
    return (
        f"recording {_CONTROL.sub('?', path)} is INCOMPLETE: {events} events ({steps} steps) "
        f"could not be written: {reason}"
    )


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def broken(budgets: list[Budget], report: Report, incomplete: str | None = None) -> list[str]:
    """One message per broken budget, or per budget a capture gap or an
    incomplete recording leaves unverified (``incomplete``: why the recording
    is, when the caller knows; else its note says)."""
    out = []
    lost = capture_lost(report)
    if incomplete is None and recording_notes(report):
        incomplete = "see its note"
    for b in budgets:
        hit, value = b.check(report)
        shown = f"{value:g}" if value is not None else "?"
        if hit:
            out.append(f"budget broken: {b.metric} = {shown} (fails when {b.metric} {b.op} {b.limit:g})")
        elif incomplete is not None:
            out.append(
                f"budget unverified: {b.metric} = {shown} counts only what the recording holds, and it is "
                f"incomplete ({incomplete}); failing rather than passing on a wrong count"
            )
        elif lost and b.metric not in STEP_METRICS:
            out.append(
                f"budget unverified: {b.metric} = {shown} counts only the compiles ctmon saw, and the job's "
                "logging configuration hid some from it (see the capture note); failing rather than passing "
                "on a wrong count"
            )
    return out
