"""Compile budgets for CI: ``--fail-on 'recompiles>2'``.

A budget is ``METRIC OP NUMBER``; it is broken when the comparison holds for
the run, e.g. ``recompiles>2`` breaks when there were 3 or more recompiles.
Broken budgets make ctmon exit 3 (unless the job itself failed: its own
non-zero exit code wins).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BUDGET_EXIT = 3

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt,
}


def _findings(severity: str) -> Callable[[dict[str, Any]], float]:
    return lambda r: float(sum(1 for f in r.get("findings") or [] if f.get("severity") == severity))


METRICS: dict[str, Callable[[dict[str, Any]], float | None]] = {
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
    "p50_ms": lambda r: r["steps"]["p50_ms"],
    "p90_ms": lambda r: r["steps"]["p90_ms"],
    "steps": lambda r: r["steps"]["count"],
}

_EXPR = re.compile(r"^\s*([a-z_0-9]+)\s*(>=|<=|==|!=|>|<)\s*(-?\d+(?:\.\d+)?)\s*$")


class BudgetError(ValueError):
    pass


@dataclass(frozen=True)
class Budget:
    metric: str
    op: str
    limit: float
    text: str

    def check(self, report: dict[str, Any]) -> tuple[bool, float | None]:
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


def broken(budgets: list[Budget], report: dict[str, Any]) -> list[str]:
    """One message per broken budget."""
    out = []
    for b in budgets:
        hit, value = b.check(report)
        if hit:
            shown = f"{value:g}" if value is not None else "?"
            out.append(f"budget broken: {b.metric} = {shown} (fails when {b.metric} {b.op} {b.limit:g})")
    return out
