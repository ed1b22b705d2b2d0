"""``ctmon watch``: list this user's live jobs and attach to one.

    ctmon watch                 list live sessions; pick one to attach (or the only one)
    ctmon watch PID|ID          attach to the session of that job (or supervisor) pid / session id
    ctmon watch --list [--json] only list
    ctmon watch ... --baseline BASE [--any-job]
                                mark each finding new since BASE, an earlier run of the job
    ctmon watch --connect HOST:PORT [--token-file PATH]
                                attach over TCP to a job started with --listen (e.g. through ssh -L);
                                the session token comes from --token-file (a file only you can read,
                                e.g. the session's own 'token' file), else $CTMON_TOKEN, else a prompt.
                                It is never taken on the command line, which every local user can read.

Attaching replays the session's full history first, so a late viewer sees
exactly what one attached from the start saw. ``q`` detaches: the job keeps
running. Works over ``ssh -t node ctmon watch``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from typing import TYPE_CHECKING

from ctmon.cli import CliError
from ctmon.launch import runtime
from ctmon.words.textsafe import clean

if TYPE_CHECKING:
    from ctmon.read.feeds import Feed

# the docstring, as a terminal shows it: ``q`` (reST for the code reader) as 'q'
HELP = re.sub(r"``([^`]+)``", r"'\1'", __doc__.split("\n\n", 1)[1]) if __doc__ else ""


def main(argv: list[str]) -> int:
    list_only = as_json = any_job = False
    connect = token_file = baseline = None
    key = None
    it = iter(argv)
    for a in it:
        if a in ("-h", "--help"):
            sys.stdout.write(
                "usage: ctmon watch [PID|ID] [--list [--json]] [--connect HOST:PORT [--token-file PATH]]"
                " [--baseline BASE [--any-job]]\n\n" + HELP
            )
            return 0
        if a == "--list":
            list_only = True
        elif a == "--json":
            as_json = list_only = True
        elif a == "--connect" or a.startswith("--connect="):
            connect = a.partition("=")[2] if "=" in a else next(it, None)
            if not connect:
                raise CliError("watch: --connect needs HOST:PORT")
        elif a == "--token-file" or a.startswith("--token-file="):
            token_file = a.partition("=")[2] if "=" in a else next(it, None)
            if not token_file:
                raise CliError("watch: --token-file needs a PATH")
        elif a == "--token" or a.startswith("--token="):
            raise CliError(
                "watch: --token is refused: a command line is visible to every local user; "
                "use --token-file PATH (mode 0600), CTMON_TOKEN=..., or type it at the prompt"
            )
        elif a == "--baseline" or a.startswith("--baseline="):
            baseline = a.partition("=")[2] if "=" in a else next(it, None)
            if not baseline:
                raise CliError("watch: --baseline needs a recording or TORCH_TRACE directory")
        elif a == "--any-job":
            any_job = True
        elif a.startswith("-"):
            raise CliError(f"watch: unknown option {a} (try: ctmon watch --help)")
        elif key is None:
            key = a
        else:
            raise CliError("watch: give at most one PID or session id")
    if any_job and baseline is None:
        raise CliError("watch: --any-job goes with --baseline BASE")
    base = (baseline, any_job)
    if connect:
        return _watch_tcp(connect, token_file, base)
    sessions = runtime.list_sessions()
    if list_only or (key is None and not _interactive()):
        return _print_list(sessions, as_json)
    if key is not None:
        found = runtime.find_session(key)
        if found is None:
            raise CliError(f"watch: no live ctmon session for '{key}' (ctmon watch --list shows them)")
        return _watch(found, base)
    if not sessions:
        sys.stderr.write("ctmon: no live sessions (start one with: ctmon attach script.py)\n")
        return 1
    if len(sessions) == 1:
        return _watch(sessions[0], base)
    _print_list(sessions, False)
    while True:
        try:
            answer = input(f"attach to which session? [1-{len(sessions)}, q] ").strip()
        except EOFError:
            return 1
        if answer.lower() in ("q", ""):
            return 0
        if answer.isdigit() and 1 <= int(answer) <= len(sessions):
            return _watch(sessions[int(answer) - 1], base)
        print(f"please answer 1-{len(sessions)} or q")


def _interactive() -> bool:
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _age(start: object) -> str:
    if not isinstance(start, (int, float)):
        return "?"
    s = max(0, int(time.time() - start))
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _command_text(info: dict[str, object]) -> str:
    """A registry entry's command as one line (the entry is JSON a job's supervisor wrote)."""
    cmd = info.get("command")
    return " ".join(str(c) for c in cmd) if isinstance(cmd, list) else ""


def _print_list(sessions: list[dict[str, object]], as_json: bool) -> int:
    if as_json:
        keep = (
            "id",
            "job_pid",
            "supervisor_pid",
            "command",
            "cwd",
            "start",
            "state",
            "steps",
            "compiles",
            "recompiles",
            "graph_breaks",
            "recording",
            "tcp",
            "mode",
        )
        json.dump([{k: s.get(k) for k in keep} for s in sessions], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not sessions:
        print("no live ctmon sessions")
        return 0
    # in a terminal each session is one line, its command cut to the width
    # (80 columns over ssh); piped, the whole command
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    print(f"{'#':>2}  {'PID':>7}  {'STARTED':>8}  {'AGE':>6}  {'STATE':<9}  {'STEPS':>7}  {'COMPILES':>8}  COMMAND")
    for i, s in enumerate(sessions, 1):
        # a job's command is its user's text (a script's name can hold escapes)
        cmd = clean(_command_text(s), tab=" ")
        start = s.get("start")
        started = time.strftime("%H:%M:%S", time.localtime(start)) if isinstance(start, (int, float)) else "?"
        row = (
            f"{i:>2}  {s.get('job_pid') or '?':>7}  {started:>8}  {_age(s.get('start')):>6}  "
            f"{str(s.get('state') or '?'):<9}  {s.get('steps') or 0:>7}  {s.get('compiles') or 0:>8}  "
        )
        if width is not None and len(row) + len(cmd) > width:
            cmd = cmd[: max(8, width - len(row) - 1)] + "…"
        print(row + cmd)
    return 0


# ``--baseline BASE`` and ``--any-job`` as given: BASE is read once the
# session (and so its job's command) is known, before the screen opens
BaselineGiven = tuple[str | None, bool]


def _watch(info: dict[str, object], base: BaselineGiven) -> int:
    from ctmon.read.feeds import FeedError, SocketFeed

    try:
        feed = SocketFeed(str(info["viewer_socket"]))
    except FeedError as e:
        raise CliError(f"watch: {e}") from None
    command = info.get("command")
    return _run(
        feed,
        str(info.get("recording") or ""),
        _command_text(info),
        info.get("job_pid"),
        base,
        [str(c) for c in command] if isinstance(command, list) else None,
    )


def _watch_tcp(addr: str, token_file: str | None, base: BaselineGiven) -> int:
    from ctmon.launch.sockets import parse_listen
    from ctmon.read.feeds import AuthError, FeedError, SocketFeed

    try:
        host, port = parse_listen(addr)
    except ValueError:
        raise CliError(f"watch: bad --connect '{addr}': expected [HOST:]PORT") from None
    token = read_token_file(token_file) if token_file else os.environ.get("CTMON_TOKEN", "").strip()
    if not token:
        if not _interactive():
            raise CliError("watch: --connect needs the session token (--token-file PATH or CTMON_TOKEN)")
        import getpass

        token = getpass.getpass("session token: ").strip()
    try:
        feed = SocketFeed.tcp(host, port, token)
    except AuthError as e:
        raise CliError(str(e)) from None  # "authentication failed", said as such
    except FeedError as e:
        raise CliError(f"watch: {e}") from None
    return _run(feed, "", addr, None, base)


def read_token_file(path: str) -> str:
    """The token from a file that only its owner can read (else it is no secret)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise CliError(f"watch: cannot read --token-file {path}: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise CliError(f"watch: --token-file {path} is not a regular file")
        if st.st_mode & 0o077:
            raise CliError(
                f"watch: --token-file {path} is readable by other users (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); chmod 600 it first"
            )
        data = f.read(4096)
    token = data.decode("utf-8", "surrogateescape").strip()
    if not token:
        raise CliError(f"watch: --token-file {path} is empty")
    return token


def _run(
    feed: Feed, recording: str, title: str, pid: object, given: BaselineGiven, job: list[str] | None = None
) -> int:
    if not _interactive():
        raise CliError("watch: needs a terminal (run it with ssh -t when remote)")
    from ctmon.cli.diff import live_baseline, since_base
    from ctmon.cli.tui import run_app
    from ctmon.tui.app import CtmonApp

    try:  # before the screen opens: a bad BASE, or another script's run, is one line
        base = live_baseline("watch", given[0], given[1], job)
    except CliError:
        feed.close()
        raise
    app = CtmonApp(feed, launched=False, recording=recording or None, title=title)
    app.ctx.since = since_base(base) if base is not None else None
    result = run_app(app)
    feed.close()
    exit_info = getattr(result, "exit", None)
    if exit_info is None:
        again = f"ctmon watch {pid}" if pid else "ctmon watch"
        sys.stderr.write(f"ctmon: detached; the job keeps running ({again} to come back)\n")
        return 0
    sys.stderr.write(
        ("ctmon: the job ended" + (f" with status {exit_info.status}" if exit_info.known else ""))
        + (f"; recording: {recording}" if recording else "")
        + "\n"
    )
    return 0
