"""A finding: what is wrong, where in the user's code, the evidence, and the fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctmon.wire.events_compile import StackFrame

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


# The kinds of fix a finding carries as data (``Finding.fixes``): a Dynamo or
# Inductor setting, an argument of the torch.compile call, or a change to the
# code at a named line. Config and compile_arg fixes can be applied without
# editing the script (``try_arg`` is what ``ctmon bench --try`` takes); a code
# fix is for the user to make.
CONFIG, COMPILE_ARG, CODE = "config", "compile_arg", "code"
FIX_KINDS = (CONFIG, COMPILE_ARG, CODE)
FixValue = bool | int | float | str | None


@dataclass(frozen=True)
class Fix:
    """One machine-readable fix candidate; the finding's ``fix`` says it in words."""

    kind: str  # one of FIX_KINDS
    name: str = ""  # config: the setting in its module ("capture_scalar_outputs"); compile_arg: "dynamic"
    value: FixValue = None  # config / compile_arg: the value to give it
    module: str | None = None  # config: "torch._dynamo.config"
    file: str | None = None  # code: where to make the change (the user's line), when known
    line: int | None = None
    text: str = ""  # code: the change, as code where it can be ("torch._dynamo.mark_dynamic(x, 1)")

    @property
    def setting(self) -> str | None:
        """A config fix's full name: ``torch._dynamo.config.capture_scalar_outputs``."""
        return f"{self.module}.{self.name}" if self.kind == CONFIG and self.module else None

    @property
    def try_arg(self) -> str | None:
        """``NAME=VALUE`` as ``ctmon bench --try`` takes it; None for a code fix."""
        if self.kind == CONFIG and self.setting:
            return f"{self.setting}={self.value!r}"
        if self.kind == COMPILE_ARG:
            return f"{self.name}={self.value!r}"
        return None

    @property
    def code(self) -> str:
        """The fix as one line of Python (a code fix: its text)."""
        if self.kind == CONFIG:
            return f"{self.setting} = {self.value!r}"
        if self.kind == COMPILE_ARG:
            return f"torch.compile(..., {self.name}={self.value!r})"
        return self.text

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "module": self.module,
            "name": self.name or None,
            "value": self.value,
            "file": self.file,
            "line": self.line,
            "code": self.code,
            "try": self.try_arg,
        }


def config_fix(module: str, name: str, value: FixValue) -> Fix:
    return Fix(CONFIG, name, value, module=module)


def compile_arg_fix(name: str, value: FixValue) -> Fix:
    return Fix(COMPILE_ARG, name, value)


def code_fix(text: str, file: str | None = None, line: int | None = None) -> Fix:
    return Fix(CODE, file=file, line=line, text=text)


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
    # the fix as data: config settings, compile arguments, code changes (best first)
    fixes: list[Fix] = field(default_factory=list)

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
            "fixes": [f.as_dict() for f in self.fixes],
            "called_from": called_from_dict(self.called_from),
        }


def called_from_dict(frame: StackFrame | None) -> dict[str, Any] | None:
    """``{file, line, code}`` as reports give the user's line into a library."""
    if frame is None:
        return None
    return {"file": frame.file, "line": frame.line, "code": frame.code}


def order(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-SEVERITY_RANK.get(f.severity, 0), -f.rank, f.id))
