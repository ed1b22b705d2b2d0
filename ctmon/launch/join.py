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
launched job's agent. A CPython 3.14+ process is joined without gdb and
without being stopped: its own interpreter runs ``sys.remote_exec`` with
the same code in a file (join_remote.py).

:class:`JoinedJob` is the supervisor's side: the job is not ctmon's child
(its output and exit status are not ctmon's), and the supervisor ends when
the job exits or the user leaves -- then the agent takes its hooks out.
"""

from __future__ import annotations

import os
import select
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctmon.launch.adopted_job import AdoptedJob
from ctmon.launch.join_inject import Scheduled, bootstrap_code, inject
from ctmon.launch.join_target import JOINED_PIDS, JoinRefused
from ctmon.launch.runtime import alive as process_alive
from ctmon.wire import events as E
from ctmon.wire.event_base import Event

if TYPE_CHECKING:
    from ctmon.launch.intake import Intake

# How long the supervisor waits for the agent: the main thread runs the
# pending call at its next bytecode, so a job blocked in one long C call
# (input(), a sleep, a collective) joins when that call returns.
JOIN_TIMEOUT_S = 60.0
JOIN_TIMEOUT_ENV = "CTMON_JOIN_TIMEOUT_S"  # another wait, in seconds (docs/USAGE.md)
LEAVE_TIMEOUT_S = 10.0  # the agent leaves at its next flush (a quarter of a second)


def join_timeout() -> float:
    """JOIN_TIMEOUT_S, or the positive number of seconds $CTMON_JOIN_TIMEOUT_S says."""
    try:
        value = float(os.environ.get(JOIN_TIMEOUT_ENV, ""))
    except ValueError:
        return JOIN_TIMEOUT_S
    return value if 0 < value < float("inf") else JOIN_TIMEOUT_S


@dataclass
class Member:
    """One joined process: a rank of the joined job."""

    pid: int
    rank: int | None  # the rank ctmon gave it; None: its own (RANK), or it is the only one
    pidfd: int = -1
    asked_at: float = 0.0  # when its pending call was scheduled
    seen: bool = False  # its agent has said hello
    ended: bool = False  # it exited, left, or never ran the agent: nothing more to wait for
    script: str | None = None  # sys.remote_exec's file, until the process has read it


def _held_or_refusal(pid: int, code: str) -> Scheduled | JoinRefused:
    """``inject``'s result, or its refusal (on a worker thread: returned, not raised)."""
    from ctmon.launch.runtime import runtime_dir

    try:
        # sys.remote_exec's file outlives the session: a process that runs it
        # after ctmon gave up finds it, and does nothing (its socket is gone)
        return inject(pid, code, runtime_dir())
    except JoinRefused as e:
        return e


class JoinedJob(AdoptedJob):
    """The running processes ctmon joined, one job's ranks: each watched
    through a pidfd like a job that called ctmon.install(); the agent is
    put in each by ``join_inject.inject`` (one gdb per process, at once) when the
    supervisor is ready for it, and taken out of all when the user leaves
    (SIGINT, SIGTERM or SIGHUP to the supervisor, a viewer's stop). The
    session's job pid is the first process's."""

    def __init__(
        self,
        pids: int | list[int],
        sel: selectors.BaseSelector,
        emit: Callable[[Event], None],
        ranks: list[int] | None = None,
    ) -> None:
        pids = [pids] if isinstance(pids, int) else list(pids)
        super().__init__(pids[0], sel, emit)
        self.members = [Member(pid, ranks[i] if ranks else None) for i, pid in enumerate(pids)]
        self.agents: Intake | None = None  # the agents' connections, set by the supervisor
        self.held_s: float | None = None  # from the first gdb's start to the last one's end
        self.timeout_s = join_timeout()
        self._leaving_since: float | None = None
        self._leave_signal = False

    def spawn(self, env_extra: dict[str, str]) -> None:
        socket_path, session_dir = env_extra["CTMON_AGENT_SOCKET"], env_extra["CTMON_SESSION_DIR"]
        world = len(self.members) if self.members[0].rank is not None else None
        watched, failed = self._watch_exits()
        t0 = time.monotonic()
        # One gdb per process, several at once where there are cores for them:
        # ranks wait for each other in their collectives, so the job stalls
        # for the window, not one hold. gdb takes a core while it holds a
        # process: on 2 cores two at once held each process twice as long
        # (0.7-1.1 s) for the same window as one after the other (1.0-1.16 s).
        at_once = max(1, min(len(watched), (os.cpu_count() or 2) // 2))
        with ThreadPoolExecutor(max_workers=at_once) as pool:
            holds = list(
                pool.map(
                    lambda m: _held_or_refusal(m.pid, bootstrap_code(socket_path, session_dir, m.rank, world)), watched
                )
            )
        window = time.monotonic() - t0
        for m, held in zip(watched, holds, strict=True):
            if isinstance(held, JoinRefused):
                self._not_joined(m)
                failed.append(str(held))
            else:
                self._joining(m, held)
        if len(failed) == len(self.members):
            raise JoinRefused(failed[0])  # nothing was joined: every process was left as it was
        for why in failed:  # the others are joined: their recording goes on
            self.emit(E.Note(t=time.time(), level="warning", source="join", message=f"{why}; joining the others"))
        self.held_s = window
        self._write_joined_pids(session_dir)
        if len(self.members) > 1:
            joined = sum(1 for m in self.members if not m.ended)
            how = "one after the other" if at_once == 1 else f"{at_once} at once"
            debuggers = {h.by for h in holds if isinstance(h, Scheduled) and h.by != "sys.remote_exec"}
            tool = f"{' and '.join(sorted(debuggers))} held them" if debuggers else "scheduled"
            message = f"joined {joined} processes: {tool} {how}, within {window:.2f} s"
            self.emit(E.Note(t=time.time(), level="info", source="join", message=message))

    def _watch_exits(self) -> tuple[list[Member], list[str]]:
        """Each process's pidfd, opened before gdb: an exit is seen even if
        it comes at once. The processes still there, and why the others are not."""
        watched: list[Member] = []
        failed: list[str] = []
        for m in self.members:
            try:
                m.pidfd = os.pidfd_open(m.pid)
                self.sel.register(m.pidfd, selectors.EVENT_READ, ("pidfd", None))
            except (AttributeError, OSError):
                m.pidfd = -1
                if not process_alive(m.pid):
                    m.ended = True
                    failed.append(f"process {m.pid} has exited")
                    continue
            watched.append(m)
        return watched, failed

    def _joining(self, m: Member, how: Scheduled) -> None:
        m.asked_at = time.monotonic()
        m.script = how.script
        as_rank = f" (rank {m.rank})" if m.rank is not None else ""
        if how.by in ("gdb", "lldb"):
            message = (
                f"joining process {m.pid}{as_rank}: {how.by} held it {how.seconds:.2f} s to schedule ctmon's agent"
            )
        else:
            message = (
                f"joining process {m.pid}{as_rank}: sys.remote_exec scheduled ctmon's agent in {how.seconds:.2f} s "
                "(the process was not stopped)"
            )
        self.emit(E.Note(t=time.time(), level="info", source="join", message=message))

    def _not_joined(self, m: Member) -> None:
        self._close_pidfd(m)
        m.ended = True

    def _write_joined_pids(self, session_dir: str) -> None:
        """Every joined process, where ``--pid`` of another ctmon finds it joined already."""
        try:
            with open(os.path.join(session_dir, JOINED_PIDS), "w") as f:
                f.write("".join(f"{m.pid}\n" for m in self.members if not m.ended))
        except OSError:
            pass  # that check falls back on the agent's own ("monitored by ctmon already")

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
        """Ask every agent to take its hooks out: its connection's other half is shut."""
        if self._leaving_since is not None:
            return
        self._leaving_since = time.monotonic()
        pids = ", ".join(str(m.pid) for m in self.members if not m.ended) or str(self.proc.pid)
        noun = "processes" if "," in pids else "process"
        self.emit(E.Note(t=time.time(), level="info", source="join", message=f"{why}: leaving {noun} {pids}"))
        for a in list(getattr(self.agents, "agents", ())):
            try:
                a.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        for m in self.members:
            if not m.seen:
                m.ended = True  # nothing joined yet: nothing to take out

    def check_exec(self, agent_pids: list[int | None], alive: bool) -> None:
        now = time.monotonic()
        for m in self.members:
            if m.pidfd >= 0 and self._process_gone(m):
                self._member_exited(m)  # whether or not its connection closed first
            if m.ended:
                continue
            if m.pid in agent_pids:
                m.seen = True
                self._script_read(m)
            elif not m.seen and self._leaving_since is None and now - m.asked_at > self.timeout_s:
                self._never_ran(m)
            elif m.pidfd < 0 and not process_alive(m.pid):
                self._member_exited(m)
        if self._leaving_since is not None and now - self._leaving_since > LEAVE_TIMEOUT_S:
            for m in self.members:
                if not m.ended:
                    self._no_answer(m)
                m.ended = True  # an agent did not answer: the recording ends anyway

    @staticmethod
    def _script_read(m: Member) -> None:
        """sys.remote_exec's file: the agent runs, so the process has read it."""
        if m.script is not None:
            try:
                os.unlink(m.script)
            except OSError:
                pass
            m.script = None

    def _never_ran(self, m: Member) -> None:
        message = (
            f"process {m.pid} did not run ctmon's agent within {self.timeout_s:g} s "
            "(its main thread may be blocked in one long call); it was left as it was"
        )
        self.emit(E.Note(t=time.time(), level="error", source="join", message=message))
        m.ended = True

    def _no_answer(self, m: Member) -> None:
        """A process that did not take ctmon out when asked: stopped (SIGSTOP,
        a debugger), or its threads starved. Its agent finds its connection
        closed and leaves when the process runs again."""
        message = (
            f"process {m.pid} did not answer within {LEAVE_TIMEOUT_S:g} s (is it stopped?); "
            "ctmon leaves it when it runs again"
        )
        self.emit(E.Note(t=time.time(), level="info", source="join", message=message))

    def _process_gone(self, m: Member) -> bool:
        if m.pidfd >= 0:
            ready, _, _ = select.select([m.pidfd], [], [], 0)
            return bool(ready)
        return not process_alive(m.pid)

    def _member_exited(self, m: Member) -> None:
        """One of several processes exited: the others go on being recorded.
        Its agent's connection closes too (agent_closed): the note is said once."""
        self._close_pidfd(m)
        m.ended = True
        if len(self.members) > 1 and self._leaving_since is None:
            rank = f" (rank {m.rank})" if m.rank is not None else ""
            left = sum(1 for x in self.members if not x.ended)
            message = f"process {m.pid}{rank} exited; " + (
                f"ctmon goes on recording the other {left}" if left else "it was the last one joined"
            )
            self.emit(E.Note(t=time.time(), level="info", source="join", message=message))

    def agent_closed(self, pid: int | None) -> None:
        for m in self.members:
            if m.pid == pid and m.seen:
                m.ended = True  # it left (asked, or on its own), or the process ended

    def exited(self) -> bool:
        return all(m.ended for m in self.members)

    def _close_pidfd(self, m: Member) -> None:
        """Its pidfd out of the selector (readable for good once the process exited)."""
        if m.pidfd < 0:
            return
        try:
            self.sel.unregister(m.pidfd)
        except (KeyError, ValueError):
            pass
        os.close(m.pidfd)
        m.pidfd = -1

    # a viewer's controls: a stop leaves the job, a signal or typed line is refused

    def stop(self, grace: object) -> None:
        self.leave("a viewer asked to stop")

    def _refuse(self, what: str) -> None:
        if self._refused:
            return
        self._refused = True
        message = f"a viewer's {what} was not passed on: ctmon joined this job and does not signal it or type into it"
        self.emit(E.Note(t=time.time(), level="warning", source="ctmon", message=message))
