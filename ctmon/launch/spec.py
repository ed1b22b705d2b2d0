"""What to run, checked before anything starts.

Every problem is reported as a one-line ``UsageError``; the job is never
started half-prepared (an unwritable recording path is refused up front).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass, field

# Prepended to the job's PYTHONPATH: its sitecustomize starts the agent.
SITE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agent", "site")


def job_python_path(existing: str | None) -> str:
    """The hook directory first, the user's own PYTHONPATH after it."""
    return SITE_DIR + (os.pathsep + existing if existing else "")


class UsageError(Exception):
    """Bad input from the user: printed as ``ctmon: <message>``, exit 2."""


@dataclass
class JobSpec:
    mode: str  # "script", "module", or "command" (a launcher: torchrun, accelerate, a shell script)
    target: str
    args: list[str] = field(default_factory=list)
    cwd: str = field(default_factory=os.getcwd)
    python: str = sys.executable

    def argv(self) -> list[str]:
        """The job's real command line: the agent comes in through PYTHONPATH
        (see ctmon/agent/site), so python itself sets up argv, sys.path,
        __main__, tracebacks and the exit status -- in every Python process
        a launcher starts, too."""
        if self.mode == "module":
            return [self.python, "-m", self.target, *self.args]
        if self.mode == "command":
            return [self.target, *self.args]
        return [self.python, *script_operand(self.target), *self.args]

    def display(self) -> list[str]:
        if self.mode == "module":
            return ["python", "-m", self.target, *self.args]
        if self.mode == "command":
            return [os.path.basename(self.target), *self.args]
        return ["python", *script_operand(self.target), *self.args]

    @property
    def name(self) -> str:
        if self.mode == "module":
            return self.target
        return os.path.basename(self.target.rstrip("/"))


def script_operand(path: str) -> list[str]:
    """How python is told to run the file ``path``. A name that starts with
    ``-`` would be read as an option (``-c print(1)#.py`` runs its own name as
    code), so ``--`` ends python's options first; sys.argv, sys.path[0] and
    __main__ are then what they are for any file. ``-`` alone means stdin
    even after ``--``: that file is named by its path."""
    if path == "-":
        return [os.path.join(os.curdir, path)]
    if path.startswith("-"):
        return ["--", path]
    return [path]


def command_path(name: str) -> str | None:
    """The program a launcher's name stands for (torchrun, accelerate, deepspeed,
    ./run.sh): a Python script stays a script; None when there is no such program."""
    if name.endswith((".py", ".pyz")) or os.path.isdir(name):
        return None
    if os.sep in name:
        return os.path.abspath(name) if os.path.isfile(name) and os.access(name, os.X_OK) else None
    return shutil.which(name)


def check_script(path: str) -> None:
    if not os.path.exists(path):
        raise UsageError(f"can't open file '{path}': no such file")
    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "__main__.py")):
            raise UsageError(f"'{path}' is a directory without a __main__.py")
        return
    if not os.access(path, os.R_OK):
        raise UsageError(f"can't open file '{path}': permission denied")


def check_module(name: str, cwd: str) -> None:
    if not name or name.startswith(".") or not all(p.isidentifier() for p in name.split(".")):
        raise UsageError(f"'{name}' is not a module name")
    sys.path.insert(0, cwd)
    try:
        found = importlib.util.find_spec(name.split(".")[0]) is not None
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path.pop(0)
    if not found:
        raise UsageError(f"no module named '{name.split('.')[0]}'")


def check_writable(path: str) -> None:
    """Refuse an output path before the job starts, not after an hour of training."""
    if os.path.isdir(path):
        raise UsageError(f"cannot write the recording to '{path}': it is a directory")
    parent = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(parent):
        # like `mkdir -p`: `-o runs/today/x.jsonl` in a fresh checkout just works
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as e:
            raise UsageError(
                f"cannot write the recording to '{path}': cannot create {parent}: {e.strerror or e}"
            ) from None
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise UsageError(f"cannot write the recording to '{path}': permission denied")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write the recording to '{path}': directory {parent} is not writable")


MIN_TORCH = (2, 5)  # structured compile trace with the record shape ctmon relies on


def check_torch() -> None:
    """torch must be importable by the job's Python, and recent enough.

    Read from the package metadata, so this costs milliseconds, not an import.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("torch")
    except PackageNotFoundError:
        raise UsageError(
            f"torch is not installed in this Python environment ({sys.executable}); install it there, "
            "or run the ctmon of the environment your job uses"
        ) from None
    nums = []
    for part in v.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        nums.append(int(digits) if digits else 0)
    if tuple(nums) < MIN_TORCH:
        raise UsageError(f"torch {v} is too old: ctmon needs torch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer")


def check_not_target(output: str, spec: JobSpec) -> None:
    # a program (./launch.sh) is the job's own file as much as a script is
    if spec.mode in ("script", "command") and os.path.exists(output) and os.path.exists(spec.target):
        if os.path.samefile(output, spec.target):
            raise UsageError(f"refusing to write the recording over the script itself ({output})")
