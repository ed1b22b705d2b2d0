"""The job of a supervisor that did not start it: a process that called
``ctmon.install()`` (a SLURM or Kubernetes job, a notebook).

It is not ctmon's child: its output goes where it always went, its exit
status cannot be read (so the exit event says neither code nor signal), and
ctmon sends it no signals -- a viewer's stop, interrupt or typed line is
refused with a note. Its end is seen through a pidfd (or by polling), and
the recording ends when its agent has said goodbye.
"""

from __future__ import annotations

import os
import select
import selectors
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ctmon.launch import signal_policy
from ctmon.launch.runtime import alive
from ctmon.wire import events as E
from ctmon.wire.event_base import Event


@dataclass
class AdoptedProcess:
    pid: int


class AdoptedJob:
    def __init__(self, pid: int, sel: selectors.BaseSelector, emit: Callable[[Event], None]) -> None:
        self.proc = AdoptedProcess(pid)
        self.sel = sel
        self.emit = emit
        self.pidfd = -1
        self.last_output = 0.0
        self._gone = False
        self._refused = False
        self._pending_signals: list[int] = []
        self._signals_noted: set[int] = set()

    # what the supervisor calls on a job it started; most have nothing to do here

    def spawn(self, env_extra: dict[str, str]) -> None:
        try:
            self.pidfd = os.pidfd_open(self.proc.pid)
            self.sel.register(self.pidfd, selectors.EVENT_READ, ("pidfd", None))
        except (AttributeError, OSError):
            self.pidfd = -1
        if self.pidfd < 0 and not alive(self.proc.pid):
            raise OSError(f"process {self.proc.pid} is gone")

    def exited(self) -> bool:
        if self._gone:
            return True
        if self.pidfd >= 0:
            ready, _, _ = select.select([self.pidfd], [], [], 0)
            self._gone = bool(ready)
        else:
            self._gone = not alive(self.proc.pid)
        if self._gone and self.pidfd >= 0:
            self.sel.unregister(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = -1
        return self._gone

    def exit_event(self) -> E.Exit:
        return E.Exit(t=time.time(), code=None, signal=None)  # not ours to wait for: unknown

    def streams_open(self) -> bool:
        return False

    def read_stream(self, st: object) -> None:
        pass

    def hand_off_streams(self) -> None:
        pass

    def install_signals(self, wake_fd: int) -> None:
        """A signal that would end this supervisor is not passed on (the job is
        not ctmon's to signal) but noted and ignored: a scheduler signals every
        process of a job at once (SLURM's scancel: SIGTERM), and the job's last
        moments (its checkpoint on SIGTERM) are still recorded. The supervisor
        ends with the job (signal_policy.py lists the signals)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (*signal_policy.forwarded("attach"), *signal_policy.IGNORED):
            signal.signal(sig, lambda signum, frame: self._pending_signals.append(signum))
        signal.set_wakeup_fd(wake_fd, warn_on_full_buffer=False)

    def handle_signals(self) -> None:
        while self._pending_signals:
            sig = self._pending_signals.pop(0)
            if sig in self._signals_noted:
                continue
            self._signals_noted.add(sig)
            msg = (
                f"ctmon received {signal_policy.signal_name(sig)} and ignored it: this job is not ctmon's to "
                "signal, and ctmon records it until it ends"
            )
            self.emit(E.Note(t=time.time(), level="info", source="ctmon", message=msg))

    def escalate_stop(self) -> None:
        pass

    def watch_rank(self, pid: int | None, rank: int) -> None:
        pass

    def agent_closed(self, pid: int | None) -> None:
        pass

    def check_exec(self, agent_pids: list[int | None], alive: bool) -> None:
        pass

    # a viewer's controls: refused, the job is not ctmon's to stop

    def control_signal(self, action: str) -> None:
        self._refuse(action)

    def stop(self, grace: object) -> None:
        self._refuse("stop")

    def stdin(self, data: object) -> None:
        self._refuse("input")

    def _refuse(self, what: str) -> None:
        if self._refused:
            return
        self._refused = True
        note = E.Note(
            t=time.time(),
            level="warning",
            source="ctmon",
            message=f"a viewer's {what} was not passed on: this job called ctmon.install() and is not ctmon's "
            "to stop or type into",
        )
        self.emit(note)
