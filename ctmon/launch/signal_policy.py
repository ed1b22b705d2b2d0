"""What the supervisor does with each signal whose default action would end it.

ctmon stands where the job would stand: a signal sent to ctmon's process is
one the job would have received without ctmon. So every such signal is
either passed on to the job (which then ends, or not, as it would have), or,
where it can only be about ctmon's own process, ignored with a note. Either
way ctmon lives on until the job ends, and the recording ends with the
job's ``exit`` event. (SIGKILL cannot be caught: nothing can be done there.)

| signals | what ctmon does | why |
|---|---|---|
| SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO (SIGPOLL), SIGPWR, SIGSTKFLT, real-time signals | passed on to the job | ctmon arms no timer, no async I/O and uses none of them itself: one that reaches it was sent (`kill`, a scheduler, `timeout -s`) for the job |
| SIGINT, SIGQUIT | `record`: ignored; `attach`: passed on | `record` shares the terminal's process group with the job, so Ctrl-C and Ctrl-\\ reach the job directly; the detached supervisor has no terminal, so one sent to it was meant for the job |
| SIGXCPU, SIGXFSZ | ignored, with a note (once each) | the kernel sends them for ctmon's own CPU time and file size limits (the job has its own); ignored, a write past the size limit fails instead (EFBIG) and the recorder holds what it could not write |
| SIGPIPE | ignored (python's own setting) | a reader that went away is handled where ctmon writes (BrokenPipeError: see Job._reader_gone) |
| SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS, SIGABRT | default | a fault in ctmon's own process: a handler cannot resume the faulting code (it would fault again, forever) |
"""

from __future__ import annotations

import signal


def _signals(*names: str) -> tuple[int, ...]:
    """The named signals this platform has (SIGPWR, SIGSTKFLT are Linux's)."""
    return tuple(int(getattr(signal, n)) for n in names if hasattr(signal, n))


def _realtime() -> tuple[int, ...]:
    low, high = getattr(signal, "SIGRTMIN", None), getattr(signal, "SIGRTMAX", None)
    return tuple(range(int(low), int(high) + 1)) if low is not None and high is not None else ()


# Passed on to the job in both modes (see the table above).
FORWARDED = (
    _signals(
        "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGIO", "SIGPWR", "SIGSTKFLT"
    )
    + _realtime()
)
# Ctrl-C and Ctrl-\: passed on by the detached supervisor only.
KEYBOARD = _signals("SIGINT", "SIGQUIT")
# About ctmon's own process: ignored, each with a note saying so.
IGNORED = {
    int(getattr(signal, name)): why
    for name, why in (
        ("SIGXCPU", "ctmon's own CPU time limit (ulimit -t); the job has its own"),
        ("SIGXFSZ", "ctmon's own file size limit (ulimit -f): a write past it fails instead"),
    )
    if hasattr(signal, name)
}


def forwarded(mode: str) -> tuple[int, ...]:
    """The signals passed on to the job by a supervisor in this mode."""
    return FORWARDED + (KEYBOARD if mode == "attach" else ())


def signal_name(sig: int) -> str:
    """SIGTERM, SIGRTMIN+3: `kill -l`'s names (python names only SIGRTMIN and SIGRTMAX)."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        low = getattr(signal, "SIGRTMIN", None)
        if low is not None and sig > int(low):
            return f"SIGRTMIN+{sig - int(low)}"
        return f"signal {sig}"


def signal_number(name: str) -> int | None:
    """The inverse of ``signal_name`` (None for a name this platform lacks)."""
    base, plus, offset = name.partition("+")
    sig = getattr(signal, base, None) if base.startswith("SIG") else None
    if sig is None:
        return None
    if not plus:
        return int(sig)
    return int(sig) + int(offset) if offset.isdigit() else None
