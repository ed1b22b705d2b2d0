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
from collections.abc import Iterable
from dataclasses import dataclass

_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)(?:\s*\((SIG\w+)\))?")
_HOST = re.compile(r"^\s*host\s*:\s*(\S+)")
_ROOT = "Root Cause (first observed failure):"


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
            out[r] = RankFailure(r, local, int(m.group(1)), int(m.group(2)), m.group(3), host, root)
            rank = None
    return sorted(out.values(), key=lambda f: (not f.first, f.rank))
