"""Joining a Python process that ctmon did not start (``--pid``).

What is checked before the job is touched (join_target.py: ``check_joinable``): the
process exists, is this user's (or we are root), is CPython, runs no ctmon
agent already, and can be traced (a debugger, ``kernel.yama.ptrace_scope``).
Each refusal is one line that says what to do.

How the agent gets in (join_inject.py: ``inject``): ``gdb -batch -p PID`` stops the
process for a moment, maps one page into it, writes a short piece of Python
there and hands it to ``Py_AddPendingCall`` with ``PyRun_SimpleString`` as
the function (called by the addresses ctmon reads from /proc/PID/maps and
the libraries' ELF dynamic symbols, so gdb reads no symbols while the job
is stopped; by gdb's own symbol lookup where that reading fails): CPython's main thread runs it at its next safe point (between
two bytecodes, holding the GIL), after gdb has let the process go. That code
puts ctmon's parent directory on ``sys.path`` just long enough to import
ctmon/agent/join.py, which connects to the supervisor's socket like a
launched job's agent. Python 3.14's ``sys.remote_exec`` would be a second
branch of ``inject``; it is not used yet.

:class:`JoinedJob` is the supervisor's side: the job is not ctmon's child
(its output and exit status are not ctmon's), and the supervisor ends when
the job exits or the user leaves -- then the agent takes its hooks out.
"""

from __future__ import annotations

import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ctmon.launch.adopted_job import AdoptedJob
from ctmon.launch.join_inject import bootstrap_code, inject
from ctmon.wire import events as E
from ctmon.wire.event_base import Event

if TYPE_CHECKING:
    from ctmon.launch.intake import Intake

# How long the supervisor waits for the agent: the main thread runs the
# pending call at its next bytecode, so a job blocked in one long C call
# (input(), a sleep, a collective) joins when that call returns.
JOIN_TIMEOUT_S = 60.0
LEAVE_TIMEOUT_S = 10.0  # the agent leaves at its next flush (a quarter of a second)


class JoinedJob(AdoptedJob):
    """A running process ctmon joined: watched through a pidfd like a job
    that called ctmon.install(); the agent is put in by ``join_inject.inject`` when
    the supervisor is ready for it, and taken out when the user leaves
    (SIGINT, SIGTERM or SIGHUP to the supervisor, a viewer's stop)."""

    def __init__(self, pid: int, sel: selectors.BaseSelector, emit: Callable[[Event], None]) -> None:
        super().__init__(pid, sel, emit)
        self.agents: Intake | None = None  # the agents' connections, set by the supervisor
        self.held_s: float | None = None  # how long gdb held the process
        self._asked_at = 0.0
        self._seen = False  # the agent has said hello
        self._leaving_since: float | None = None
        self._ended = False
        self._leave_signal = False

    def spawn(self, env_extra: dict[str, str]) -> None:
        super().spawn(env_extra)
        code = bootstrap_code(env_extra["CTMON_AGENT_SOCKET"], env_extra["CTMON_SESSION_DIR"])
        self.held_s = inject(self.proc.pid, code)
        self._asked_at = time.monotonic()
        message = f"joining process {self.proc.pid}: gdb held it {self.held_s:.2f} s to schedule ctmon's agent"
        self.emit(E.Note(t=time.time(), level="info", source="join", message=message))

    def install_signals(self, wake_fd: int) -> None:
        """SIGINT, SIGTERM, SIGHUP: leave the job (it runs on)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda signum, frame: self._on_signal())
        signal.set_wakeup_fd(wake_fd, warn_on_full_buffer=False)

    def _on_signal(self) -> None:
        self._leave_signal = True

    def handle_signals(self) -> None:
        if self._leave_signal and self._leaving_since is None:
            self.leave("ctmon was asked to stop")

    def leave(self, why: str) -> None:
        """Ask the agent to take its hooks out: its connection's other half is shut."""
        if self._leaving_since is not None:
            return
        self._leaving_since = time.monotonic()
        self.emit(E.Note(t=time.time(), level="info", source="join", message=f"{why}: leaving process {self.proc.pid}"))
        for a in list(getattr(self.agents, "agents", ())):
            try:
                a.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        if not self._seen:
            self._ended = True  # nothing joined yet: nothing to take out

    def check_exec(self, agent_pids: list[int | None], alive: bool) -> None:
        if self.proc.pid in agent_pids:
            self._seen = True
        elif not self._seen and self._leaving_since is None and time.monotonic() - self._asked_at > JOIN_TIMEOUT_S:
            self.emit(
                E.Note(
                    t=time.time(),
                    level="error",
                    source="join",
                    message=f"process {self.proc.pid} did not run ctmon's agent within {JOIN_TIMEOUT_S:.0f} s "
                    "(its main thread may be blocked in one long call); it was left as it was",
                )
            )
            self._ended = True
        if self._leaving_since is not None and time.monotonic() - self._leaving_since > LEAVE_TIMEOUT_S:
            self._ended = True  # the agent did not answer: the recording ends anyway

    def agent_closed(self, pid: int | None) -> None:
        if pid == self.proc.pid and self._seen:
            self._ended = True  # it left (asked, or on its own), or the job ended

    def exited(self) -> bool:
        return self._ended or super().exited()

    # a viewer's controls: a stop leaves the job, a signal or typed line is refused

    def stop(self, grace: object) -> None:
        self.leave("a viewer asked to stop")

    def _refuse(self, what: str) -> None:
        if self._refused:
            return
        self._refused = True
        message = f"a viewer's {what} was not passed on: ctmon joined this job and does not signal it or type into it"
        self.emit(E.Note(t=time.time(), level="warning", source="ctmon", message=message))
