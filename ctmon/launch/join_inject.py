"""How the agent gets into a process ctmon joins (ctmon/launch/join.py).

``gdb -batch -p PID`` stops the process for a moment, maps one page into it,
writes a short piece of Python there and hands it to ``Py_AddPendingCall``
with ``PyRun_SimpleString`` as the function (see join.py's docstring).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass

from ctmon.launch.join_remote import remote_exec, remote_exec_python
from ctmon.launch.join_target import JoinRefused, ptrace_refusal

CTMON_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GDB_TIMEOUT_S = 60.0  # gdb reading a big process's symbols on a busy machine
PAGE = 4096


def bootstrap_code(socket_path: str, session_dir: str, rank: int | None = None, world_size: int | None = None) -> str:
    """What the job's main thread runs: ctmon's agent, imported from where
    this ctmon is, without a trace in ``__main__``'s names or ``sys.path``;
    ``rank`` where ctmon numbers the processes it joins (join_target.ranks_given)."""
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
        f"    join({socket_path!r}, {session_dir!r}, {rank!r}, {world_size!r})\n"
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


@dataclass
class Scheduled:
    """How ctmon's agent was put into a process."""

    seconds: float  # gdb: how long it held the process (an upper bound); sys.remote_exec: the call, no stop
    by: str  # "gdb", "lldb" or "sys.remote_exec"
    script: str | None = None  # sys.remote_exec's file, kept until the process has read it


def inject(pid: int, code: str, script_dir: str) -> Scheduled:
    """Schedule ``code`` on the process's main thread: by ``sys.remote_exec``
    where the process is CPython 3.14+ with remote debugging on
    (join_remote.py; ``script_dir`` holds its file), else by gdb, or by
    lldb where gdb is not installed (join_lldb.py).
    JoinRefused on failure."""
    python = remote_exec_python(pid)
    if python is not None:
        took, script = remote_exec(python, pid, code, script_dir)
        return Scheduled(took, "sys.remote_exec", script)
    if shutil.which("gdb") is None and shutil.which("lldb") is not None:
        from ctmon.launch.join_lldb import lldb_inject  # it reads this module's addresses

        return Scheduled(lldb_inject(pid, code), "lldb")
    return Scheduled(_gdb_inject(pid, code), "gdb")


def run_debugger(argv: list[str], pid: int) -> tuple[subprocess.CompletedProcess[str], float]:
    """The debugger run to its end (gdb, or lldb: ``argv[0]``), and how long
    it took: an upper bound of how long it held the process."""
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace", timeout=GDB_TIMEOUT_S
        )
    except FileNotFoundError:
        raise JoinRefused("joining a running process needs gdb: apt-get install gdb") from None
    except subprocess.TimeoutExpired:
        raise JoinRefused(f"{argv[0]} did not finish joining process {pid} in {GDB_TIMEOUT_S:.0f} s") from None
    return done, time.monotonic() - t0


def _gdb_inject(pid: int, code: str) -> float:
    """The seconds gdb held the process (attach to detach, an upper bound)."""
    argv = ["gdb", "-batch", "-nx"]
    for cmd in GDB_INIT:
        argv += ["-iex", cmd]
    argv += ["-p", str(pid)]
    for cmd in gdb_commands(code, call_addresses(pid)):
        argv += ["-ex", cmd]
    done, held = run_debugger(argv, pid)
    out = done.stdout + done.stderr
    if "ptrace: Operation not permitted" in out or "Could not attach to process" in out:
        raise JoinRefused(ptrace_refusal(pid, "ptrace: operation not permitted"))
    if "ptrace: No such process" in out:
        raise JoinRefused(f"no process {pid}")
    match = re.search(r"ctmon-rc (-?\d+)", out)
    if match is None or match.group(1) != "0" or "ctmon-buf 0xffffffffffffffff" in out:
        raise JoinRefused(gdb_failure(pid, done.stderr or out))
    return held


# gdb 12 and 13 fail every call into a process on recent Intel Xeons (their
# AMX registers: gdb cannot restore the extended state it saved), before the
# call runs; the process goes on as it was. Seen with gdb 13.1 on an H200
# host, where gdb 16.3 joins the same process.
XSTATE_FAILURE = "Couldn't write extended state status"


def gdb_failure(pid: int, said: str) -> str:
    """The line for a gdb that attached but did not schedule ctmon: the
    first error gdb printed (later ones follow from it), never a warning."""
    if XSTATE_FAILURE in said:
        return (
            f"gdb could not call into process {pid} ({XSTATE_FAILURE}): this gdb cannot restore this CPU's "
            "extended registers (gdb 13 and older on recent Intel Xeons); install a newer gdb (16 works) and join again"
        )
    lines = [ln.strip() for ln in said.splitlines() if ln.strip() and not ln.lower().startswith("warning")]
    first = next((ln for ln in lines if not ln.startswith(("[", "ctmon-", "0x"))), lines[-1] if lines else "no output")
    return f"gdb could not schedule ctmon in process {pid}: {first[:200]}"
