"""Entry point of the monitored process: install the agent, then run the target
exactly as ``python SCRIPT ARGS`` or ``python -m MODULE ARGS`` would.

The supervisor starts ``python -c "<import this; main()>" script|module TARGET
ARGS...``. What a user's code can observe is kept as under plain python:

* ``sys.argv`` is ``[SCRIPT, *ARGS]`` (for -m, the module's file path);
* ``sys.path[0]`` is the script's real directory (for -m, the cwd), unless
  PYTHONSAFEPATH is set;
* the code runs in a fresh ``__main__`` module with the same globals python
  sets (so pickling and multiprocessing's spawn find ``__main__`` as usual);
* an uncaught exception prints the same traceback (ctmon's frames removed)
  and exits 1; KeyboardInterrupt exits by SIGINT; SystemExit is untouched.
"""

from __future__ import annotations

import atexit
import builtins
import os
import signal
import sys
import types
from importlib.machinery import SourceFileLoader
from typing import Any

_BOOT_FILE = os.path.abspath(__file__)
_die_by_sigint = False

BOOT_CODE = "__import__('ctmon.agent.boot').agent.boot.main()"


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("script", "module"):
        sys.stderr.write("ctmon: internal error: bad boot arguments\n")
        raise SystemExit(2)
    mode, target, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    atexit.register(_exit_by_sigint_if_interrupted)  # registered first: runs last
    sys.argv = [target, *args]
    _start_agent()
    try:
        if mode == "module":
            _run_module(target)
        else:
            _run_script(target)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - report it as python would
        _print_uncaught(exc)
        if isinstance(exc, KeyboardInterrupt):
            global _die_by_sigint
            _die_by_sigint = True
        raise SystemExit(1) from None


def _start_agent() -> None:
    path = os.environ.get("CTMON_AGENT_SOCKET")
    if not path:
        return
    try:
        from ctmon.agent.channel import connect
        from ctmon.agent.core import Agent
        from ctmon.agent.torch_hooks import watch_torch_import

        sock = connect(path)
        if sock is None:
            sys.stderr.write("ctmon: could not reach the monitor; running without it\n")
            return
        agent = Agent(sock)
        agent.start(os.environ.get("CTMON_SESSION_DIR"))
        watch_torch_import(agent)
        atexit.register(agent.close)
    except Exception as exc:  # never keep the job from running
        sys.stderr.write(f"ctmon: hook disabled ({type(exc).__name__}: {exc})\n")


def _fresh_main(file: str | None) -> types.ModuleType:
    main = types.ModuleType("__main__")
    g = main.__dict__
    g["__builtins__"] = builtins
    g["__annotations__"] = {}
    g["__cached__"] = None
    g["__package__"] = None
    g["__spec__"] = None
    if file is not None:
        g["__file__"] = file
        g["__loader__"] = SourceFileLoader("__main__", file)
    sys.modules["__main__"] = main
    return main


def _run_script(target: str) -> None:
    path = os.path.abspath(target)
    if not getattr(sys.flags, "safe_path", False):
        real_dir = os.path.dirname(os.path.realpath(target))
        if os.path.isdir(target):
            real_dir = os.path.abspath(target)
        if sys.path and sys.path[0] == "":
            sys.path[0] = real_dir
        else:
            sys.path.insert(0, real_dir)
    if os.path.isdir(target) or not target.endswith(".py") and _is_zip(target):
        import runpy

        runpy.run_path(target, run_name="__main__")
        return
    with open(path, "rb") as f:
        source = f.read()
    code = compile(source, path, "exec", dont_inherit=True)
    main = _fresh_main(path)
    exec(code, main.__dict__)


def _is_zip(path: str) -> bool:
    import zipfile

    try:
        return zipfile.is_zipfile(path)
    except OSError:
        return False


def _run_module(name: str) -> None:
    import runpy

    if not getattr(sys.flags, "safe_path", False):
        if sys.path and sys.path[0] == "":
            sys.path[0] = os.getcwd()
        else:
            sys.path.insert(0, os.getcwd())
    _fresh_main(None)
    runpy._run_module_as_main(name, alter_argv=True)  # type: ignore[attr-defined]


def _is_ours(frame: Any) -> bool:
    name = frame.f_code.co_filename
    return name == _BOOT_FILE or name == "<string>"


def _print_uncaught(exc: BaseException) -> None:
    tb = exc.__traceback__
    while tb is not None and _is_ours(tb.tb_frame):
        tb = tb.tb_next
    exc.__traceback__ = tb  # the default excepthook prints the exception's own traceback
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:
        import traceback

        traceback.print_exception(type(exc), exc, tb)


def _exit_by_sigint_if_interrupted() -> None:
    if not _die_by_sigint:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
