"""Which process ``ctmon join --pid`` may join (ctmon/launch/join.py).

What is checked before the job is touched (:func:`check_joinable`): the
process exists, is this user's (or we are root), is CPython, runs no ctmon
agent already, and can be traced (a debugger, ``kernel.yama.ptrace_scope``).
Each refusal is one line that says what to do.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass

AGENT_ENV = "CTMON_AGENT_SOCKET"


class JoinRefused(Exception):
    """One line for the user: why ctmon does not join this process, and what to do."""


JOINED_PIDS = "joined_pids"  # in a joining session's directory: every process it joined, one pid a line


@dataclass
class Target:
    pid: int
    exe: str
    argv: list[str]
    cwd: str
    rank: int | None = None  # the rank its launcher gave it (RANK and WORLD_SIZE in its environment)


def check_joinable(pid: int) -> Target:
    """The process, if ctmon can join it; else JoinRefused (the job untouched)."""
    proc = f"/proc/{pid}"
    if pid <= 0 or not os.path.isdir(proc):
        raise JoinRefused(f"no process {pid}")
    try:
        owner = os.stat(proc).st_uid
    except OSError:
        raise JoinRefused(f"no process {pid}") from None
    if owner != os.geteuid() and os.geteuid() != 0:
        raise JoinRefused(f"process {pid} belongs to another user: join it as that user, or with sudo")
    exe = _read_link(f"{proc}/exe")
    argv = read_list(f"{proc}/cmdline")
    if not _is_python(pid, exe):
        what = os.path.basename(exe or (argv[0] if argv else "?"))
        raise JoinRefused(f"process {pid} ({what}) is not a Python process")
    state = _state(pid)
    if state in ("Z", "X"):
        raise JoinRefused(f"process {pid} has exited")
    if state in ("T", "t"):
        raise JoinRefused(
            f"process {pid} is stopped (SIGSTOP, or a debugger holds it): continue it (kill -CONT {pid}) and join again"
        )
    if _launched_under_ctmon(pid):
        raise JoinRefused(f"process {pid} runs under ctmon already: watch it with: ctmon watch {pid}")
    workers = _rank_children(pid)
    if workers:
        listed = ", ".join(str(w) for w in workers)
        raise JoinRefused(
            f"process {pid} launches the ranks of a distributed job (its children {listed} have RANK set): "
            f"join a rank with --pid {workers[0]}; joining a launcher's ranks at once is not supported yet"
        )
    session = _joined_session(pid)
    if session is not None:
        raise JoinRefused(f"ctmon has joined process {pid} already: watch it with: ctmon watch {pid}")
    if shutil.which("gdb") is None and shutil.which("lldb") is None and not _remote_exec_able(pid):
        raise JoinRefused(
            "joining a running process needs gdb: apt-get install gdb (or your system's package manager; lldb works too)"
        )
    _check_ptrace_scope(pid)
    return Target(pid, exe or "", argv, _read_link(f"{proc}/cwd") or "/", launched_rank_of(pid))


def join_targets(pids: list[int]) -> list[Target]:
    """Every process ``--pid`` names, checked before any is touched: a
    launcher (torchrun, or any process whose children have RANK set and
    which has none itself) stands for those children; a pid named twice,
    directly or through its launcher, is refused."""
    targets: list[Target] = []
    named: dict[int, int] = {}  # a joined pid -> the pid the user named for it
    for pid in pids:
        workers = _rank_children(pid) if pid > 0 and os.path.isdir(f"/proc/{pid}") else []
        for member in workers or [pid]:
            if member in named:
                raise JoinRefused(_twice(member, named[member], pid))
            named[member] = pid
            targets.append(check_joinable(member))
    ranks_given(targets)  # a mix that cannot be one job's ranks is refused here
    return targets


def _twice(pid: int, first: int, second: int) -> str:
    if first == second == pid:
        return f"process {pid} is named twice: name each process once"
    launcher = first if first != pid else second
    return f"process {pid} is named twice: itself, and as a rank of launcher {launcher}; name each process once"


def launcher_workers(pid: int) -> list[int]:
    """The rank processes ``--pid`` of this launcher joins (none: it is no launcher)."""
    return _rank_children(pid)


def ranks_given(targets: list[Target]) -> list[int] | None:
    """The ranks ctmon gives the processes it joins, or None where each
    says its own: every process a launcher started (RANK set) keeps its
    rank; several plain processes are ranks 0, 1, ... in the order named
    (the order the user wrote is the one they expect to see). A mix, or two
    processes with the same RANK, are not one job's ranks: refused."""
    own = [t.rank for t in targets]
    if len(targets) == 1 or all(r is None for r in own):
        return None if len(targets) == 1 else list(range(len(targets)))
    if any(r is None for r in own):
        ranked = next(t for t in targets if t.rank is not None)
        plain = next(t for t in targets if t.rank is None)
        raise JoinRefused(
            f"process {ranked.pid} is rank {ranked.rank} of a launched job and process {plain.pid} is no rank: "
            "join them in separate ctmon sessions"
        )
    seen: dict[int | None, int] = {}
    for t in targets:
        if t.rank in seen:
            raise JoinRefused(
                f"processes {seen[t.rank]} and {t.pid} are both rank {t.rank}: they are ranks of different jobs; "
                "join each job in its own ctmon session"
            )
        seen[t.rank] = t.pid
    return None


def launched_rank_of(pid: int) -> int | None:
    """The rank a launcher gave the process, read as its agent reads it
    (ctmon/agent/rank_info.py: RANK and WORLD_SIZE both set)."""
    env = dict(v.split("=", 1) for v in read_list(f"/proc/{pid}/environ") if "=" in v)
    rank, world = env.get("RANK", ""), env.get("WORLD_SIZE", "")
    return int(rank) if rank.isdigit() and world.isdigit() else None


def _state(pid: int) -> str:
    """The process's state letter (/proc/PID/stat: R, S, D, T, t, Z, ...)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return ""
    after_name = raw.rpartition(b")")[2].split()  # the name may hold spaces and parentheses
    return after_name[0].decode() if after_name else ""


def _read_link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _remote_exec_able(pid: int) -> bool:
    """CPython 3.14+ with remote debugging on: joined without gdb (join_remote.py)."""
    from ctmon.launch.join_remote import remote_exec_python

    return remote_exec_python(pid) is not None


def read_list(path: str) -> list[str]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


_PYTHON_EXE = re.compile(r"^python(\d(\.\d+)?)?[a-z]*$")


def _is_python(pid: int, exe: str | None) -> bool:
    """CPython: its binary is named python*, or it maps libpython."""
    if exe and _PYTHON_EXE.match(os.path.basename(exe.removesuffix(" (deleted)"))):
        return True
    try:
        with open(f"/proc/{pid}/maps") as f:
            return any("/libpython3" in line for line in f)
    except OSError:
        return False


def _launched_under_ctmon(pid: int) -> bool:
    """Started by ctmon (or a child of such a job): its environment names an agent socket."""
    env = read_list(f"/proc/{pid}/environ")
    return any(v.startswith(AGENT_ENV + "=") for v in env)


def _rank_children(pid: int) -> list[int]:
    """A launcher's workers (torchrun's, or any launcher's): children with
    RANK in their environment, where the process itself has none (a rank's
    own children, DataLoader workers say, inherit its RANK)."""
    if any(v.startswith("RANK=") for v in read_list(f"/proc/{pid}/environ")):
        return []
    children: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return sorted(c for c in children if any(v.startswith("RANK=") for v in read_list(f"/proc/{c}/environ")))


def _joined_session(pid: int) -> dict[str, object] | None:
    """A live session of this user whose job is that process (a join, or a
    job that called ctmon.install())."""
    from ctmon.launch.runtime import list_sessions

    for s in list_sessions(clean=False):
        if s.get("job_pid") == pid or pid in _joined_pids(str(s.get("session_dir") or "")):
            return s
    return None


def _joined_pids(session_dir: str) -> list[int]:
    """The processes a session joined besides its first (``--pid`` of several)."""
    try:
        with open(os.path.join(session_dir, JOINED_PIDS)) as f:
            return [int(line) for line in f if line.strip().isdigit()]
    except OSError:
        return []


def _check_ptrace_scope(pid: int) -> None:
    """kernel.yama.ptrace_scope: 0 lets a user trace their processes; 1 only
    their descendants (unless CAP_SYS_PTRACE); 2 only CAP_SYS_PTRACE; 3 none."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return  # no Yama: ordinary permissions, which gdb's attach checks
    if scope == 0 or (scope in (1, 2) and _has_cap_sys_ptrace()):
        return
    if scope == 3:
        raise JoinRefused(
            f"cannot join process {pid}: kernel.yama.ptrace_scope is 3 (no process may be traced until reboot)"
        )
    raise JoinRefused(ptrace_refusal(pid, f"kernel.yama.ptrace_scope is {scope}"))


def ptrace_refusal(pid: int, why: str) -> str:
    return (
        f"cannot join process {pid}: tracing it is not allowed ({why}); run ctmon with sudo, or in a container "
        "add --cap-add SYS_PTRACE"
    )


def _has_cap_sys_ptrace() -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) & (1 << 19))
    except (OSError, ValueError, IndexError):
        pass
    return False


def job_command(target: Target) -> tuple[str, list[str]]:
    """How the joined job was started, for the session's command line."""
    if target.argv:
        return target.argv[0], target.argv[1:]
    return target.exe or sys.executable, []
