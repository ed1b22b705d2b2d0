"""Joining a process through lldb, where gdb is not installed.

The same three calls as gdb's (join_inject.py): one page mapped in the
process, the code written there (``memory write`` of a file: no quoting),
and ``Py_AddPendingCall(PyRun_SimpleString, page)`` -- by the addresses
ctmon reads from /proc/PID/maps and the libraries' ELF symbols, or by name
where that reading fails. lldb then detaches and the process runs on.
"""

from __future__ import annotations

import os
import re
import tempfile

from ctmon.launch.join_inject import CALLED, PAGE, call_addresses, run_debugger
from ctmon.launch.join_target import JoinRefused, ptrace_refusal


def lldb_commands(code_file: str, size: int, addresses: dict[str, int] | None) -> list[str]:
    mmap, pending, run = (f"{addresses[n]:#x}" for n in CALLED) if addresses else CALLED
    return [
        f"expr void* $ctmon_buf = ((void*(*)(void*, unsigned long, int, int, int, long)){mmap})(0, {size}, 3, 34, -1, 0)",
        f"memory write -i {code_file} -- $ctmon_buf",
        f"expr (int)((int(*)(void*, void*)){pending})((void*){run}, $ctmon_buf)",
        "process detach",
    ]


def lldb_inject(pid: int, code: str) -> float:
    """Schedule ``code`` on the process's main thread with lldb: the seconds
    lldb held it (attach to detach, an upper bound). JoinRefused on failure."""
    data = code.encode() + b"\0"
    size = (len(data) + PAGE - 1) // PAGE * PAGE
    fd, code_file = tempfile.mkstemp(prefix="ctmon-join-", suffix=".bin")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        argv = ["lldb", "--batch", "--no-lldbinit", "-p", str(pid)]
        for cmd in lldb_commands(code_file, size, call_addresses(pid)):
            argv += ["-o", cmd]
        done, held = run_debugger(argv, pid)
    finally:
        os.unlink(code_file)
    said = done.stdout + done.stderr
    if "Operation not permitted" in said:
        raise JoinRefused(ptrace_refusal(pid, "ptrace: operation not permitted"))
    if re.search(r"\(int\) \$\d+ = 0\b", done.stdout) is None:
        errors = [ln.strip() for ln in said.splitlines() if ln.strip().startswith("error:")]
        why = errors[0] if errors else next((ln for ln in reversed(said.splitlines()) if ln.strip()), "no output")
        raise JoinRefused(f"lldb could not schedule ctmon in process {pid}: {why.strip()[:200]}")
    return held
