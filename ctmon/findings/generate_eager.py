"""generate() that ran eager on a model the job compiled.

``cmodel = torch.compile(model)`` compiles what ``cmodel(...)`` runs. A
Hugging Face ``generate()`` -- ``model.generate()``, and ``cmodel.generate()``
too, which the compiled wrapper hands to the original module -- calls the
original module's forward once per token: every decode step runs eager, and
nothing in PyTorch's own trace says so. The agent tells such calls
(ctmon/agent/generation.py: ``eager`` generation events); this rule names
them where the job compiled that model, with the change that compiles what
generate() calls (tests/test_findings_generate_eager.py applies it: the finding goes
and generate()'s forward calls are compiled calls).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctmon.findings.model import RANK_COST, Finding, code_fix
from ctmon.wire import events as E
from ctmon.wire import events_compile as EC

if TYPE_CHECKING:
    from ctmon.store.session import Session

WARN_S = 5.0  # eager generate() time seen, summed, from which it is a warning
DEFAULT_BACKEND = "inductor"


def rule_generate_eager(s: Session) -> list[Finding]:
    gen = s.generation
    if not gen.eager_count:
        return []
    first = gen.eager[0]
    compiled = _compile_of(s, first.model)
    if compiled is None:
        return []  # the job never compiled this model: nothing of its compile is missing here
    n, seen_s = gen.eager_count, gen.eager_seen_ms / 1000
    name = first.model_name or "model"
    fix = _fix_code(name, compiled)
    where = f"{compiled.file or '?'}:{compiled.line}" if compiled.line is not None else (compiled.file or "?")
    return [
        Finding(
            id="generate-eager",
            rule="generate-eager",
            severity="warning" if seen_s >= WARN_S else "info",
            title=(
                f"{n} generate() call{'s' if n != 1 else ''} on {first.model} ran eager "
                f"(≥ {seen_s:.1f} s): torch.compile({compiled.target or '?'}) does not compile what generate() calls"
            ),
            file=first.file,
            line=first.line,
            detail=(
                f"{compiled.target or 'The model'} was compiled at {where}, and the compiled object runs compiled "
                "code only when it is itself called. generate() calls the original module's forward once per "
                "token -- through model.generate() and through the compiled wrapper's .generate() alike -- so "
                "every prefill and decode step of these calls ran eager: no compiled graph was called while "
                f"they ran. {seen_s:.1f} s is the time ctmon saw them run (from its first look at each, four "
                "times a second, to its end: a lower bound)."
            ),
            evidence=_evidence(gen.eager, compiled),
            fix=(
                f"Compile the forward that generate() calls, before generate(): `{fix}`. It compiles the "
                "original module's forward, which the compiled wrapper keeps running too (training through it "
                "is unchanged); dynamic=True compiles one graph for the growing sequence length instead of "
                "recompiling for each. On a GPU, transformers can compile the decode step itself: "
                '`generate(..., cache_implementation="static")` (its options in '
                "`generation_config.compile_config`); not on a CPU, where a static cache still runs eager."
            ),
            fixes=[code_fix(fix, first.file, first.line)],
            rank=RANK_COST,
        )
    ]


def _compile_of(s: Session, model: str | None) -> EC.CompileCall | None:
    """The job's torch.compile call of ``model`` (the class generate() ran
    on): of the module itself, a method of it, or a wrapper running it."""
    if not model:
        return None
    for c in s.compile.calls:
        target = c.target or ""
        if target == model or target.startswith(f"{model}.") or c.wraps == model:
            return c
    return None


def _fix_code(name: str, call: EC.CompileCall) -> str:
    """The user's change, with the options of their own compile kept."""
    args = [f"{name}.forward"]
    if call.backend and call.backend != DEFAULT_BACKEND:
        args.append(f'backend="{call.backend}"')
    if call.mode:
        args.append(f'mode="{call.mode}"')
    args.append("dynamic=True")
    return f"{name}.forward = torch.compile({', '.join(args)})"


def _evidence(calls: list[E.Generation], compiled: EC.CompileCall) -> list[str]:
    said = [
        f"torch.compile({compiled.target or '?'}) at {compiled.file or '?'}:{compiled.line}, backend "
        f"{compiled.backend or '?'}" + (f", mode {compiled.mode}" if compiled.mode else "")
    ]
    for ev in calls[:4]:
        line = f"{ev.file}:{ev.line}" if ev.file else "?"
        said.append(
            f"generate() at {line}" + (f": {ev.code}" if ev.code else "") + f" — no compiled graph called in "
            f"≥ {(ev.seen_ms or 0) / 1000:.2f} s ({ev.looks} looks)"
        )
    return said


RULES = (rule_generate_eager,)
