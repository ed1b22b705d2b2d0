"""Noticing that the job exec'd into a program ctmon cannot follow.

A job that ``os.execv``'s into another Python program keeps its pid; the new
program's agent connects again (see ctmon/agent/site) and its events are
followed. A program that is not Python has no agent: the old connection
closes (close-on-exec) while the pid lives on. That must not look like a job
that simply stopped compiling, so the recording gets a note.

The signs: the job's agent connection closed, the process still runs with a
different command line, and no new agent came from its pid within a grace
period (a Python program needs a moment to start and connect). Each rank of
a distributed job is watched the same way from its first hello (it is the
launcher's child, not ctmon's, but its pid and command line are as readable).
"""

from __future__ import annotations

import socket
import struct
import time

EXEC_GRACE_S = 3.0


def peer_pid(sock: socket.socket) -> int | None:
    cred = getattr(socket, "SO_PEERCRED", None)
    if cred is None:
        return None
    try:
        pid, _, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, cred, struct.calcsize("3i")))
    except OSError:
        return None
    return pid


def cmdline(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return None


class ExecWatch:
    def __init__(self, job_pid: int, who: str = "the job") -> None:
        self.job_pid = job_pid
        self.who = who  # "the job", or "rank 3" for a rank's process
        # The command line its last agent ran under. Read once more when the
        # first agent connects: read here, right after the fork, it may still
        # be ctmon's own (the child had not exec'd python yet), and a job that
        # simply exits would then look like one that exec'd away.
        self.known = cmdline(job_pid)
        self.confirmed = False
        self.closed_at: float | None = None
        self.changed = False
        self.known_now = b""

    def agent_closed(self, pid: int | None) -> None:
        if pid == self.job_pid:
            self.closed_at = time.monotonic()
            self.changed = False

    def check(self, agent_pids: list[int | None], alive: bool) -> str | None:
        """Called on every loop pass; returns a note's message once, when due."""
        if self.closed_at is None:
            if not self.confirmed and self.job_pid in agent_pids:
                self.confirmed = True
                self.known = cmdline(self.job_pid)
            return None
        if self.job_pid in agent_pids:  # a Python program: followed again
            self.closed_at = None
            self.known = cmdline(self.job_pid)
            return None
        if alive:
            now = cmdline(self.job_pid)
            if now and now != self.known:  # (empty: an exiting process, a zombie)
                self.changed = True
                self.known_now = now
        due = not alive or time.monotonic() - self.closed_at > EXEC_GRACE_S
        if due and self.changed:
            self.closed_at = None
            shown = self.known_now.replace(b"\0", b" ").decode("utf-8", "replace").strip()
            return (
                f"{self.who} (pid {self.job_pid}) replaced itself with a program ctmon cannot follow ({shown[:200]}); "
                "its compile and step events are no longer recorded"
            )
        if not alive:
            self.closed_at = None
        return None
