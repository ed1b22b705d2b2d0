"""``ctmon runs``: the recordings ctmon keeps in its state directory, listed,
and pruned with ``--keep N`` / ``--older-than AGE``.

Only what ctmon named itself is touched: ``*.jsonl`` recordings there (with
their ``.output.log``) and ``bench-*`` directories of ``ctmon bench``. A
recording a live job is still writing is never removed. ``--dry-run`` says
what would go.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass

from ctmon.cli import CliError
from ctmon.launch import runtime

HELP = """usage: ctmon runs [--json] [--keep N | --older-than AGE] [--dry-run]

List the recordings ctmon keeps in its state directory (newest first): when,
size, exit status and command. Recordings written with -o elsewhere are yours
to manage and are not listed.

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
    runs = find_runs(runtime.state_dir())
    if keep is None and older is None:
        _list(runs, as_json)
        return 0
    now = time.time()
    doomed = runs[keep:] if keep is not None else [r for r in runs if older is not None and now - r.mtime > older]
    freed = 0
    for r in doomed:
        if r.live:
            sys.stderr.write(f"ctmon: keeping {r.path}: its job is still running\n")
            continue
        freed += r.size
        if not dry:
            for p in r.paths:
                if os.path.isdir(p):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    try:
                        os.unlink(p)
                    except FileNotFoundError:
                        pass
        sys.stdout.write(f"{'would remove' if dry else 'removed'} {r.path}\n")
    gone = sum(1 for r in doomed if not r.live)
    sys.stderr.write(f"ctmon: {'would free' if dry else 'freed'} {_size(freed)} ({gone} of {len(runs)} runs)\n")
    return 0


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
    """The runs in ``state``, newest first."""
    live = {os.path.abspath(str(i.get("recording") or "")) for i in runtime.list_sessions(clean=False)}
    out = []
    try:
        names = os.listdir(state)
    except OSError:
        return []
    for name in names:
        path = os.path.join(state, name)
        if name.endswith(".jsonl") and os.path.isfile(path):
            log = runtime.output_log_path(path)
            paths = [path] + ([log] if os.path.exists(log) else [])
            command, code = _head_and_tail(path)
        elif name.startswith("bench-") and os.path.isdir(path):
            paths = [path]
            command, code = "ctmon bench", None
        else:
            continue
        try:
            mtime = os.stat(path).st_mtime
            size = sum(_tree_size(p) for p in paths)
        except OSError:
            continue
        out.append(Run(path, paths, mtime, size, command, code, os.path.abspath(path) in live))
    out.sort(key=lambda r: -r.mtime)
    return out


def _tree_size(path: str) -> int:
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _head_and_tail(path: str) -> tuple[str, int | None]:
    """The job's command (the first line, the session header) and its exit
    code (an exit event near the end), read without reading the whole file."""
    command, code = "?", None
    try:
        with open(path, "rb") as f:
            first = f.readline(64 << 10)
            f.seek(max(0, os.path.getsize(path) - (16 << 10)))
            tail = f.read().splitlines()
    except OSError:
        return command, code
    try:
        head = json.loads(first)
        command = " ".join(str(x) for x in head.get("command") or []) or "?"
    except (ValueError, AttributeError):
        pass
    for line in reversed(tail):
        if b'"kind":"exit"' in line:
            try:
                code = json.loads(line).get("code")
            except ValueError:
                pass
            break
    return command, code


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _list(runs: list[Run], as_json: bool) -> None:
    if as_json:
        rows = [
            {
                "path": r.path,
                "modified": r.mtime,
                "bytes": r.size,
                "command": r.command,
                "exit_code": r.exit_code,
                "live": r.live,
            }
            for r in runs
        ]
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return
    if not runs:
        sys.stdout.write(f"no runs in {runtime.state_dir()}\n")
        return
    for r in runs:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.mtime))
        status = "running" if r.live else ("exit ?" if r.exit_code is None else f"exit {r.exit_code}")
        sys.stdout.write(f"{when}  {_size(r.size):>9}  {status:<8}  {r.command[:70]}\n    {r.path}\n")
    total = sum(r.size for r in runs)
    sys.stdout.write(f"{len(runs)} runs, {_size(total)}, in {runtime.state_dir()}\n")
