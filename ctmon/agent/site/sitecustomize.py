"""Loads ctmon's agent into the monitored job, then the user's own sitecustomize.

The supervisor prepends this directory to the job's PYTHONPATH, so Python's
``site`` imports this module at start-up in *every* Python process the job
starts: Inductor's compile workers, DataLoader spawn workers, subprocesses.
It must therefore cost nothing outside the job: it reads the environment
first and imports nothing heavy, and it never raises (a failure prints one
``ctmon: hook disabled (...)`` line and the job runs without the agent).
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
ENV_SOCKET = "CTMON_AGENT_SOCKET"
ENV_PID = "CTMON_AGENT_PID"
ENV_RANK = "CTMON_AGENT_RANK"


def monitored() -> bool:
    """Whether this process is the monitored job (and claims it if so).

    The first process started with the socket set claims the job by writing
    its pid into the environment; its children inherit the claim and stay
    quiet (DataLoader workers, compile workers, subprocesses) -- except a
    worker a launcher started for a rank of its own (torchrun, accelerate,
    deepspeed set RANK and WORLD_SIZE for each), which claims that rank the
    same way, so its own children stay quiet in turn. A process that exec'd
    into another Python program keeps its pid, so it is monitored again and
    its events after the exec are followed.
    """
    if not os.environ.get(ENV_SOCKET):
        return False
    pid = str(os.getpid())
    owner = os.environ.get(ENV_PID)
    rank = launched_rank()
    if owner and owner != pid and (rank is None or os.environ.get(ENV_RANK) == rank):
        return False
    os.environ[ENV_PID] = pid
    if rank is not None:
        os.environ[ENV_RANK] = rank
    return True


def may_become_rank() -> bool:
    """A quiet child that may still turn out to be a rank: one started by
    ``mp.spawn`` / ``start_processes`` or a Lightning-style re-exec of the
    script, whose rank is known only once it calls ``init_process_group``.
    Not a child of a rank (its DataLoader workers), not Inductor's compile
    workers. Such a process gets a pending agent when it imports torch
    (ctmon/agent/pending.py); one that never initialises a process group
    (a spawned DataLoader worker) never sends a byte."""
    if not os.environ.get(ENV_SOCKET) or os.environ.get(ENV_RANK):
        return False
    argv = " ".join(getattr(sys, "orig_argv", sys.argv))
    return "compile_worker" not in argv


class _TorchTrigger:
    """Starts the pending agent at the process's own ``import torch``: a
    process that never imports torch pays one string compare per import."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname != "torch":
            return None
        try:
            sys.meta_path.remove(self)  # type: ignore[arg-type]  # duck-typed: typing costs start-up time
        except ValueError:
            pass
        try:
            _start_agent(pending=True)
        except KeyboardInterrupt:
            raise  # Ctrl-C during `import torch`: the job's own, as without ctmon
        except BaseException as exc:  # noqa: BLE001 - never keep torch from importing
            try:
                sys.stderr.write(f"ctmon: hook disabled ({type(exc).__name__}: {exc})\n")
            except Exception:
                pass
        # the agent's own import watcher now stands first: let it see torch
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is not None:
                spec = find(fullname, path, target)
                if spec is not None:
                    return spec
        return None


def launched_rank() -> "str | None":
    """The rank a distributed launcher gave this process, if it gave one."""
    rank = os.environ.get("RANK", "")
    return rank if rank.isdigit() and os.environ.get("WORLD_SIZE", "").isdigit() else None


def _drop_own_dir() -> None:
    """The user's sys.path is as under plain python (this dir is ctmon's)."""
    sys.path[:] = [p for p in sys.path if not _is_here(p)]


def _is_here(p: str) -> bool:
    try:
        return os.path.abspath(p or ".") == _HERE
    except (TypeError, ValueError):
        return False


def _start_agent(pending: bool = False) -> None:
    # ctmon may run from a source tree that is not on the job's sys.path: put
    # it there just long enough to import the agent (submodules imported
    # later are found through the package, not sys.path).
    root = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
    sys.path.insert(0, root)
    try:
        from ctmon.agent.boot import start
    finally:
        try:
            sys.path.remove(root)
        except ValueError:
            pass
    start(pending)


def _chain_user_sitecustomize() -> None:
    """Run the sitecustomize that python would have found without ctmon."""
    import importlib.util

    me = sys.modules.pop("sitecustomize", None)
    try:
        spec = importlib.util.find_spec("sitecustomize")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        if me is not None:
            sys.modules["sitecustomize"] = me
        return
    # Errors in the user's module surface exactly as python's site reports them.
    __import__("sitecustomize")


def _main() -> None:
    _drop_own_dir()
    try:
        if monitored():
            _start_agent()
        elif may_become_rank():
            sys.meta_path.insert(0, _TorchTrigger())  # type: ignore[arg-type]
    except KeyboardInterrupt:
        _end_by_sigint()
    except BaseException as exc:  # noqa: BLE001 - never keep the job from starting
        try:
            sys.stderr.write(f"ctmon: hook disabled ({type(exc).__name__}: {exc})\n")
        except Exception:
            pass
    _chain_user_sitecustomize()


def _end_by_sigint() -> None:
    """Ctrl-C while the agent starts: the user asked the job to stop, and
    without ctmon it would have (python ends an uncaught KeyboardInterrupt
    by SIGINT). Swallowing it would run the job on."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(130)  # only if SIGINT could not end the process


_main()
