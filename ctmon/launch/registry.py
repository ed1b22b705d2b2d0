"""The supervisor's registry entry: ``session.json`` in the session directory,
what ``ctmon watch`` lists (ctmon/launch/runtime.py reads it).

Written atomically (a temporary file renamed into place), 0600, when the job
starts, every ``REGISTRY_INTERVAL_S`` while it runs, and once it has exited.
"""

from __future__ import annotations

import json
import os
import time

from ctmon.store import ExitInfo
from ctmon.wire import events as E
from ctmon.wire import events_compile as EC
from ctmon.wire.event_base import Event
from ctmon.wire.protocol import STEP_RANK

REGISTRY_INTERVAL_S = 2.0  # how often session.json is refreshed
# ctmon.agent.trace.CAPTURE_SOURCE: a note saying compile capture was off a while
CAPTURE_SOURCE = "capture"
MAX_CAPTURE_NOTES = 100


class RunCounts:
    """What ``ctmon watch`` lists about a live job, counted off the events as
    they are recorded (the supervisor folds no store: the viewers do that).
    ``ctmon record -q`` ends with these too: it reads nothing back."""

    def __init__(self) -> None:
        self.start_t: float | None = None
        self.compiles = 0
        self.recompiles = 0
        self.graph_breaks = 0
        self.exit: ExitInfo | None = None
        self._active: set[str | None] = set()  # compiles started, not finished
        self._src = -1  # the step clock: the best-ranked source seen (as the store picks it)
        self._steps = 0
        self.capture_notes: list[E.Note] = []  # what `record -q` still warns about

    def count(self, ev: Event) -> None:
        kind = type(ev)
        if kind is E.Steps:
            assert isinstance(ev, E.Steps)
            rank = STEP_RANK.get(ev.src, -1)
            if rank > self._src:
                self._src, self._steps = rank, 0
            if rank == self._src:
                self._steps = max(self._steps, ev.i0 + len(ev.ns))
        elif kind is EC.CompileStart:
            assert isinstance(ev, EC.CompileStart)
            self._active.add(ev.compile_id)
        elif kind is EC.Compile:
            assert isinstance(ev, EC.Compile)
            self._active.discard(ev.compile_id)
            self.compiles += 1
            self.recompiles += bool(ev.recompile_reason)
        elif kind is EC.GraphBreak:
            self.graph_breaks += 1
        elif kind is E.Note:
            assert isinstance(ev, E.Note)
            if ev.source == CAPTURE_SOURCE and len(self.capture_notes) < MAX_CAPTURE_NOTES:
                self.capture_notes.append(ev)
        elif kind is E.SessionStart:
            if self.start_t is None:
                self.start_t = ev.t
        elif kind is E.Exit:
            assert isinstance(ev, E.Exit)
            self.exit = ExitInfo(ev.code, ev.signal or None, ev.t)

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def state(self) -> str:
        if self.exit is not None:
            return "exited"
        if self._active:
            return "compiling"
        return "running" if self._steps or self.compiles else "starting"


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
        self.counts = RunCounts()
        self.job_pid: int | None = None
        self.tcp: str | None = None
        self._next = 0.0

    def count(self, ev: Event) -> None:
        self.counts.count(ev)

    @property
    def exit(self) -> ExitInfo | None:
        return self.counts.exit

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + REGISTRY_INTERVAL_S
        return True

    def write(self, state: str) -> None:
        c = self.counts
        f = self.fixed
        info = {
            "id": f["id"],
            "state": c.state if state == "running" else state,
            "supervisor_pid": os.getpid(),
            "job_pid": self.job_pid,
            "command": f["command"],
            "cwd": f["cwd"],
            "start": c.start_t,
            "updated": time.time(),
            "recording": f["recording"],
            "mode": f["mode"],
            "steps": c.steps,
            "compiles": c.compiles,
            "recompiles": c.recompiles,
            "graph_breaks": c.graph_breaks,
            "tcp": self.tcp,
        }
        if c.exit is not None:
            info["exit_status"] = c.exit.status if c.exit.known else None
        try:
            tmp = self.path + ".tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fp:
                json.dump(info, fp)
            os.replace(tmp, self.path)
        except OSError:
            pass
