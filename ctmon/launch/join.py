"""Joining a Python process that ctmon did not start (``--pid``).

What is checked before the job is touched (:func:`check_joinable`): the
process exists, is this user's (or we are root), is CPython, runs no ctmon
agent already, and can be traced (a debugger, ``kernel.yama.ptrace_scope``).
Each refusal is one line that says what to do.

How the agent gets in (:func:`inject`): ``gdb -batch -p PID`` stops the
process for a moment, maps one page into it, writes a short piece of Python
there and hands it to ``Py_AddPendingCall`` with ``PyRun_SimpleString`` as
the function (called by the addresses ctmon reads from /proc/PID/maps and
the libraries' ELF dynamic symbols, so gdb reads no symbols while the job
is stopped; by gdb's own symbol lookup where that reading fails): CPython's main thread runs it at its next safe point (between
two bytecodes, holding the GIL), after gdb has let the process go. That code
puts ctmon's parent directory on ``sys.path`` just long enough to import
ctmon/agent/join.py, which connects to the supervisor's socket like a
launched job's agent. Python 3.14's ``sys.remote_exec`` would be a second
branch of :func:`inject`; it is not used yet.

:class:`JoinedJob` is the supervisor's side: the job is not ctmon's child
(its output and exit status are not ctmon's), and the supervisor ends when
the job exits or the user leaves -- then the agent takes its hooks out.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctmon.launch.adopted_job import AdoptedJob
from ctmon.wire import events as E

CTMON_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GDB_TIMEOUT_S = 60.0  # gdb reading a big process's symbols on a busy machine
# How long the supervisor waits for the agent: the main thread runs the
# pending call at its next bytecode, so a job blocked in one long C call
# (input(), a sleep, a collective) joins when that call returns.
JOIN_TIMEOUT_S = 60.0
LEAVE_TIMEOUT_S = 10.0  # the agent leaves at its next flush (a quarter of a second)
AGENT_ENV = "CTMON_AGENT_SOCKET"
PAGE = 4096


class JoinRefused(Exception):
    """One line for the user: why ctmon does not join this process, and what to do."""


@dataclass
class Target:
    pid: int
    exe: str
    argv: list[str]
    cwd: str


# ------------------------------------------------------------------ refusals


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
    argv = _read_list(f"{proc}/cmdline")
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
    if shutil.which("gdb") is None:
        raise JoinRefused("joining a running process needs gdb: apt-get install gdb (or your system's package manager)")
    _check_ptrace_scope(pid)
    return Target(pid, exe or "", argv, _read_link(f"{proc}/cwd") or "/")


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


def _read_list(path: str) -> list[str]:
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
    env = _read_list(f"/proc/{pid}/environ")
    return any(v.startswith(AGENT_ENV + "=") for v in env)


def _rank_children(pid: int) -> list[int]:
    """A launcher's workers (torchrun's, or any launcher's): children with
    RANK in their environment, where the process itself has none (a rank's
    own children, DataLoader workers say, inherit its RANK)."""
    if any(v.startswith("RANK=") for v in _read_list(f"/proc/{pid}/environ")):
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
    return sorted(c for c in children if any(v.startswith("RANK=") for v in _read_list(f"/proc/{c}/environ")))


def _joined_session(pid: int) -> dict[str, object] | None:
    """A live session of this user whose job is that process (a join, or a
    job that called ctmon.install())."""
    from ctmon.launch.runtime import list_sessions

    for s in list_sessions(clean=False):
        if s.get("job_pid") == pid:
            return s
    return None


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


# ----------------------------------------------------------------- injection


def bootstrap_code(socket_path: str, session_dir: str) -> str:
    """What the job's main thread runs: ctmon's agent, imported from where
    this ctmon is, without a trace in ``__main__``'s names or ``sys.path``."""
    inner = (
        "import sys\n"
        f"root = {CTMON_PARENT!r}\n"
        "added = root not in sys.path\n"
        "if added:\n"
        "    sys.path.insert(0, root)\n"
        "try:\n"
        "    from ctmon.agent.join import join\n"
        "except BaseException:\n"
        "    join = None\n"
        "finally:\n"
        "    if added:\n"
        "        try:\n"
        "            sys.path.remove(root)\n"
        "        except ValueError:\n"
        "            pass\n"
        "if join is not None:\n"
        f"    join({socket_path!r}, {session_dir!r})\n"
    )
    # One expression: PyRun_SimpleString runs in __main__'s namespace, and
    # an exec in a fresh dict leaves it as it was. Hex: no quoting for gdb.
    wrapped = (
        f"try:\n    exec(bytes.fromhex({inner.encode().hex()!r}).decode(), {{}})\nexcept BaseException:\n    pass\n"
    )
    return f"exec(bytes.fromhex('{wrapped.encode().hex()}').decode(), {{}})"


# Set before gdb attaches (-iex): after it, gdb has read every library's
# symbols already, and a job that imported torch maps hundreds of MB of them
# (14 s held instead of 1 s, measured).
GDB_INIT = ["set debuginfod enabled off", "set auto-solib-add off"]


CALLED = ("mmap", "Py_AddPendingCall", "PyRun_SimpleString")


def gdb_commands(code: str, addresses: dict[str, int] | None = None) -> list[str]:
    """gdb's commands once attached: one anonymous page is mapped, the code
    written there and scheduled as a pending call. With ``addresses`` (of
    :data:`CALLED`) the calls go through them; without, gdb reads libc's and
    libpython's symbols first (half a second more of the job stopped, measured
    by benchmarks/join_pause.py gdb)."""
    size = (len(code) + 1 + PAGE - 1) // PAGE * PAGE
    if addresses is None:
        lookup = ["sharedlibrary libc", "sharedlibrary libpython"]
        mmap, pending, run = "mmap", "Py_AddPendingCall", "PyRun_SimpleString"
    else:
        lookup = []
        mmap, pending, run = (f"{addresses[name]:#x}" for name in CALLED)
    return [
        "set unwindonsignal on",
        *lookup,
        f"set $ctmon_buf = ((void*(*)(void*, unsigned long, int, int, int, long)){mmap})(0, {size}, 3, 34, -1, 0)",
        f'set {{char[{len(code) + 1}]}} $ctmon_buf = "{code}"',
        'printf "ctmon-buf %p\\n", $ctmon_buf',
        f"set $ctmon_rc = ((int(*)(void*, void*)){pending})((void*){run}, $ctmon_buf)",
        'printf "ctmon-rc %d\\n", $ctmon_rc',
    ]


def call_addresses(pid: int) -> dict[str, int] | None:
    """Where :data:`CALLED` are in the process: each library's load address
    (/proc/PID/maps) plus the symbol's value in its ELF dynamic symbol table
    (libpython's, or the executable's where Python is linked in). None where
    anything is not as expected: gdb then looks the symbols up itself."""
    try:
        loaded = _load_addresses(pid)
        exe = os.path.realpath(f"/proc/{pid}/exe")
        libc = next(p for p in loaded if re.match(r"libc(\.so|-)", os.path.basename(p)))
        libpython = next((p for p in loaded if "/libpython3" in p), exe)
        out: dict[str, int] = {}
        for path, names in ((libc, CALLED[:1]), (libpython, CALLED[1:])):
            values, first_vaddr = _dynamic_symbols(f"/proc/{pid}/root{path}", set(names))
            if set(values) != set(names) or path not in loaded:
                return None
            out.update({name: loaded[path] - first_vaddr + value for name, value in values.items()})
        return out
    except (OSError, ValueError, StopIteration, struct.error, IndexError):
        return None


def _load_addresses(pid: int) -> dict[str, int]:
    """Each mapped file's start address: its mapping at file offset 0."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and int(parts[2], 16) == 0 and parts[5].startswith("/"):
                out.setdefault(parts[5].rstrip("\n"), int(parts[0].split("-")[0], 16))
    return out


def _dynamic_symbols(path: str, names: set[str]) -> tuple[dict[str, int], int]:
    """The values of ``names`` defined in an ELF64 little-endian file's
    .dynsym, and the virtual address its file offset 0 is loaded at (what
    the symbols' values are relative to)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    first_vaddr = next(
        vaddr
        for p_type, offset, vaddr in (struct.unpack_from("<I4xQQ", data, phoff + i * phentsize) for i in range(phnum))
        if p_type == 1 and offset == 0  # PT_LOAD of the file's start
    )
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    found: dict[str, int] = {}
    for _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if sh_type != 11 or not entsize:  # SHT_DYNSYM
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, entsize):
            name_at, sym_info, _other, shndx, value, _size = struct.unpack_from("<IBBHQQ", data, at)
            if not value or not shndx or sym_info & 0xF != 2:
                continue  # undefined here (another library's), or not a plain function (an IFUNC is its resolver)
            name = data[strings + name_at : data.index(b"\0", strings + name_at)].decode(errors="replace")
            if name in names:
                found.setdefault(name, value)
    return found, first_vaddr


def inject(pid: int, code: str) -> float:
    """Schedule ``code`` on the process's main thread; the seconds gdb held
    the process (attach to detach, an upper bound). JoinRefused on failure."""
    argv = ["gdb", "-batch", "-nx"]
    for cmd in GDB_INIT:
        argv += ["-iex", cmd]
    argv += ["-p", str(pid)]
    for cmd in gdb_commands(code, call_addresses(pid)):
        argv += ["-ex", cmd]
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace", timeout=GDB_TIMEOUT_S
        )
    except FileNotFoundError:
        raise JoinRefused("joining a running process needs gdb: apt-get install gdb") from None
    except subprocess.TimeoutExpired:
        raise JoinRefused(f"gdb did not finish joining process {pid} in {GDB_TIMEOUT_S:.0f} s") from None
    held = time.monotonic() - t0
    out = done.stdout + done.stderr
    if "ptrace: Operation not permitted" in out or "Could not attach to process" in out:
        raise JoinRefused(ptrace_refusal(pid, "ptrace: operation not permitted"))
    if "ptrace: No such process" in out:
        raise JoinRefused(f"no process {pid}")
    match = re.search(r"ctmon-rc (-?\d+)", out)
    if match is None or match.group(1) != "0" or "ctmon-buf 0xffffffffffffffff" in out:
        last = next((ln for ln in reversed(out.splitlines()) if ln.strip()), "no output")
        raise JoinRefused(f"gdb could not schedule ctmon in process {pid}: {last.strip()[:200]}")
    return held


# ------------------------------------------------------------ the supervisor's job


class JoinedJob(AdoptedJob):
    """A running process ctmon joined: watched through a pidfd like a job
    that called ctmon.install(); the agent is put in by :func:`inject` when
    the supervisor is ready for it, and taken out when the user leaves
    (SIGINT, SIGTERM or SIGHUP to the supervisor, a viewer's stop)."""

    def __init__(self, pid: int, sel: Any, emit: Callable[[E.Event], None]) -> None:
        super().__init__(pid, sel, emit)
        self.agents: Any = None  # the supervisor's Intake: the agents' connections
        self.held_s: float | None = None  # how long gdb held the process
        self._asked_at = 0.0
        self._seen = False  # the agent has said hello
        self._leaving_since: float | None = None
        self._ended = False
        self._leave_signal = False

    def spawn(self, env_extra: dict[str, str]) -> None:
        super().spawn(env_extra)
        code = bootstrap_code(env_extra["CTMON_AGENT_SOCKET"], env_extra["CTMON_SESSION_DIR"])
        self.held_s = inject(self.proc.pid, code)
        self._asked_at = time.monotonic()
        message = f"joining process {self.proc.pid}: gdb held it {self.held_s:.2f} s to schedule ctmon's agent"
        self.emit(E.Note(t=time.time(), level="info", source="join", message=message))

    def install_signals(self, wake_fd: int) -> None:
        """SIGINT, SIGTERM, SIGHUP: leave the job (it runs on)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda signum, frame: self._on_signal())
        signal.set_wakeup_fd(wake_fd, warn_on_full_buffer=False)

    def _on_signal(self) -> None:
        self._leave_signal = True

    def handle_signals(self) -> None:
        if self._leave_signal and self._leaving_since is None:
            self.leave("ctmon was asked to stop")

    def leave(self, why: str) -> None:
        """Ask the agent to take its hooks out: its connection's other half is shut."""
        if self._leaving_since is not None:
            return
        self._leaving_since = time.monotonic()
        self.emit(E.Note(t=time.time(), level="info", source="join", message=f"{why}: leaving process {self.proc.pid}"))
        for a in list(getattr(self.agents, "agents", ())):
            try:
                a.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        if not self._seen:
            self._ended = True  # nothing joined yet: nothing to take out

    def check_exec(self, agent_pids: list[int | None], alive: bool) -> None:
        if self.proc.pid in agent_pids:
            self._seen = True
        elif not self._seen and self._leaving_since is None and time.monotonic() - self._asked_at > JOIN_TIMEOUT_S:
            self.emit(
                E.Note(
                    t=time.time(),
                    level="error",
                    source="join",
                    message=f"process {self.proc.pid} did not run ctmon's agent within {JOIN_TIMEOUT_S:.0f} s "
                    "(its main thread may be blocked in one long call); it was left as it was",
                )
            )
            self._ended = True
        if self._leaving_since is not None and time.monotonic() - self._leaving_since > LEAVE_TIMEOUT_S:
            self._ended = True  # the agent did not answer: the recording ends anyway

    def agent_closed(self, pid: int | None) -> None:
        if pid == self.proc.pid and self._seen:
            self._ended = True  # it left (asked, or on its own), or the job ended

    def exited(self) -> bool:
        return self._ended or super().exited()

    # a viewer's controls: a stop leaves the job, a signal or typed line is refused

    def stop(self, grace: object) -> None:
        self.leave("a viewer asked to stop")

    def _refuse(self, what: str) -> None:
        if self._refused:
            return
        self._refused = True
        message = f"a viewer's {what} was not passed on: ctmon joined this job and does not signal it or type into it"
        self.emit(E.Note(t=time.time(), level="warning", source="ctmon", message=message))


def job_command(target: Target) -> tuple[str, list[str]]:
    """How the joined job was started, for the session's command line."""
    if target.argv:
        return target.argv[0], target.argv[1:]
    return target.exe or sys.executable, []
