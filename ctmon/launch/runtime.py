"""Where ctmon keeps sockets (per-user, private) and recordings.

Sockets live in ``$CTMON_RUNTIME_DIR`` or ``<tmp>/ctmon-<uid>`` -- not in
``/run/user/<uid>``, which logind deletes when the user's last SSH session
closes, taking a running job's sockets with it (tmux avoids it for the same
reason). The directory must be ours and private (0700); a directory owned by
someone else, or a symlink, is refused rather than used.

Recordings made without ``-o`` go to ``$XDG_STATE_HOME/ctmon/runs`` (default
``~/.local/state/ctmon/runs``), where ``ctmon watch`` finds them.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
import time


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


def runtime_dir() -> str:
    base = os.environ.get("CTMON_RUNTIME_DIR") or os.path.join(tempfile.gettempdir(), f"ctmon-{os.getuid()}")
    return ensure_private_dir(base)


def state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    path = os.path.join(base, "ctmon", "runs")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def new_session_id(target: str) -> str:
    stem = os.path.splitext(os.path.basename(target.rstrip("/")))[0] or "job"
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:24]
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}-{os.getpid()}"


def session_dir(session_id: str) -> str:
    path = os.path.join(runtime_dir(), session_id)
    os.mkdir(path, 0o700)
    return path


def default_recording(session_id: str) -> str:
    return os.path.join(state_dir(), f"{session_id}.jsonl")


def output_log_path(recording: str) -> str:
    base = recording[: -len(".jsonl")] if recording.endswith(".jsonl") else recording
    return base + ".output.log"
