"""Joining a CPython 3.14+ process without a debugger: ``sys.remote_exec``
(PEP 768).

The process's own interpreter (``/proc/PID/exe``: the same version, as
``sys.remote_exec`` requires) is run with ``sys.remote_exec(PID, FILE)``:
it writes a request into the process's memory, and the process's main
thread runs FILE at its next safe point, as gdb's pending call does. The
process is never stopped, and no gdb is needed.

Where the process has turned remote debugging off (PYTHON_DISABLE_REMOTE_DEBUG
in its environment, ``-X disable-remote-debug``) or is older, gdb joins it
(join_inject.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time

from ctmon.launch.join_target import JoinRefused, ptrace_refusal, read_list

REMOTE_EXEC_TIMEOUT_S = 30.0  # the interpreter's start and one write into the process
_VERSIONED = re.compile(r"^python3\.(\d+)")
_PROBE = "import sys; print(int(sys.version_info >= (3, 14) and hasattr(sys, 'remote_exec')))"


def remote_exec_python(pid: int) -> str | None:
    """The interpreter that can schedule code in process ``pid`` with
    ``sys.remote_exec`` (its own executable), or None: gdb joins it."""
    if _remote_debug_off(pid):
        return None
    exe = f"/proc/{pid}/exe"
    try:
        name = os.path.basename(os.readlink(exe).removesuffix(" (deleted)"))
    except OSError:
        return None
    versioned = _VERSIONED.match(name)
    if versioned is not None:  # python3.12, python3.14t: told by the name, nothing run
        return exe if int(versioned.group(1)) >= 14 else None
    try:  # python, python3: ask the interpreter itself
        done = subprocess.run(
            [exe, "-I", "-S", "-c", _PROBE], capture_output=True, text=True, timeout=REMOTE_EXEC_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return exe if done.returncode == 0 and done.stdout.strip() == "1" else None


def _remote_debug_off(pid: int) -> bool:
    """PYTHON_DISABLE_REMOTE_DEBUG set (to anything), or ``-X disable-remote-debug``."""
    if any(v.startswith("PYTHON_DISABLE_REMOTE_DEBUG=") and len(v) > 28 for v in read_list(f"/proc/{pid}/environ")):
        return True
    argv = read_list(f"/proc/{pid}/cmdline")
    return any(a == "disable-remote-debug" or a == "-Xdisable-remote-debug" for a in argv)


def remote_exec(python: str, pid: int, code: str, script_dir: str) -> tuple[float, str]:
    """Schedule ``code`` in the process: the seconds the call took (the
    process is not stopped) and the file it runs, which must stay until the
    process has read it (the caller removes it once the agent says hello).
    JoinRefused, with the file removed, where it could not be scheduled."""
    fd, path = tempfile.mkstemp(prefix=f"join-{pid}-", suffix=".py", dir=script_dir)
    with os.fdopen(fd, "w") as f:
        f.write(code + "\n")
    call = f"import sys; sys.remote_exec({pid}, {path!r})"
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            [python, "-I", "-S", "-c", call], capture_output=True, text=True, timeout=REMOTE_EXEC_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError) as e:
        _remove(path)
        raise JoinRefused(f"sys.remote_exec could not run for process {pid}: {e}") from None
    took = time.monotonic() - t0
    if done.returncode == 0:
        return took, path
    _remove(path)
    said = next((ln.strip() for ln in reversed(done.stderr.splitlines()) if ln.strip()), "no output")
    if "PermissionError" in said or "Operation not permitted" in said:
        raise JoinRefused(ptrace_refusal(pid, "sys.remote_exec: operation not permitted"))
    if "ProcessLookupError" in said or "No such process" in said:
        raise JoinRefused(f"no process {pid}")
    raise JoinRefused(f"sys.remote_exec could not schedule ctmon in process {pid}: {said[:200]}")


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
