"""The step ring's file in the session directory, and what the user reads
where none can be made."""

from __future__ import annotations

import errno
import os
import time

from ctmon.wire import protocol
from ctmon.wire.ring import DEFAULT_CAPACITY, StepRing


def create_ring(session_dir: str) -> tuple[str, StepRing]:
    """A fresh ring file: a process that exec'd into another Python program
    keeps its pid, and its new agent must not collide with the old ring."""
    pid = os.getpid()
    for n in range(100):
        path = os.path.join(session_dir, f"steps-{pid}.ring" if n == 0 else f"steps-{pid}-{n}.ring")
        try:
            return path, StepRing.create(path, ring_capacity())
        except FileExistsError:
            continue
    raise FileExistsError(f"no free step ring name for pid {pid}")


def ring_capacity() -> int:
    """CTMON_STEP_RING_CAPACITY (a power of two, 64 .. 2^24) or the default 2^20."""
    raw = os.environ.get("CTMON_STEP_RING_CAPACITY", "")
    if raw.isdigit():
        n = int(raw)
        if 64 <= n <= 1 << 24 and n & (n - 1) == 0:
            return n
    return DEFAULT_CAPACITY


def no_ring_note(session_dir: str, error: OSError, relayed: bool) -> protocol.Event:
    """What the user reads: the ring's directory, why, what it costs, what to do."""
    where = os.path.dirname(os.path.normpath(session_dir))
    then = (
        "step boundaries go through ctmon's socket instead (a SIGKILL loses the last half-second of them)"
        if relayed
        else "step boundaries are not recorded"
    )
    if error.errno == errno.EFBIG:
        fix = "raise the file-size limit (ulimit -f)"
    elif error.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free space there or set CTMON_RUNTIME_DIR"
    else:
        fix = "set CTMON_RUNTIME_DIR to another directory"
    message = f"cannot make the step ring in {where} ({error.strerror or error}): {then}; {fix}"
    return {"kind": protocol.NOTE, "t": time.time(), "level": "warning", "source": "agent", "message": message}
