"""The supervisor's registry entry: ``session.json`` in the session directory,
what ``ctmon watch`` lists (ctmon/launch/runtime.py reads it).

Written atomically (a temporary file renamed into place), 0600, when the job
starts, every ``REGISTRY_INTERVAL_S`` while it runs, and once it has exited.
"""

from __future__ import annotations

import json
import os
import time

from ctmon.store import ExitInfo, Session
from ctmon.wire import protocol

REGISTRY_INTERVAL_S = 2.0  # how often session.json is refreshed


class Registry:
    def __init__(
        self, session_dir: str, session_id: str, mode: str, command: list[str], cwd: str, recording: str
    ) -> None:
        self.path = os.path.join(session_dir, "session.json")
        self.fixed = {
            "id": session_id,
            "command": command,
            "cwd": cwd,
            "recording": os.path.abspath(recording),
            "mode": mode,
        }
        # The counts and the state come from the events as they are recorded.
        self.session = Session()
        self.job_pid: int | None = None
        self.tcp: str | None = None
        self._next = 0.0

    def apply(self, ev: protocol.Event) -> None:
        self.session.apply(ev)

    @property
    def exit(self) -> ExitInfo | None:
        return self.session.exit

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + REGISTRY_INTERVAL_S
        return True

    def write(self, state: str) -> None:
        sess = self.session
        f = self.fixed
        info = {
            "id": f["id"],
            "state": sess.state if state == "running" else state,
            "supervisor_pid": os.getpid(),
            "job_pid": self.job_pid,
            "command": f["command"],
            "cwd": f["cwd"],
            "start": sess.meta.start_t,
            "updated": time.time(),
            "recording": f["recording"],
            "mode": f["mode"],
            "steps": sess.steps.count,
            "compiles": sess.compile.compile_count,
            "recompiles": sess.compile.recompile_count,
            "graph_breaks": sess.compile.graph_break_count,
            "tcp": self.tcp,
        }
        if sess.exit is not None:
            info["exit_status"] = sess.exit.status
        try:
            tmp = self.path + ".tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fp:
                json.dump(info, fp)
            os.replace(tmp, self.path)
        except OSError:
            pass
