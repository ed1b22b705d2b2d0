"""ctmon's own fds 0-2, and which of them the user started it without.

A process started with ``<&-`` or ``2>&-`` has no fd 0 or 2: the next file or
socket ctmon opened would land there and leak into the job as its stdin, and
a message on a missing stderr would fail ctmon. So the free ones are filled
with /dev/null at start-up, and the job gets them closed again, as python
would have been started.
"""

from __future__ import annotations

import os
import sys

_closed: frozenset[int] = frozenset()


def reserve() -> frozenset[int]:
    """Fill every free fd of 0-2 with /dev/null; remember which were free."""
    global _closed
    free = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            free.add(fd)
    for fd in sorted(free):  # lowest first: open() returns exactly that fd
        try:
            null = os.open(os.devnull, os.O_RDWR)
        except OSError:
            continue
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        if fd in free and getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))  # noqa: SIM115 - lives as long as ctmon
    _closed = frozenset(free) | _closed
    return _closed


def closed() -> frozenset[int]:
    """The std fds ctmon was started without (the job gets them closed too)."""
    return _closed


def close_in_child() -> None:
    """preexec_fn of the job: close what the user had closed."""
    for fd in _closed:
        try:
            os.close(fd)
        except OSError:
            pass
