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
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        raise RuntimeDirError(f"cannot create {path} for recordings: {e.strerror or e} (give one with -o FILE)") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise RuntimeDirError(f"cannot write recordings to {path} (give one with -o FILE)")
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


def _alive(pid: object) -> bool:
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

    try:
        root = runtime_dir()
        names = os.listdir(root)
    except (OSError, RuntimeDirError):
        return []
    out = []
    for name in names:
        d = os.path.join(root, name)
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
        live = _alive(info.get("supervisor_pid")) and os.path.exists(os.path.join(d, "viewer.sock"))
        if not live:
            if clean and time.time() - st.st_mtime > 5:
                shutil.rmtree(d, ignore_errors=True)
            continue
        info["session_dir"] = d
        info["viewer_socket"] = os.path.join(d, "viewer.sock")
        out.append(info)
    out.sort(key=lambda i: -(i.get("start") or 0))  # type: ignore[operator]
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
