"""``--pid`` of ``ctmon record`` and ``ctmon attach``: join a running Python
process (ctmon/launch/join.py), record it until it exits or the user leaves
(SIGINT to ``record``, quitting ``attach``'s viewer), then take ctmon out of
it and leave it running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from ctmon.cli import CliError
from ctmon.cli.args import OptionSpec
from ctmon.launch.spec import UsageError

if TYPE_CHECKING:
    from ctmon.launch.join_target import Target

PID_OPTION = OptionSpec(
    ("--pid",),
    "pid",
    True,
    help="join the running Python process PID instead of starting a job; leave it running on exit (Linux, needs gdb)",
    metavar="PID",
)
SESSION_WAIT_S = 90.0  # attach --pid: gdb's join plus the supervisor's start
RECORD_END_WAIT_S = 20.0  # attach --pid: the agent's leave and the recording's end


def parse_pid(command: str, text: str) -> int:
    parts = text.split(",")
    if len(parts) > 1 and all(p.strip().isdigit() for p in parts):
        raise UsageError(
            f"{command}: --pid takes one process id, not {len(parts)}: joining several at once is not supported yet; "
            "run one ctmon record --pid per process"
        )
    if not text.isdigit() or int(text) <= 0:
        raise UsageError(f"{command}: --pid needs a process id, not '{text}'")
    return int(text)


def check(command: str, pid: int) -> Target:
    """The process to join, or one line that says why not (exit 2)."""
    from ctmon.launch.join_target import JoinRefused, check_joinable

    try:
        return check_joinable(pid)
    except JoinRefused as e:
        raise UsageError(f"{command} --pid: {e}") from None


def join_failure(events: list[Any]) -> str | None:
    """An error the join itself reported (already monitored, never ran)."""
    for ev in events:
        if getattr(ev, "source", None) == "join" and getattr(ev, "level", None) == "error":
            return str(ev.message)
    return None


def before_lines(recording: str) -> list[str]:
    """What the ``joined`` event says Dynamo did before ctmon joined."""
    from ctmon.store.joined import joined_before

    before = _joined_before(recording)
    if before is None:
        return []
    said = joined_before(None, before)
    return [f"ctmon: {line}" for line in (said.summary(), *(f"  {x}" for x in said.frame_lines()))]


def _joined_before(recording: str) -> dict[str, Any] | None:
    try:
        with open(recording, "rb") as f:
            for raw in f:
                if b'"kind":"joined"' not in raw:
                    continue
                ev = json.loads(raw)
                before = ev.get("before")
                return before if isinstance(before, dict) else {}
    except (OSError, ValueError):
        return None
    return None


def attach_pid(pid: int, output: str | None) -> int:
    """The TUI on a joined process: ``ctmon record --pid`` runs detached (the
    recording survives the viewer), the viewer follows it, and quitting the
    viewer asks it to leave the process (SIGINT), which runs on."""
    from ctmon.launch import runtime

    check("attach", pid)
    log_path = os.path.join(runtime.runtime_dir(), f"join-{pid}-{os.getpid()}.log")
    argv = [sys.executable, "-m", "ctmon", "record", "-q", "--pid", str(pid)]
    if output:
        argv += ["-o", output]
    with open(log_path, "w+b") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True
        )
        try:
            session = _wait_session(pid, proc)
            if session is None:
                proc.wait(timeout=RECORD_END_WAIT_S)
                raise CliError(f"attach --pid: {runtime.last_line(log) or 'ctmon could not join'}", 2)
            _watch(session)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # leave the process: it runs on
                try:
                    proc.wait(timeout=RECORD_END_WAIT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
    try:
        os.unlink(log_path)
    except OSError:
        pass
    sys.stderr.write(f"ctmon: left process {pid} running; its recording: {session.get('recording')}\n")
    return 0


def _wait_session(pid: int, proc: subprocess.Popen[bytes]) -> dict[str, object] | None:
    from ctmon.launch.runtime import list_sessions

    deadline = time.monotonic() + SESSION_WAIT_S
    while time.monotonic() < deadline and proc.poll() is None:
        for s in list_sessions(clean=False):
            if s.get("job_pid") == pid and s.get("supervisor_pid") == proc.pid:
                return s
        time.sleep(0.05)
    return None


def _title(command: object) -> str | None:
    return " ".join(str(a) for a in command) or None if isinstance(command, list) else None


def _watch(session: dict[str, object]) -> None:
    from ctmon.cli.tui import run_app
    from ctmon.read.feeds import FeedError, SocketFeed
    from ctmon.tui.app import CtmonApp

    try:
        feed = SocketFeed(str(session["viewer_socket"]))
    except FeedError as e:
        raise CliError(f"attach --pid: the monitor is unreachable: {e}", 2) from None
    try:
        run_app(
            CtmonApp(
                feed,
                launched=False,
                recording=str(session.get("recording") or ""),
                title=_title(session.get("command")),
            )
        )
    finally:
        feed.close()
