"""A minimal viewer process for the fault suite (tests/test_whole_faults.py).

It connects to a live session's viewer socket through ``SocketFeed``, folds
every event into a ``Session`` store as the TUI does, and keeps a small JSON
status file up to date (atomically, at most every 0.2 s, and once at the end):

    {"connected": true, "events": N, "first": "session", "last": "exit",
     "steps": N, "exit": STATUS|null, "output_chars": N, "max_rss_mb": X,
     "done": true}

usage: faults_viewer.py SOCKET STATUS [--detach-after N]

--detach-after N: close the connection after N events (a viewer that leaves).
Being a separate process, it can be killed (-9) or stopped (SIGSTOP) by a test.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

from ctmon.store import Session
from ctmon.wire.events import kind_of
from ctmon.read.feeds import SocketFeed


def _write(path: str, status: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(status, f)
    os.replace(tmp, path)


def main() -> None:
    sock_path, status_path = sys.argv[1], sys.argv[2]
    detach_after = int(sys.argv[sys.argv.index("--detach-after") + 1]) if "--detach-after" in sys.argv else 0
    feed = SocketFeed(sock_path)
    session = Session()
    status: dict = {"connected": True, "events": 0, "first": None, "last": None, "steps": 0, "exit": None,
                    "output_chars": 0, "max_rss_mb": 0.0, "done": False, "pid": os.getpid()}
    _write(status_path, status)
    last_write = 0.0
    for batch in feed.batches():
        for ev in batch:
            session.apply(ev)
        if status["first"] is None:
            status["first"] = kind_of(batch[0])
        status["last"] = kind_of(batch[-1])
        status["events"] += len(batch)
        now = time.monotonic()
        if now - last_write > 0.2:
            last_write = now
            _update(status, session)
            _write(status_path, status)
        if detach_after and status["events"] >= detach_after:
            break
        if session.exit is not None:
            break
    feed.close()
    _update(status, session)
    status["done"] = True
    _write(status_path, status)


def _update(status: dict, session: Session) -> None:
    cur = session.steps.current
    status["steps"] = len(cur) if cur is not None else 0
    status["exit"] = session.exit.status if session.exit is not None else None
    status["output_chars"] = session.output.total_chars
    status["output_lines"] = session.output.total_lines
    status["unknown"] = dict(session.unknown)
    status["max_rss_mb"] = _peak_rss_mb()


def _peak_rss_mb() -> float:
    """The kernel's high-water mark of this process's RSS (VmHWM; unlike
    ru_maxrss it does not carry the peak of the process that exec'd us)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024.0, 1)
    except (OSError, ValueError, IndexError):
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


if __name__ == "__main__":
    main()
