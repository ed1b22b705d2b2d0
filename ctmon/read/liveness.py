"""Whether a run is live: the lock it holds on each file it writes.

Every file a run writes is locked (``flock``, exclusive) for the run
(ctmon/launch/files.py takes the lock). Anyone else tells that a run is live
by that lock (``ctmon runs`` never removes what a live run writes, whatever its
runtime directory; a report of a recording says it may still grow). Looking
takes a shared lock for an instant, so a run starting at that instant waits
for it (``LOOK_WAIT_S``) instead of taking it for a second ctmon.
"""

from __future__ import annotations

import fcntl
import os
import stat

# How long a run opening its file waits out a lock someone holds only to look
# (``locked`` takes and drops it in two system calls); a second ctmon writing
# the same file holds its lock for the whole of its run and is still refused.
LOOK_WAIT_S = 0.5


def locked(fd: int) -> bool:
    """Whether a live run holds a flock on the file (or directory) ``fd`` is
    open on.

    A shared lock is tried on our own open file description and let go at
    once. A flock belongs to the open file description it was taken on, so
    neither taking nor dropping ours touches the writer's; a POSIX record lock
    (``fcntl``/``lockf``) would not do: any close of the file by a process
    drops all of that process's record locks. Where flock cannot be tried (a
    filesystem without it), /proc/locks says.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        try:
            return lock_holder(os.fstat(fd)) is not None
        except OSError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError:
        pass  # closing ours lets it go as well
    return False


def path_locked(path: str) -> bool:
    """``locked`` for the file or directory ``path`` names (no symlink
    followed, no FIFO or device opened for real). One that cannot be opened
    (no read permission) is looked up in /proc/locks."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY
    try:
        st = os.lstat(path)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            return False  # ctmon writes neither through a symlink here nor into anything else
        fd = os.open(path, flags)
    except OSError:
        try:
            return lock_holder(os.lstat(path)) is not None
        except OSError:
            return False  # gone
    try:
        return locked(fd)
    finally:
        os.close(fd)


def lock_holder(st: os.stat_result) -> int | None:
    """The pid holding a flock on the file ``st`` describes, from /proc/locks."""
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            for line in f:
                parts = line.split()
                # "1: FLOCK  ADVISORY  WRITE 4242 00:2e:1234 0 EOF" ("->" marks waiters)
                if "->" in parts:
                    continue
                if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == dev and parts[4].isdigit():
                    return int(parts[4])
    except OSError:
        pass
    return None
