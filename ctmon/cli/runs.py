"""``ctmon runs``: the recordings ctmon keeps in its state directory, listed,
and pruned with ``--keep N`` / ``--older-than AGE``.

Only what ctmon named itself is touched: ``*.jsonl`` recordings there (with
their ``.output.log``) and ``bench-*`` directories of ``ctmon bench``. What a
live job still writes is never removed: every run holds a lock on its files
(and ``ctmon bench`` on its directory), which says so whatever runtime
directory the job has (a SLURM job's is its own). ``--dry-run`` says what
would go. A file that cannot be read is listed as unreadable, and can be
removed like any other; every string from a file is made safe for the
terminal (``--json`` keeps it exact).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import sys
import time
from dataclasses import dataclass

from ctmon.cli import CliError
from ctmon.launch import files, runtime
from ctmon.words.textsafe import PLACEHOLDER, clean

HELP = """usage: ctmon runs [--json] [--keep N | --older-than AGE] [--dry-run]

List the recordings ctmon keeps in its state directory (newest first): when,
size, status (running, exit N, or unreadable) and command. Recordings written
with -o elsewhere are yours to manage and are not listed. A run whose job is
still running is never removed.

options:
  --json             the list as JSON
  --keep N           remove all but the N newest runs
  --older-than AGE   remove runs older than AGE: 30m, 12h, 7d, 2w
  --dry-run          say what would be removed, remove nothing
  -h, --help         show this help and exit
"""
_AGE = re.compile(r"^(\d+(?:\.\d+)?)([mhdw])$")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass
class Run:
    path: str  # the recording, or a bench directory
    paths: list[str]  # everything that goes with it
    mtime: float
    size: int
    command: str
    exit_code: int | None
    live: bool
    readable: bool = True  # the recording's header could be read (a bench directory: always)


def main(argv: list[str]) -> int:
    as_json = dry = False
    keep: int | None = None
    older: float | None = None
    it = iter(argv)
    for a in it:
        if a in ("-h", "--help"):
            sys.stdout.write(HELP)
            return 0
        if a == "--json":
            as_json = True
        elif a == "--dry-run":
            dry = True
        elif a == "--keep":
            keep = _keep(next(it, None))
        elif a == "--older-than":
            older = _age(next(it, None))
        else:
            raise CliError(f"runs: unknown option {a} (try: ctmon runs --help)")
    if keep is not None and older is not None:
        raise CliError("runs: --keep and --older-than are alternatives: give one")
    state = runtime.state_dir()
    runs = find_runs(state)
    if keep is None and older is None:
        _list(runs, state, as_json)
        return 0
    now = time.time()
    doomed = runs[keep:] if keep is not None else [r for r in runs if older is not None and now - r.mtime > older]
    return _prune(doomed, len(runs), dry)


def _prune(doomed: list[Run], total: int, dry: bool) -> int:
    freed = gone = 0
    failed = False
    for r in doomed:
        # looked at again just before: a run may have started since the listing
        if r.live or _live(r):
            sys.stderr.write(f"ctmon: keeping {_shown(r.path)}: its job is still running\n")
            continue
        if not dry:
            error = _remove(r.paths)
            if error is not None:
                sys.stderr.write(f"ctmon: cannot remove {_shown(r.path)}: {_shown(error)}\n")
                failed = True
                continue
        freed += r.size
        gone += 1
        sys.stdout.write(f"{'would remove' if dry else 'removed'} {_shown(r.path)}\n")
    sys.stderr.write(f"ctmon: {'would free' if dry else 'freed'} {_size(freed)} ({gone} of {total} runs)\n")
    return 1 if failed else 0


def _remove(paths: list[str]) -> str | None:
    """Remove a run's files (a directory with all it holds; a symlink, not
    what it points to). The first error, if any: what is already gone is no
    error."""
    errors: list[str] = []

    def note(func: object, path: str, exc: tuple[type[BaseException], BaseException, object]) -> None:
        if not isinstance(exc[1], FileNotFoundError):
            errors.append(f"{path}: {getattr(exc[1], 'strerror', None) or exc[1]}")

    for p in paths:
        try:
            if stat.S_ISDIR(os.lstat(p).st_mode):
                shutil.rmtree(p, onerror=note)
            else:
                os.unlink(p)
        except FileNotFoundError:
            pass
        except OSError as e:
            errors.append(f"{p}: {e.strerror or e}")
    return errors[0] if errors else None


def _keep(text: str | None) -> int:
    try:
        n = int(text or "")
    except ValueError:
        raise CliError(f"runs: --keep takes a number of runs, not {text!r}") from None
    if n < 0:
        raise CliError("runs: --keep must be 0 or more")
    return n


def _age(text: str | None) -> float:
    m = _AGE.match(text or "")
    if m is None:
        raise CliError(f"runs: --older-than takes an age like 30m, 12h, 7d or 2w, not {text!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def find_runs(state: str) -> list[Run]:
    """The runs in ``state``, newest first. Whatever a file there holds, or
    whatever happens to it while it is looked at, it is listed (unreadable,
    if so) or, once gone, left out: never an error."""
    try:
        names = os.listdir(state)
    except OSError:
        return []
    sessions = _session_recordings()
    out = []
    for name in names:
        path = os.path.join(state, name)
        if name.endswith(".jsonl"):
            run = _recording_run(path, sessions)
        elif name.startswith("bench-"):
            run = _bench_run(path)
        else:
            continue
        if run is not None:
            out.append(run)
    out.sort(key=lambda r: -r.mtime)
    return out


def _session_recordings() -> set[str]:
    """The recordings of the live sessions this shell's runtime directory
    knows of (a job with a runtime directory of its own, as every SLURM job
    has, is not among them: the recording's lock tells of those)."""
    return {os.path.abspath(str(i.get("recording") or "")) for i in runtime.list_sessions(clean=False)}


def _recording_run(path: str, sessions: set[str]) -> Run | None:
    try:
        st = os.lstat(path)  # the entry itself: a symlink is listed (and removed) as one
    except OSError:
        return None  # gone since the listing
    if stat.S_ISDIR(st.st_mode):
        return None  # not a recording ctmon wrote
    log = runtime.output_log_path(path)
    paths = [path]
    size = st.st_size
    try:
        size += os.lstat(log).st_size
        paths.append(log)
    except OSError:
        pass
    peek = _peek(path)
    live = peek.locked or files.path_locked(log) or os.path.abspath(path) in sessions
    return Run(path, paths, st.st_mtime, size, peek.command, peek.exit_code, live, peek.readable)


def _bench_run(path: str) -> Run | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None  # ctmon bench makes a directory (a symlink is not its)
    run = Run(path, [path], st.st_mtime, _tree_size(path), "ctmon bench", None, False)
    run.live = _live(run)
    return run


def _live(run: Run) -> bool:
    """Whether a job writes ``run`` now: a lock held on the recording or its
    output log (every run holds one on each, ctmon/launch/files.py), or on a
    bench directory (``ctmon bench`` holds it between its runs too) or one of
    the recordings in it."""
    if not os.path.isdir(run.path) or os.path.islink(run.path):
        return any(files.path_locked(p) for p in run.paths)
    if files.path_locked(run.path):
        return True
    try:
        names = os.listdir(run.path)
    except OSError:
        return False
    return any(files.path_locked(os.path.join(run.path, n)) for n in names)


def _tree_size(path: str) -> int:
    total = 0
    for d, _, names in os.walk(path):
        for n in names:
            try:
                total += os.lstat(os.path.join(d, n)).st_size
            except OSError:
                pass  # removed meanwhile
    return total


@dataclass
class _Peek:
    command: str = "?"
    exit_code: int | None = None
    readable: bool = False
    locked: bool = False


def _peek(path: str) -> _Peek:
    """The job's command (the first line, the session header), its exit code
    (an exit event near the end) and whether a run holds the file's lock,
    from at most HEAD_BYTES + TAIL_BYTES of it, however large it is or grows."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return _Peek()  # a FIFO or device is never opened (it could block or never end)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return _Peek(locked=files.path_locked(path))  # unreadable, or gone, or a symlink loop
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return _Peek()
        peek = _Peek(locked=files.locked(fd))
        head = os.pread(fd, HEAD_BYTES, 0)
        tail = os.pread(fd, TAIL_BYTES, max(0, st.st_size - TAIL_BYTES))
    except OSError:
        return _Peek()
    finally:
        os.close(fd)
    header = _json(head.split(b"\n", 1)[0])
    if isinstance(header, dict):
        peek.readable = True
        peek.command = _command(header.get("command"))
    for line in reversed(tail.splitlines()):
        if b'"kind":"exit"' in line:
            event = _json(line)
            if isinstance(event, dict):
                peek.exit_code = _exit_code(event.get("code"))
            break
    return peek


HEAD_BYTES = 64 << 10
TAIL_BYTES = 16 << 10
_EXIT_CODES = range(-(1 << 31), 1 << 32)  # a status or a negated signal; anything else is not one


def _json(line: bytes) -> object:
    """A line as JSON, or None: a line nested too deep, or with a number of
    more digits than Python converts, is no header either."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _command(value: object) -> str:
    if isinstance(value, str):
        return value or "?"
    if not isinstance(value, list):
        return "?"
    words = [x if isinstance(x, str) else str(x) if isinstance(x, (int, float)) else "?" for x in value]
    return " ".join(words) or "?"


def _exit_code(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value in _EXIT_CODES:
        return value
    return None


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _list(runs: list[Run], state: str, as_json: bool) -> None:
    if as_json:
        # exactly what was recorded: JSON escapes control characters itself
        rows = [
            {
                "path": r.path,
                "modified": r.mtime,
                "bytes": r.size,
                "command": r.command,
                "exit_code": r.exit_code,
                "live": r.live,
                "readable": r.readable,
            }
            for r in runs
        ]
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return
    if not runs:
        sys.stdout.write(f"no runs in {_shown(state)}\n")
        return
    for r in runs:
        sys.stdout.write(f"{_when(r.mtime)}  {_size(r.size):>9}  {_status(r):<10}  {_shown(r.command)[:70]}\n")
        sys.stdout.write(f"    {_shown(r.path)}\n")
    total = sum(r.size for r in runs)
    sys.stdout.write(f"{len(runs)} runs, {_size(total)}, in {_shown(state)}\n")


def _status(r: Run) -> str:
    if r.live:
        return "running"
    if not r.readable:
        return "unreadable"
    return "exit ?" if r.exit_code is None else f"exit {r.exit_code}"


def _when(mtime: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(mtime))
    except (OverflowError, ValueError, OSError):  # a date no calendar here holds (set with touch)
        return "????-??-?? ??:??"


def _shown(text: str) -> str:
    """A string from a file or a file name, as one line for the terminal: no
    escape sequence or control character (ctmon/words/textsafe.py), no line break,
    and a name's undecodable bytes as escapes (they cannot be written as
    they are)."""
    one_line = clean(text, tab=" ").replace("\n", PLACEHOLDER)
    return one_line.encode("utf-8", "backslashreplace").decode("utf-8")
