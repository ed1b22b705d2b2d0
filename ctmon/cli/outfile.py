"""Files a command writes where the user said (``-o FILE``).

Two promises, whatever the path names:

* nothing the user recorded is written over: a file that is one of the
  command's own inputs (by any name: a symlink, a hard link) or a file a
  running ctmon is writing (its recording, its output log: each is locked
  with ``flock`` for the run, ctmon/launch/files.py) is refused in one line
  before anything is written;
* a file is whole or untouched: it is written beside itself under a
  temporary name, synced, and renamed over the old one, so a failure (a full
  disk, Ctrl-C, SIGTERM) leaves whatever was there before. A device or FIFO
  (``-o /dev/stdout``) cannot be renamed over and is written directly.
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TextIO

from ctmon.cli import CliError
from ctmon.launch.files import FileRefused, lock_holder, locked, refuse_protected_symlink


def refuse_overwrite(command: str, output: str, inputs: Iterable[str]) -> None:
    """One line (a ``CliError``) if writing ``output`` would destroy one of
    ``inputs`` or a file a live ctmon is writing; nothing is opened for
    writing here."""
    try:
        out = os.stat(output)  # follows a symlink: what would be written is its target
    except OSError:
        return  # nothing there yet, or nothing reachable: the write says why
    for path in inputs:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino):
            same = "" if os.path.abspath(path) == os.path.abspath(output) else f" ({path})"
            raise CliError(f"{command}: refusing to write {output} over its own input{same}")
    if stat.S_ISREG(out.st_mode) and _live(output, out):
        holder = lock_holder(out)
        who = f" (pid {holder})" if holder else ""
        raise CliError(f"{command}: refusing to write {output}: a running ctmon is writing it{who}")


def refuse_busy_directory(command: str, path: str) -> None:
    """One line (a ``CliError``) if a running ctmon holds its lock on the
    directory ``path`` (it writes several files there, one after another)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode) and _live(path, st):
        holder = lock_holder(st)
        who = f" (pid {holder})" if holder else ""
        raise CliError(f"{command}: refusing to write into {path}: a running ctmon is writing there{who}")


def _live(path: str, expected: os.stat_result) -> bool:
    """Whether a running ctmon holds its lock on the file ``path`` names.
    Looked at through a descriptor of our own, read-only: a flock belongs to
    the open file description it was taken on, so looking never touches the
    writer's lock (``locked``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return lock_holder(expected) is not None  # unreadable to us: /proc/locks still says
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino):
            return False  # replaced meanwhile: the write goes to a new file anyway
        return locked(fd)
    finally:
        os.close(fd)


def write_text(command: str, path: str, write: Callable[[TextIO], object]) -> None:
    """``write`` the file ``path`` names, whole or not at all (see the module);
    a failure is one line (``CliError``)."""
    try:
        refuse_protected_symlink(path)
    except FileRefused as e:
        raise CliError(f"{command}: {e}") from None
    try:
        existing: os.stat_result | None = os.stat(path)
    except OSError:
        existing = None
    try:
        if existing is not None and stat.S_ISDIR(existing.st_mode):
            raise IsADirectoryError(21, "Is a directory")
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            with open(path, "w", encoding="utf-8", errors="replace") as f:  # a device or FIFO: nothing to rename
                write(f)
            return
        _replace(os.path.realpath(path), existing, write)
    except OSError as e:
        raise CliError(f"{command}: cannot write {path}: {e.strerror or e}") from None


def _replace(target: str, existing: os.stat_result | None, write: Callable[[TextIO], object]) -> None:
    """Write a temporary file beside ``target``, then rename it over ``target``."""
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    temp, fd = _create_beside(target)
    try:
        with _signals_interrupt(), os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            write(f)
            f.flush()
            _sync(f.fileno())
            if existing is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(existing.st_mode))  # the file keeps its permissions
            os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass  # renamed already, or never there
        raise


def _sync(fd: int) -> None:
    """The data on disk before the name points at it (a crash must not leave
    an empty file where a good one was); a filesystem that cannot sync
    (EINVAL) is written all the same."""
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise


def _create_beside(target: str) -> tuple[str, int]:
    """A new file next to ``target`` (same filesystem, so the rename is
    atomic), hidden, with the permissions a plain ``open`` would give it."""
    parent, name = os.path.split(target)
    for _ in range(100):
        temp = os.path.join(parent, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            return temp, os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(17, "File exists", temp)


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt`` while the file is
    written, so the temporary file is removed as after Ctrl-C; the command
    then exits 130. A signal ignored (``nohup``) stays ignored."""
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is signal.SIG_DFL:
                previous[sig] = signal.signal(sig, _interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
