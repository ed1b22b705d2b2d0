"""The job's output pipes: widened, and written whole."""

from __future__ import annotations

import fcntl
import os
import time

PIPE_SIZE = 1 << 20  # the job's stdout/stderr pipes (Linux's pipe-max-size for unprivileged users)


def widen_pipe(fd: int) -> None:
    """A job writing as fast as it can fills a 64 KiB pipe in microseconds and
    waits for us each time; a wider one lets it run on while we record."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    except (AttributeError, OSError):
        pass  # over the system's pipe-max-size, or the user's pipe budget: the default will do


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            time.sleep(0.001)
            continue
        view = view[n:]
