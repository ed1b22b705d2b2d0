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


def start() -> None:
    """Connect to the supervisor and install the hooks; never raises."""
    path = os.environ.get("CTMON_AGENT_SOCKET")
    if not path:
        return
    try:
        from ctmon.agent.channel import connect
        from ctmon.agent.core import Agent
        from ctmon.agent.torch_hooks import watch_torch_import

        sock = connect(path)
        if sock is None:
            sys.stderr.write("ctmon: could not reach the monitor; running without it\n")
            return
        agent = Agent(sock)
        agent.start(os.environ.get("CTMON_SESSION_DIR"))
        watch_torch_import(agent)
        # Registered before any user code: runs after the job's own handlers.
        atexit.register(agent.close)
    except Exception as exc:  # never keep the job from running
        sys.stderr.write(f"ctmon: hook disabled ({type(exc).__name__}: {exc})\n")

