"""Which rank failed, as the launcher tells it.

A rank is the launcher's child, not ctmon's: when one dies (an exception, the
kernel's out-of-memory killer, a scheduler's limit) only the launcher sees its
exit status. torchrun (and what wraps it: accelerate, deepspeed's launcher in
torchrun mode) prints it when it gives up, on stderr, before its own
``ChildFailedError`` traceback::

    Root Cause (first observed failure):
    [0]:
      time      : 2026-11-25_13:37:33
      host      : localhost
      rank      : 1 (local_rank: 1)
      exitcode  : -9 (pid: 25718)  (SIGKILL)
      error_file: <N/A>
      traceback : Signal 9 (SIGKILL) received by PID 25718

(and the same under ``Failures:`` for the others). Read from the job's output.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass

_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)(?:\s*\((SIG\w+)\))?")
_HOST = re.compile(r"^\s*host\s*:\s*(\S+)")
_TRACEBACK_SIGNAL = re.compile(r"^\s*traceback\s*:\s*Signal \d+ \((SIG\w+)\)")
_ROOT = "Root Cause (first observed failure):"
# NCCL's watchdog, on the rank whose collective timed out (torch's ProcessGroupNCCL):
#   [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=26, OpType=ALLREDUCE, ...,
#   Timeout(ms)=10000) ran for 10075 milliseconds before timing out.
_WATCHDOG = re.compile(r"\[Rank (\d+)\] Watchdog caught collective operation timeout")
_OP = re.compile(r"OpType=(\w+)")
_TIMEOUT_MS = re.compile(r"Timeout\(ms\)=(\d+)")


@dataclass
class RankFailure:
    rank: int
    local_rank: int
    exit_code: int  # negative: killed by that signal
    pid: int
    signal: str | None  # SIGKILL, SIGTERM, ...
    host: str | None
    first: bool  # torchrun's "root cause": the first failure it observed


def rank_failures(stderr: Iterable[str]) -> list[RankFailure]:
    """The failures in the last summary the launcher printed."""
    out: dict[int, RankFailure] = {}
    root = False
    host: str | None = None
    rank: tuple[int, int] | None = None
    last: int | None = None  # the rank of the failure read last (its traceback line follows)
    for line in stderr:
        if line.startswith("Failures:") or line.strip() == _ROOT:
            root = line.strip() == _ROOT
            host, rank = None, None
            continue
        m = _HOST.match(line)
        if m:
            host = m.group(1)
            continue
        m = _RANK.match(line)
        if m:
            rank = (int(m.group(1)), int(m.group(2)))
            continue
        m = _EXIT.match(line)
        if m and rank is not None:
            r, local = rank
            code = int(m.group(1))
            out[r] = RankFailure(r, local, code, int(m.group(2)), m.group(3), host, root)
            rank, last = None, r
            continue
        m = _TRACEBACK_SIGNAL.match(line)
        if m and last is not None and out[last].signal is None:
            out[last].signal = m.group(1)
    for f in out.values():
        f.signal = f.signal or _signal_name(f.exit_code)
    return sorted(out.values(), key=lambda f: (not f.first, f.rank))


def _signal_name(exit_code: int) -> str | None:
    """A negative exit code is the signal that ended the process (newer
    torchrun prints its name only on the traceback line)."""
    if exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return None


@dataclass
class CollectiveTimeout:
    rank: int
    op: str | None  # ALLREDUCE, ALLGATHER, ...
    timeout_s: float | None


def collective_timeouts(stderr: Iterable[str]) -> dict[int, CollectiveTimeout]:
    """The collectives NCCL's watchdog saw time out, by rank (the first of each)."""
    out: dict[int, CollectiveTimeout] = {}
    for line in stderr:
        if "Watchdog caught collective operation timeout" not in line:
            continue
        m = _WATCHDOG.search(line)
        if m is None or int(m.group(1)) in out:
            continue
        op, ms = _OP.search(line), _TIMEOUT_MS.search(line)
        r = int(m.group(1))
        out[r] = CollectiveTimeout(r, op.group(1) if op else None, int(ms.group(1)) / 1000 if ms else None)
    return out
