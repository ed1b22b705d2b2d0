"""Opening the files a run writes (the recording, the output log) safely.

Two kinds of path, two rules:

* a name ctmon chose inside its own directory (``-o`` not given): the file is
  created, never opened if something is already there -- ``O_CREAT|O_EXCL``
  and ``O_NOFOLLOW``, so a planted file or symlink is refused, not written
  through;
* a path the user gave (``-o FILE``): an existing file is overwritten, as
  users expect, and a symlink is followed -- except a symlink that another
  user planted in a sticky world-writable directory such as ``/tmp`` whose
  owner is neither us nor the directory's owner. That is the rule of the
  kernel's ``fs.protected_symlinks``, applied here too because containers and
  some distributions leave it off, and because the victim is whoever runs
  ``ctmon record`` (root, often).

A file named by neither (the output log next to ``-o FILE``) is opened with
``O_NOFOLLOW`` and must be a regular file of ours with one link.

Every file is locked (``flock``, exclusive) for the run, so a second ctmon
writing the same recording is refused instead of interleaving lines with the
first. It is emptied (``empty``) only once the lock is ours and the rest of
the run's setup has gone through.

The lock is also how anyone else tells that a run is live (``locked``: ``ctmon
runs`` never removes what a live run writes, whatever its runtime directory).
Looking takes a shared lock for an instant, so a run starting at that instant
waits for it (``LOOK_WAIT_S``) instead of taking it for a second ctmon.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time

from ctmon.read.liveness import LOOK_WAIT_S, lock_holder, locked, path_locked

__all__ = ["FileRefused", "LOOK_WAIT_S", "lock_holder", "locked", "path_locked"]  # the lock's reading side, for writers


class FileRefused(Exception):
    """One line for the user: the file was not opened (nor changed)."""


def _flags() -> int:
    return os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: a FIFO must not hang the open


def open_new(path: str) -> int:
    """Create ``path`` (a name ctmon chose); refuse anything already there."""
    try:
        fd = os.open(path, _flags() | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise FileRefused(f"{path} already exists (refusing to write through it)") from None
    except OSError as e:
        raise FileRefused(f"cannot create {path}: {e.strerror or e}") from None
    return _finish(path, fd, check_owner=False)


def open_given(path: str) -> int:
    """Open ``path`` (a name the user gave) for writing, locked, not yet emptied."""
    refuse_protected_symlink(path)
    try:
        fd = os.open(path, _flags(), 0o600)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a FIFO nobody reads (O_NONBLOCK kept the open from hanging)
            raise FileRefused(f"{path} is not a regular file (refusing to write the recording there)") from None
        raise FileRefused(f"cannot write the recording to '{path}': {e.strerror or e}") from None
    return _finish(path, fd, check_owner=False)


def open_beside(path: str) -> int:
    """Open a file ctmon names next to the user's (``X.output.log``)."""
    try:
        fd = os.open(path, _flags() | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise FileRefused(f"{path} is a symlink (refusing to write through it)") from None
        raise FileRefused(f"cannot write {path}: {e.strerror or e}") from None
    return _finish(path, fd, check_owner=True)


def _finish(path: str, fd: int, check_owner: bool) -> int:
    try:
        st = os.fstat(fd)
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode) or stat.S_ISDIR(st.st_mode):
            raise FileRefused(f"{path} is not a regular file (refusing to write the recording there)")
        if check_owner and stat.S_ISREG(st.st_mode) and (st.st_uid != os.getuid() or st.st_nlink > 1):
            raise FileRefused(f"{path} belongs to another user or has other links (refusing to write it)")
        if not _lock_exclusive(fd):
            holder = lock_holder(st)
            who = f" (pid {holder})" if holder else ""
            raise FileRefused(f"{path} is being written by another ctmon{who}")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _lock_exclusive(fd: int) -> bool:
    """Our exclusive flock on ``fd``; False if another writer holds one."""
    deadline = time.monotonic() + LOOK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)


def hold_directory(path: str) -> int | None:
    """An exclusive flock on the directory ``path`` for as long as the
    returned descriptor is open (None where none can be had): a run writing
    several files there, one after another, is live between them too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    if _lock_exclusive(fd):
        return fd
    os.close(fd)
    return None


def empty(fd: int) -> None:
    """Empty a file opened above, once the run is set up (a FIFO or device is left alone)."""
    if stat.S_ISREG(os.fstat(fd).st_mode):
        os.ftruncate(fd, 0)


def reopen_for_reading(fd: int, path: str) -> int:
    """A read-only descriptor of the same file (not whatever ``path`` names now)."""
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)


def refuse_protected_symlink(path: str) -> None:
    """Refuse what ``fs.protected_symlinks=1`` refuses: in a sticky,
    world-writable directory, following a symlink owned by neither the
    follower nor the directory's owner."""
    try:
        lst = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISLNK(lst.st_mode):
        return
    parent = os.path.dirname(os.path.abspath(path)) or "/"
    try:
        dst = os.stat(parent)
    except OSError:
        return
    shared = dst.st_mode & stat.S_ISVTX and dst.st_mode & stat.S_IWOTH
    if shared and lst.st_uid != os.geteuid() and lst.st_uid != dst.st_uid:
        raise FileRefused(
            f"'{path}' is a symlink another user owns in the shared directory {parent} (refusing to follow it)"
        )
