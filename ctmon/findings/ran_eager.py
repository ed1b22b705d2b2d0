"""What ran eager though torch.compile was called: compiles whose graphs
captured no operation at all (Dynamo ran, but every call runs the original
Python), and torch.compile called with nothing ever compiled (the compiled
object was never called, or Dynamo was disabled).

Frames with empty graphs next to frames that captured ops are normal (hook
wrappers, dataclass constructors, code up to a graph break whose work goes
on in the frames Dynamo compiles next), so only a run where nothing was
captured is a finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctmon.findings.library_breaks import by_design, package_of
from ctmon.findings.model import RANK_RECOMPILES, Finding, Fix, code_fix
from ctmon.words.phrases import cut

if TYPE_CHECKING:
    from ctmon.store.compiles import Frame
    from ctmon.store.session import Session
    from ctmon.wire import events_compile as EC

_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<")


def is_library(path: str) -> bool:
    return any(m in path for m in _LIBRARY) or path.startswith("<")


def all_empty(s: Session) -> bool:
    """Dynamo compiled something, and no graph holds an operation."""
    done = [c for c in s.compile.compiles if c.ok and c.graph_ops is not None]
    return bool(done) and not any(c.graph_ops for c in done) and not s.compile.bwd_compiles


def rule_empty_graphs(s: Session) -> list[Finding]:
    if not all_empty(s):
        return []
    frames = [f for f in s.compile.frames_sorted() if any(c.ok and c.graph_ops == 0 for c in f.compiles)]
    n = len(frames)
    cost = sum(f.time_s for f in frames)
    breaks = sum(c.graph_breaks for f in frames for c in f.compiles)
    evidence = []
    for f in frames[:8]:
        why = next((r for c in f.compiles for r in c.restarts), None)
        evidence.append(
            f"{f.title} at {f.loc.text()}: {len(f.compiles)} compile(s), 0 ops"
            + (f" (restarted after: {cut(why.splitlines()[0], 160)})" if why else "")
        )
    ddp = _ddp_compiled_nothing(s, frames)
    if ddp is not None:
        return [_ddp_finding(s, ddp, n, cost, evidence)]
    if n == 1:
        title = f"{frames[0].title} compiled to an empty graph: it runs eager"
    else:
        title = f"torch.compile captured no operation in {n} frames: the code runs eager"
    return [
        Finding(
            id="empty-graphs",
            rule="empty-graphs",
            severity="warning",
            title=title,
            file=frames[0].loc.file if frames else None,
            line=frames[0].loc.line if frames else None,
            detail=(
                f"Dynamo compiled {n} frame{'s' if n != 1 else ''} ({cost:.2f} s) but no graph holds a tensor "
                "operation, so every call runs the original Python: there is no speed-up to expect."
                + (f" {breaks} graph break(s) split the code before any operation was captured." if breaks else "")
            ),
            evidence=evidence,
            fix=(
                "See the graph breaks: a break at the top of the function leaves nothing to capture. Check that the "
                "tensor work is inside what you compiled (not in a function marked torch.compiler.disable, NumPy code, "
                "or a method of the original module — torch.compile(model) compiles model.forward only, so "
                "model.generate() or model.other() run uncompiled)."
            ),
            rank=RANK_RECOMPILES - 60,
        )
    ]


_DDP = "DistributedDataParallel"


def _ddp_compiled_nothing(s: Session, frames: list[Frame]) -> EC.CompileCall | None:
    """The ``torch.compile(DDP(model))`` call that explains empty graphs:
    DDP's forward is excluded from Dynamo on purpose, so Dynamo compiles the
    module under it as a frame of its own -- and only if that module's
    forward is not PyTorch's own code (``nn.Sequential``'s is). A module of the
    user's is compiled, so its empty graphs have another cause."""
    for c in s.compile.calls:
        ddp = c.target == _DDP or (c.target or "").startswith(f"{_DDP}.")  # DDP(model).compile(): _call_impl
        if not ddp or not (c.target_module or "").startswith("torch.nn.parallel"):
            continue
        if c.wraps_module is not None:
            inner_is_pytorchs = c.wraps_module.startswith("torch.")
        else:  # a recording made before the call said what DDP wraps: no frame of the user's own compiled
            inner_is_pytorchs = all(f.code.file and is_library(f.code.file) for f in frames)
        if inner_is_pytorchs:
            return c
    return None


def covered_by_empty_graphs(s: Session, design_key: str) -> bool:
    """Whether the empty-graphs finding already tells the cause behind
    PyTorch's intended breaks of this kind (one finding per cause)."""
    if design_key != "ddp" or not all_empty(s):
        return False
    frames = [f for f in s.compile.frames_sorted() if any(c.ok and c.graph_ops == 0 for c in f.compiles)]
    return _ddp_compiled_nothing(s, frames) is not None


def _ddp_finding(s: Session, call: EC.CompileCall, n: int, cost: float, frames_said: list[str]) -> Finding:
    inner = call.wraps or "model"
    if call.wraps:
        why = f"{inner}'s forward is PyTorch's ({call.wraps_module}), so no operation was compiled"
    else:  # a recording made before the call said what DDP wraps
        why = "No frame of the module under DDP was compiled (its forward is PyTorch's own, as nn.Sequential's is)"
    mine = call.called_from  # a library (accelerate's prepare()) made the call: the user's line into it
    return Finding(
        id="empty-graphs:ddp",
        rule="empty-graphs",
        severity="warning",
        title=f"torch.compile(DDP({inner})) compiled nothing of the model: it runs eager",
        file=mine.file if mine is not None else call.file,
        line=mine.line if mine is not None else call.line,
        detail=(
            "DistributedDataParallel's forward is excluded from Dynamo on purpose: Dynamo compiles the module DDP "
            "runs as a frame of its own, and only if that module's forward is not PyTorch's own code. "
            f"{why}: the {n} frame{'s' if n != 1 else ''} Dynamo compiled ({cost:.2f} s) are DDP's bookkeeping, "
            "with empty graphs, and every step runs eager."
        ),
        evidence=_ddp_evidence(s, call) + frames_said,
        fix=_ddp_fix(call),
        fixes=[_ddp_code_fix(call)],
        rank=RANK_RECOMPILES - 60,
    )


def _ddp_evidence(s: Session, call: EC.CompileCall) -> list[str]:
    """The call, and DDP's intended breaks (their own finding is left out: one finding per cause)."""
    mine = call.called_from
    said = [
        f"torch.compile({_DDP}) at {call.file or '?'}:{call.line}"
        + (f", DDP wrapping {call.wraps} ({call.wraps_module})" if call.wraps else "")
        + (f", called from {mine.file}:{mine.line}" if mine is not None else "")
    ]
    sites = [b for b in s.compile.breaks.values() if (d := by_design(b)) is not None and d.key == "ddp"]
    sites.sort(key=lambda b: (-b.count, b.file or "", b.line or 0))
    said += [f"DDP's bookkeeping breaks the graph at {b.file}:{b.line} ×{b.count}: {b.reason}" for b in sites[:4]]
    return said


def _ddp_code_fix(call: EC.CompileCall) -> Fix:
    """_ddp_fix as data: the change at the line that compiles (the user's line into accelerate)."""
    mine = call.called_from
    file, line = (mine.file, mine.line) if mine is not None else (call.file, call.line)
    if package_of(call.file) == "accelerate":
        return code_fix(
            "model = torch.compile(model) before accelerator.prepare(model, ...), dynamo_backend='no'", file, line
        )
    return code_fix("model = DDP(torch.compile(model))", file, line)


def _ddp_fix(call: EC.CompileCall) -> str:
    if package_of(call.file) == "accelerate":  # its prepare() compiles what it wrapped
        return (
            "accelerate made this call in prepare() (its dynamo_backend): it compiles DDP(model). Compile the model "
            "yourself before prepare(), `model = torch.compile(model)`, then `accelerator.prepare(model, ...)`, and "
            'leave accelerate\'s dynamo_backend at "no": accelerate then wraps the compiled model, '
            "DDP(torch.compile(model)), and Dynamo compiles it."
        )
    return (
        "Compile the module, then wrap the compiled one: `model = DDP(torch.compile(model))`. Dynamo still splits "
        "the graph at DDP's gradient buckets in this form, so the all-reduce overlaps the backward (DDPOptimizer, "
        "torch._dynamo.config.optimize_ddp). Or keep torch.compile(DDP(model)) with a module of your own under DDP "
        "(a class whose forward you wrote): Dynamo compiles that forward."
    )


def rule_never_compiled(s: Session) -> list[Finding]:
    """torch.compile was called and the job ended without a single compile:
    what it returned was never called (``torch.compile(model).generate()``
    runs the original module), or Dynamo was switched off."""
    cs = s.compile
    if not cs.calls or cs.compile_count or s.exit is None:
        return []
    first = cs.calls[0]
    evidence = [
        f"torch.compile({c.target or '?'}) at {c.file or '?'}:{c.line}, backend {c.backend or '?'}"
        + (f", mode {c.mode}" if c.mode else "")
        for c in cs.calls[:8]
    ]
    if any(c.dynamo_disabled for c in cs.calls):
        return [
            Finding(
                id="never-compiled:disabled",
                rule="never-compiled",
                severity="warning",
                title="torch.compile was called but Dynamo is disabled: the job ran eager",
                file=first.file,
                line=first.line,
                detail=(
                    "Dynamo was disabled when torch.compile was called (torch._dynamo.config.disable, which "
                    "TORCH_COMPILE_DISABLE=1 sets, or TORCHDYNAMO_DISABLE=1), so it compiled nothing."
                ),
                evidence=evidence,
                fix="Unset TORCHDYNAMO_DISABLE and TORCH_COMPILE_DISABLE (torch._dynamo.config.disable) to compile.",
                rank=RANK_RECOMPILES - 50,
            )
        ]
    library = any((c.target_module or "").startswith("transformers.") for c in cs.calls)
    fix = (
        "Call the object torch.compile returned (`out = compiled(x)`), or compile the method that does the work "
        "itself: `model.encode = torch.compile(model.encode)` for a method `encode`; for generate(), whose work is "
        "the forward, `model.forward = torch.compile(model.forward)`."
    )
    if library:  # what is known: transformers' own compile of generate() needs a GPU to show
        fix += (
            " transformers can also compile generate()'s forward itself, on a GPU, with a static cache "
            '(`model.generation_config.cache_implementation = "static"`, options in '
            "`model.generation_config.compile_config`): https://huggingface.co/docs/transformers/en/llm_optims"
        )
    return [
        Finding(
            id="never-compiled",
            rule="never-compiled",
            severity="warning",
            title="torch.compile was called but nothing was compiled: the job ran eager",
            file=first.file,
            line=first.line,
            detail=(
                f"{cs.call_count} torch.compile call(s) and not one compile: what torch.compile returned was never "
                "called. A method reached through the compiled wrapper (`compiled.generate(...)`, "
                "`compiled.encode(...)`) runs the original module: the wrapper compiles only its own call (forward)."
            ),
            evidence=evidence,
            fix=fix,
            rank=RANK_RECOMPILES - 50,
        )
    ]
