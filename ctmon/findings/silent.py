"""What a run does not say by itself: a job that failed, or started no
Python ctmon could see.

* a job that exited non-zero: the exception's last line and where it was
  raised, read from the traceback the job printed on stderr (the output
  events); a job killed by a signal says which;
* a job none of whose processes reported to ctmon.

What ran eager though torch.compile was called (empty graphs, nothing
compiled) is ran_eager.py's; its rules are listed here too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ctmon.findings.model import RANK_LIMIT, RANK_RECOMPILES, Finding
from ctmon.findings.pages import TROUBLESHOOTING_PAGE
from ctmon.findings.ran_eager import (
    is_library,
    rule_empty_graphs,
    rule_never_compiled,
)
from ctmon.words.phrases import cut
from ctmon.words.signal_notes import PASSED_ON

if TYPE_CHECKING:
    from ctmon.store.output import OutputLine
    from ctmon.store.session import Session

_HEADER = "Traceback (most recent call last):"
_FILE = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')
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
        if compiler:  # what is known: the fix depends on the error, which ctmon does not know how to fix
            fix = (
                'torch.compile raised it. TORCH_LOGS="+dynamo" (or TORCH_TRACE and tlparse) shows the graph it was '
                "compiling; PyTorch's troubleshooting page says how to narrow each kind of compiler error down (the "
                "minifier, torch._dynamo.config.suppress_errors, torch.compiler.disable): "
                f"{TROUBLESHOOTING_PAGE}. The full traceback is in the recording's output (ctmon replay, Output pane)."
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
                # what is known: ctmon does not see who sent a signal, nor why
                fix=(
                    f"ctmon cannot tell who sent {ex.signal} to it (a scheduler's notice, timeout -s, a kill by hand): "
                    "the sender's own log says. A job that must live through it has to handle the signal itself "
                    "(signal.signal)."
                    if sent is not None
                    else f"ctmon cannot tell who sent {ex.signal}: the system log (dmesg, where the out-of-memory "
                    "killer names the process it killed) or the scheduler's log says; the recording's memory samples "
                    "show whether memory was running out before it."
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


def rule_no_process_reported(s: Session) -> list[Finding]:
    """ctmon ran the job and no process of it ever said hello: the command
    started no Python program ctmon could hook (a shell script that runs a
    binary, a Python started with -I or -S, a container launched from it)."""
    if s.exit is None or s.meta.mode not in ("record", "attach") or s.processes or s.ranks:
        return []
    cmd = " ".join(s.meta.command)[:200] or "the job"
    said = _hook_said(s)
    if said is not None:
        return [_hook_did_not_start(cmd, said, s)]
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


# What ctmon's hook writes on the job's stderr when it cannot start in a
# process (ctmon/agent/boot.py, agent/site/sitecustomize.py).
_HOOK_LINES = ("ctmon: hook disabled (", "ctmon: could not reach the monitor")


def _hook_said(s: Session) -> str | None:
    """The first line the hook wrote in the job's output saying it did not start
    (among the lines the store keeps: the output's last MAX_LINES)."""
    for line in s.output.lines:
        if line.text.startswith(_HOOK_LINES):
            return line.text[:300]
    return None


def _hook_did_not_start(cmd: str, said: str, s: Session) -> Finding:
    """No process reported, and the job's own output says why: the hook did not start."""
    assert s.exit is not None
    return Finding(
        id="no-process-reported",
        rule="no-process-reported",
        severity="warning",
        title="ctmon's hook did not start in the job: nothing it compiled could be seen",
        detail=(
            f"ctmon ran `{cmd}`, and its Python process said why the hook did not start: `{said}`. "
            "The job ran on without it, as it would without ctmon."
        ),
        evidence=[f"command: {cmd}", f"the job's output: {said}", f"exit: {s.exit.status}"],
        fix=f"The cause is the one the job's own line names: {said}",
        rank=50,
    )


RULES = (rule_job_failed, rule_empty_graphs, rule_never_compiled, rule_no_process_reported)
