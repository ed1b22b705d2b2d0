"""What a run does not say by itself: a job that failed, graphs that hold nothing.

* a job that exited non-zero: the exception's last line and where it was
  raised, read from the traceback the job printed on stderr (the output
  events); a job killed by a signal says which;
* compiles whose graphs captured no operation at all: Dynamo ran, but every
  call runs the original Python -- the model runs eager;
* torch.compile called and nothing ever compiled (the compiled object was
  never called, or Dynamo was disabled).

Frames with empty graphs next to frames that captured ops are normal (hook
wrappers, dataclass constructors, code up to a graph break whose work goes
on in the frames Dynamo compiles next), so only a run where nothing was
captured is a finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ctmon.findings.library_breaks import by_design, package_of
from ctmon.findings.model import RANK_LIMIT, RANK_RECOMPILES, Finding, Fix, code_fix
from ctmon.words.phrases import cut
from ctmon.words.signal_notes import PASSED_ON

if TYPE_CHECKING:
    from ctmon.store.compiles import Frame
    from ctmon.store.output import OutputLine
    from ctmon.store.session import Session
    from ctmon.wire import events as E

_HEADER = "Traceback (most recent call last):"
_FILE = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<")
_INTERRUPT_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
_COMPILER_ERRORS = ("torch._dynamo.", "torch._inductor.", "BackendCompilerFailed", "InternalTorchDynamoError")
_SIGNALS = {
    "SIGKILL": "usually the kernel's out-of-memory killer or a scheduler's limit",
    "SIGSEGV": "a crash in native code (an extension, a driver, or a PyTorch bug)",
    "SIGABRT": "an abort in native code (a failed assertion in an extension or PyTorch)",
    "SIGBUS": "a crash in native code (often shared memory running out: /dev/shm)",
}
# The note the supervisor records each time it signals the job (ctmon/launch/job.py:
# Job.signal_job), and the reason it gives for a signal it only passed on.
_SENT = re.compile(r"^sent (?P<signal>SIG[A-Z0-9+]+) to the job \((?P<reason>.+)\)$")


@dataclass(frozen=True)
class SentSignal:
    signal: str  # SIGKILL
    reason: str  # "Ctrl-C twice", "q → Stop", or PASSED_ON

    @property
    def passed_on(self) -> bool:
        """ctmon received it and passed it on (its sender is not known), rather than chose to send it."""
        return self.reason == PASSED_ON

    def text(self) -> str:
        """``ctmon sent SIGKILL (Ctrl-C twice)``."""
        return (
            f"ctmon passed on the {self.signal} it received"
            if self.passed_on
            else f"ctmon sent {self.signal} ({self.reason})"
        )


def signal_sent_by_ctmon(s: Session, signal: str | None = None) -> SentSignal | None:
    """The last signal ctmon's supervisor sent the job (that one signal, when named)."""
    for note in reversed(s.notes):
        m = _SENT.match(note.message) if note.source == "ctmon" else None
        if m is not None and (signal is None or m.group("signal") == signal):
            return SentSignal(m.group("signal"), m.group("reason"))
    return None


@dataclass
class TraceFrame:
    file: str
    line: int
    fn: str
    code: str | None = None

    @property
    def library(self) -> bool:
        return is_library(self.file)

    def text(self) -> str:
        return f"{self.file}:{self.line} in {self.fn}" + (f": `{self.code}`" if self.code else "")


@dataclass
class Exc:
    line: str  # the exception's last line: "RuntimeError: loss went bad"
    frames: list[TraceFrame] = field(default_factory=list)

    @property
    def raised_at(self) -> TraceFrame | None:
        return self.frames[-1] if self.frames else None

    @property
    def user_frame(self) -> TraceFrame | None:
        """The innermost frame in the user's own code (not site-packages, the stdlib or <string>)."""
        return next((f for f in reversed(self.frames) if not f.library), None)


def is_library(path: str) -> bool:
    return any(m in path for m in _LIBRARY) or path.startswith("<")


def last_exception(lines: list[OutputLine]) -> Exc | None:
    """The last traceback on stderr, as Python prints it (chained ones end with the one that propagated)."""
    err = [x.text for x in lines if x.stream == "stderr"]
    start = next((i for i in range(len(err) - 1, -1, -1) if err[i].strip() == _HEADER), None)
    if start is None:
        return None
    frames: list[TraceFrame] = []
    for text in err[start + 1 :]:
        m = _FILE.match(text)
        if m:
            frames.append(TraceFrame(m.group("file"), int(m.group("line")), m.group("fn").strip()))
        elif text[:1].isspace():
            code = text.strip()
            if frames and frames[-1].code is None and code and set(code) - set("^~ "):
                frames[-1].code = code  # the source line; carets and tildes only point into it
        elif text.strip():
            return Exc(text.strip(), frames)
    return None


def rule_job_failed(s: Session) -> list[Finding]:
    ex = s.exit
    if ex is None or ex.status == 0 or not ex.known:
        return []  # (not known: a job ctmon did not start ended; its own output says how)
    series = s.steps.current
    steps = max(0, len(series) - 1) if series is not None else 0
    when = f"after {steps} step{'s' if steps != 1 else ''}" if steps else "before any step completed"
    exc = last_exception(list(s.output.lines))
    how = f"exited with code {ex.code}" if ex.code is not None else f"was killed by {ex.signal}"
    sent = signal_sent_by_ctmon(s, ex.signal) if ex.signal else None
    if sent is not None and not sent.passed_on:
        return [_stopped_by_ctmon(sent, when, exc)]
    passed_on = f" ctmon received {ex.signal} and passed it on to the job." if sent is not None else ""
    if ex.signal in _INTERRUPT_SIGNALS or (exc is not None and exc.line.startswith("KeyboardInterrupt")):
        return [
            Finding(
                id="job-failed:interrupted",
                rule="job-failed",
                severity="info",
                title=f"The job was interrupted {when}" + (f" ({ex.signal})" if ex.signal else ""),
                detail=f"It {how}; the findings cover the run up to the interruption.{passed_on}",
                evidence=[exc.line] if exc else [],
                fix="Nothing to fix if the interruption was intended.",
            )
        ]
    if exc is not None and "ChildFailedError" in exc.line and s.ranks:
        return []  # the launcher's own traceback: the rank-failed finding says which rank, and how
    if exc is not None:
        top, user = exc.raised_at, exc.user_frame
        where = user or top
        detail = f"It {how} {when}."
        if top is not None:
            detail += f" The exception was raised at {top.file}:{top.line} in {top.fn}"
            detail += f", called from {user.file}:{user.line}." if user is not None and user is not top else "."
        compiler = any(m in exc.line for m in _COMPILER_ERRORS)
        fix = (
            "Fix the error the traceback names; the other findings describe the run up to it. The full traceback "
            "is in the recording's output (ctmon replay, Output pane)."
        )
        if compiler:
            fix = (
                'torch.compile raised it: rerun with TORCH_LOGS="+dynamo" (or TORCH_TRACE and tlparse) to see the '
                "failing graph; torch._dynamo.config.suppress_errors = True makes the failing frame run eager "
                "instead of stopping the job, and torch.compiler.disable on the offending function keeps it out "
                "of the graph."
            )
        return [
            Finding(
                id="job-failed:exception",
                rule="job-failed",
                severity="critical",
                title=f"The job failed: {cut(exc.line, 200)}",
                file=where.file if where else None,
                line=where.line if where else None,
                detail=detail,
                evidence=[f.text() for f in exc.frames[-6:]] + [cut(exc.line, 500)],
                fix=fix,
                rank=RANK_LIMIT + 100,
            )
        ]
    last = next(
        (x.text.strip() for x in reversed(list(s.output.lines)) if x.stream == "stderr" and x.text.strip()), None
    )
    if ex.signal:
        why = _SIGNALS.get(ex.signal, "sent by another process or the system")
        if sent is not None:  # a signal sent to ctmon, for the job: ctmon cannot tell by whom
            why = "sent to ctmon by another process or the system; ctmon passed it on to the job, as it passes on "
            why += "every signal the job would have received without ctmon"
        return [
            Finding(
                id=f"job-failed:{ex.signal}",
                rule="job-failed",
                severity="critical",
                title=f"The job was killed by {ex.signal} {when}",
                detail=f"{ex.signal} was {why}." if sent is not None else f"{ex.signal} is {why}.",
                evidence=[f"last line on stderr: {cut(last, 300)}"] if last else [],
                fix=(
                    f"Find who sent {ex.signal} to ctmon (a scheduler's notice, timeout -s, a kill by hand); if the job "
                    "should live through it, handle it in the job (signal.signal)."
                    if sent is not None
                    else "If memory ran out, the samples show it: lower the batch size, or free memory between steps; "
                    "check the system log (dmesg) or the scheduler's log for who sent the signal."
                ),
                rank=RANK_LIMIT + 100,
            )
        ]
    return [
        Finding(
            id="job-failed:exit-code",
            rule="job-failed",
            severity="warning",
            title=f"The job exited with code {ex.code} {when}",
            detail="It printed no traceback: the script (or a library) chose this exit status.",
            evidence=[f"last line on stderr: {cut(last, 300)}"] if last else [],
            fix="See the job's output for why it stopped.",
            rank=RANK_RECOMPILES,
        )
    ]


def _stopped_by_ctmon(sent: SentSignal, when: str, exc: Exc | None) -> Finding:
    """ctmon itself sent the signal the job ended by (a viewer's Ctrl-C, kill or
    stop): say so, rather than send the user looking for another culprit."""
    killed = sent.signal == "SIGKILL"
    return Finding(
        id="job-failed:stopped-by-ctmon",
        rule="job-failed",
        # a SIGKILL shows in the end-of-run summary: the job could not clean up
        severity="warning" if killed else "info",
        title=f"The job was stopped by ctmon ({sent.reason}: {sent.signal}) {when}",
        detail=(
            f"ctmon sent the job the {sent.signal} it ended by ({sent.reason}); no other process stopped it"
            + (
                " (not the out-of-memory killer). SIGKILL cannot be caught: the job had no chance to save or clean up."
                if killed
                else "."
            )
            + " The findings cover the run up to the stop."
        ),
        evidence=[exc.line] if exc else [],
        fix=(
            "Nothing to fix if the stop was intended. To let the job save first, stop it with one Ctrl-C, or q → "
            "Stop with a grace long enough for its handler (ctmon attach --stop-grace)."
            if killed
            else "Nothing to fix if the stop was intended."
        ),
        rank=RANK_RECOMPILES if killed else 0.0,
    )


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


def _ddp_compiled_nothing(s: Session, frames: list[Frame]) -> E.CompileCall | None:
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


def _ddp_finding(s: Session, call: E.CompileCall, n: int, cost: float, frames_said: list[str]) -> Finding:
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


def _ddp_evidence(s: Session, call: E.CompileCall) -> list[str]:
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


def _ddp_code_fix(call: E.CompileCall) -> Fix:
    """_ddp_fix as data: the change at the line that compiles (the user's line into accelerate)."""
    mine = call.called_from
    file, line = (mine.file, mine.line) if mine is not None else (call.file, call.line)
    if package_of(call.file) == "accelerate":
        return code_fix(
            "model = torch.compile(model) before accelerator.prepare(model, ...), dynamo_backend='no'", file, line
        )
    return code_fix("model = DDP(torch.compile(model))", file, line)


def _ddp_fix(call: E.CompileCall) -> str:
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
                detail="torch._dynamo.config.disable was set when torch.compile was called, so it compiled nothing.",
                evidence=evidence,
                fix="Unset TORCHDYNAMO_DISABLE (or torch._dynamo.config.disable) to compile.",
                rank=RANK_RECOMPILES - 50,
            )
        ]
    library = any((c.target_module or "").startswith("transformers.") for c in cs.calls)
    fix = (
        "Call the object torch.compile returned (`out = compiled(x)`), or compile the method that does the work: "
        "`model.forward = torch.compile(model.forward)`."
    )
    if library:
        fix += (
            " For transformers' generate(): set a static cache, `model.generation_config.cache_implementation = "
            '"static"`; on a GPU generate() then compiles the model\'s forward itself (its options go in '
            "`model.generation_config.compile_config`)."
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


def rule_no_process_reported(s: Session) -> list[Finding]:
    """ctmon ran the job and no process of it ever said hello: the command
    started no Python program ctmon could hook (a shell script that runs a
    binary, a Python started with -I or -S, a container launched from it)."""
    if s.exit is None or s.meta.mode not in ("record", "attach") or s.processes or s.ranks:
        return []
    cmd = " ".join(s.meta.command)[:200] or "the job"
    return [
        Finding(
            id="no-process-reported",
            rule="no-process-reported",
            severity="warning",
            title="No Python process of the job reported to ctmon: nothing it compiled could be seen",
            detail=(
                f"ctmon ran `{cmd}`, and none of its processes loaded ctmon's hook. ctmon reaches a job's Python "
                "processes through PYTHONPATH (a sitecustomize): a command that runs no Python, starts it isolated "
                "(python -I, -S, -E), replaces its environment, or runs it in a container does not get it."
            ),
            evidence=[f"command: {cmd}", f"exit: {s.exit.status}"],
            fix=(
                "Give ctmon the Python program or its launcher itself (ctmon record -- torchrun ... train.py, "
                "ctmon record train.py), or keep PYTHONPATH for the Python processes the command starts."
            ),
            rank=50,
        )
    ]


RULES = (rule_job_failed, rule_empty_graphs, rule_never_compiled, rule_no_process_reported)
