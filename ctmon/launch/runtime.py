"""Where ctmon keeps sockets (per-user, private) and recordings.

Sockets live in ``$CTMON_RUNTIME_DIR`` or ``<tmp>/ctmon-<uid>`` -- not in
``/run/user/<uid>``, which logind deletes when the user's last SSH session
closes, taking a running job's sockets with it (tmux avoids it for the same
reason). The directory must be ours and private (0700); a directory owned by
someone else, or a symlink, is refused rather than used.

A Unix socket's path holds at most 107 bytes. When ``<tmp>`` is long (a
SLURM job's ``TMPDIR`` often is), sessions go to ``/tmp/ctmon-<uid>``
instead; ``list_sessions`` looks in both. An explicit ``CTMON_RUNTIME_DIR``
that is too long, or no place that fits, stops the run with one line before
anything is written.

Recordings made without ``-o`` go to ``$XDG_STATE_HOME/ctmon/runs`` (default
``~/.local/state/ctmon/runs``), where ``ctmon watch`` finds them. That
directory must be ours and writable by no one else (it may be a symlink to
such a directory): another user able to write there could plant a symlink
where ctmon is about to create a recording.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
import time
from typing import BinaryIO


class RuntimeDirError(Exception):
    pass


def ensure_private_dir(path: str) -> str:
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        raise RuntimeDirError(f"cannot create {path}: {e.strerror or e}") from None
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise RuntimeDirError(f"{path} is not a directory (refusing to use it)")
    if st.st_uid != os.getuid():
        raise RuntimeDirError(f"{path} belongs to another user (refusing to use it)")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


SOCKET_PATH_MAX = 107  # sun_path is 108 bytes with its NUL
SOCKET_NAMES = ("viewer.sock", "agent.sock")  # the longest name a session directory holds a socket under


def runtime_dir() -> str:
    base = os.environ.get("CTMON_RUNTIME_DIR") or os.path.join(tempfile.gettempdir(), f"ctmon-{os.getuid()}")
    return ensure_private_dir(base)


def fallback_runtime_dir() -> str:
    """Where sessions go when the usual place makes socket paths too long."""
    return os.path.join("/tmp", f"ctmon-{os.getuid()}")


def _longest(session_path: str) -> int:
    return max(len(os.fsencode(os.path.join(session_path, n))) for n in SOCKET_NAMES)


def _fits(session_path: str) -> bool:
    return _longest(session_path) <= SOCKET_PATH_MAX


def state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    path = os.path.join(base, "ctmon", "runs")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        raise RuntimeDirError(
            f"cannot create {path} for recordings: {e.strerror or e} (give one with -o FILE)"
        ) from None
    try:
        st = os.stat(path)  # a symlink to a directory of ours is fine; to anyone else's, not
    except OSError as e:
        raise RuntimeDirError(f"cannot use {path} for recordings: {e.strerror or e} (give one with -o FILE)") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeDirError(f"{path} is not a directory (give one with -o FILE)")
    if st.st_uid != os.getuid():
        raise RuntimeDirError(
            f"{path} belongs to another user (refusing to keep recordings there; give one with -o FILE)"
        )
    if st.st_mode & 0o022:
        raise RuntimeDirError(
            f"{path} is writable by other users (refusing to keep recordings there; "
            f"chmod go-w it, or give one with -o FILE)"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise RuntimeDirError(f"cannot write recordings to {path} (give one with -o FILE)")
    return path


def new_session_id(target: str) -> str:
    stem = os.path.splitext(os.path.basename(target.rstrip("/")))[0] or "job"
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:24]
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}-{os.getpid()}"


def session_dir(session_id: str) -> str:
    """A new private directory for one session's sockets, where their paths fit."""
    root = runtime_dir()
    path = os.path.join(root, session_id)
    if not _fits(path):
        fallback = fallback_runtime_dir()
        alt = os.path.join(fallback, session_id)
        # CTMON_RUNTIME_DIR is the user's explicit choice: say it does not fit
        if os.environ.get("CTMON_RUNTIME_DIR") or fallback == root or not _fits(alt):
            raise RuntimeDirError(
                f"socket paths under {root} are too long ({_longest(path)} bytes; a Unix socket allows "
                f"{SOCKET_PATH_MAX}): set CTMON_RUNTIME_DIR to a shorter directory"
            )
        path = os.path.join(ensure_private_dir(fallback), session_id)
    try:
        os.mkdir(path, 0o700)
    except OSError as e:
        raise RuntimeDirError(f"cannot create {path}: {e.strerror or e}") from None
    return path


def default_recording(session_id: str) -> str:
    return os.path.join(state_dir(), f"{session_id}.jsonl")


def output_log_path(recording: str) -> str:
    base = recording[: -len(".jsonl")] if recording.endswith(".jsonl") else recording
    return base + ".output.log"


def last_line(log: BinaryIO) -> str:
    """The last non-empty line a detached supervisor wrote to its log: its
    error, when it could not start."""
    try:
        log.seek(0)
        lines = [ln.strip() for ln in log.read().decode(errors="replace").splitlines() if ln.strip()]
        return lines[-1] if lines else ""
    except OSError:
        return ""


def alive(pid: object) -> bool:
    """Whether a process of that pid exists (one of another user's counts)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_sessions(clean: bool = True) -> list[dict[str, object]]:
    """This user's live sessions (newest first), from their session.json files.

    A session whose supervisor is gone (killed with -9, machine rebooted) has
    nothing left to attach to; its directory is removed when ``clean``.
    """
    import json
    import shutil

    out = []
    for d in _session_dirs():
        info_path = os.path.join(d, "session.json")
        try:
            st = os.lstat(d)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            with open(info_path) as f:
                info = json.load(f)
        except (OSError, ValueError):
            continue
        if not isinstance(info, dict):
            continue
        live = alive(info.get("supervisor_pid")) and os.path.exists(os.path.join(d, "viewer.sock"))
        if not live:
            if clean and time.time() - st.st_mtime > 5:
                shutil.rmtree(d, ignore_errors=True)
            continue
        info["session_dir"] = d
        info["viewer_socket"] = os.path.join(d, "viewer.sock")
        out.append(info)
    out.sort(key=lambda i: -(i.get("start") or 0))
    return out


def _session_dirs() -> list[str]:
    roots = []
    try:
        roots.append(runtime_dir())
    except RuntimeDirError:
        pass
    fallback = fallback_runtime_dir()
    if not os.environ.get("CTMON_RUNTIME_DIR") and fallback not in roots and os.path.isdir(fallback):
        try:
            roots.append(ensure_private_dir(fallback))
        except RuntimeDirError:
            pass
    out = []
    for root in roots:
        try:
            out += [os.path.join(root, n) for n in os.listdir(root)]
        except OSError:
            continue
    return out


def find_session(key: str) -> dict[str, object] | None:
    """By job pid, supervisor pid, or session id (or a unique prefix of it)."""
    sessions = list_sessions()
    if key.isdigit():
        pid = int(key)
        for s in sessions:
            if pid in (s.get("job_pid"), s.get("supervisor_pid")):
                return s
    matches = [s for s in sessions if str(s.get("id", "")).startswith(key)]
    return matches[0] if len(matches) == 1 else None
