"""A finding: what is wrong, where in the user's code, the evidence, and the fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctmon.wire.events import StackFrame

SEVERITIES = ("info", "warning", "critical")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}

# Findings of one severity are ordered by rank, highest first. Each rule adds
# its own count (recompiles, breaks ...) to its tier, so within a severity the
# costliest kinds of problem come first: a frame that recompiles every step
# stalls the loop more than a graph break splits it, and both cost more than
# a cache miss at start-up.
RANK_LIMIT = 1000
RANK_RECOMPILES = 500
RANK_LATE = 450
RANK_BREAKS = 400
RANK_SPIKES = 350
RANK_GPU = 300
RANK_CACHE = 200
RANK_COST = 100


@dataclass
class Finding:
    id: str  # stable across runs of the same code: "<rule>:<what>"
    rule: str  # recompile-limit, shape-recompiles, scalar-recompiles, guard-recompiles, graph-breaks, ...
    severity: str
    title: str
    file: str | None = None
    line: int | None = None
    detail: str = ""  # why it matters, in a sentence or two
    evidence: list[str] = field(default_factory=list)  # the events behind it
    fix: str = ""  # the concrete change, naming the API
    rank: float = 0.0  # orders findings of equal severity (higher first)
    called_from: StackFrame | None = None  # file:line in a library: the user's own line that leads there
    # The argument a shape fix names as Dynamo saw it (kwargs['pixel_values']):
    # with the user's line known, the fix names the user's own expression.
    argument: str | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "rule": self.rule,
            "severity": self.severity,
            "title": self.title,
            "file": self.file,
            "line": self.line,
            "detail": self.detail,
            "evidence": self.evidence,
            "fix": self.fix,
            "called_from": called_from_dict(self.called_from),
        }


def called_from_dict(frame: StackFrame | None) -> dict[str, Any] | None:
    """``{file, line, code}`` as reports give the user's line into a library."""
    if frame is None:
        return None
    return {"file": frame.file, "line": frame.line, "code": frame.code}


def order(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-SEVERITY_RANK.get(f.severity, 0), -f.rank, f.id))
