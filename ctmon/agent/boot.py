"""Starts the agent inside the monitored job.

The supervisor runs the job as plain ``python SCRIPT ARGS`` or ``python -m
MODULE ARGS`` with ``ctmon/agent/site`` first on PYTHONPATH; that directory's
``sitecustomize`` calls :func:`start` before any user code runs. Everything a
script can observe -- ``sys.argv``, ``sys.path[0]``, ``__main__``,
tracebacks, ``inspect.stack()``, the exit code, death by SIGINT, zip apps --
is therefore python's own: no ctmon frame is ever on the job's stack.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctmon.agent.core import Agent

_started = False


def running() -> bool:
    """Whether this process has an agent already (launched, installed or joined)."""
    return _started


def start(
    pending: bool = False, socket_path: str | None = None, session_dir: str | None = None, joined: bool = False
) -> Agent | None:
    """Connect to the supervisor and install the hooks; never raises.

    Once per process image: a second import of the hook (user code that
    imports ``sitecustomize`` again) finds the agent running. A *pending*
    agent (a child that may still become a rank: ctmon/agent/pending.py)
    connects only once it knows its rank, and keeps what it saw until then.

    A launched job finds its supervisor in its environment; a *joined* one
    (ctmon/agent/join.py) is told where it is, and says nothing on the
    job's streams: they are the job's alone."""
    global _started
    path = socket_path or os.environ.get("CTMON_AGENT_SOCKET")
    if not path or _started:
        return None
    _started = True
    if session_dir is None:
        session_dir = os.environ.get("CTMON_SESSION_DIR")
    filled = [] if joined else _fill_free_std_fds()
    agent = None
    try:
        from ctmon.agent.channel import connect
        from ctmon.agent.core import Agent
        from ctmon.agent.torch_hooks import watch_torch_import

        if pending:
            from ctmon.agent.pending import start_pending

            agent = start_pending(path, session_dir)
        else:
            sock = connect(path)
            if sock is None:
                if joined:
                    _started = False  # a process ctmon could not join may be joined again
                else:
                    sys.stderr.write("ctmon: could not reach the monitor; running without it\n")
                return None
            agent = Agent(sock)
            agent.joined = joined
            agent.start(session_dir)
        watch_torch_import(agent)
        agent.hook_exec()  # events queued before an os.execv are sent first
        # Registered before any user code: runs after the job's own handlers.
        atexit.register(agent.close)
    except Exception as exc:  # never keep the job from running
        if not joined:
            sys.stderr.write(f"ctmon: hook disabled ({type(exc).__name__}: {exc})\n")
    finally:
        for fd in filled:
            os.close(fd)
    return agent


def _fill_free_std_fds() -> list[int]:
    """A job started with fd 0, 1 or 2 closed must find it closed: while the
    agent opens its socket and step ring (mmap keeps a dup of its fd), those
    numbers hold /dev/null, and are closed again afterwards."""
    filled = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            filled.append(fd)
    return filled
