"""Output of the job's children after the job itself exited.

Under plain python a child that outlives the job (a forked worker, a daemon
it started) keeps printing to the terminal. ctmon reads the job's output
through pipes or a pty; when the job exits, ``ctmon record`` must return as
python would, yet closing those read ends would kill the child at its next
``print`` (BrokenPipeError). So the open read ends go to a small forked
relay that copies them to where they went before -- ctmon's own stdout and
stderr, and/or the output log -- until the last writer closes them.
"""

from __future__ import annotations

import os
import select
import signal

READ_SIZE = 16 * 1024


def start(pairs: list[tuple[int, int | None]], log_fd: int | None) -> bool:
    """Fork the relay for (read fd, destination fd) pairs; False if it could not start."""
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid:
        return True
    try:
        _become_relay({fd for pair in pairs for fd in pair if fd is not None} | ({log_fd} if log_fd else set()))
        run(pairs, log_fd)
    finally:
        os._exit(0)


def _become_relay(keep: set[int]) -> None:
    for sig in signal.valid_signals():  # the supervisor's handlers (Job.install_signals) are not the relay's
        try:
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    # Hold nothing of the supervisor's: its sockets must close when it exits.
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    except OSError:
        pass


def run(pairs: list[tuple[int, int | None]], log_fd: int | None) -> None:
    """Copy until every read end reaches EOF (or its reader is gone)."""
    dest = dict(pairs)
    for fd in dest:
        os.set_blocking(fd, True)
    while dest:
        ready, _, _ = select.select(list(dest), [], [])
        for fd in ready:
            try:
                data = os.read(fd, READ_SIZE)
            except OSError:
                data = b""  # EIO: the pty's last writer closed it
            out = dest.get(fd)
            if data and log_fd is not None:
                try:
                    os.write(log_fd, data)
                except OSError:
                    log_fd = None
            if data and out is not None:
                try:
                    _write_all(out, data)
                except OSError:
                    data = b""  # our reader is gone: let the writer's next write fail too
            if not data:
                del dest[fd]
                os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:  # a terminal shared with a non-blocking reader
            select.select([], [fd], [], 1.0)
