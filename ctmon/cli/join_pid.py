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
    help="join the running Python process PID (PID,PID,...: one job's ranks; a launcher's pid: its ranks) instead of "
    "starting a job; leave them running on exit (Linux, needs gdb)",
    metavar="PID",
)
SESSION_WAIT_S = 90.0  # attach --pid: gdb's join plus the supervisor's start
RECORD_END_WAIT_S = 20.0  # attach --pid: the agent's leave and the recording's end


def parse_pids(command: str, text: str) -> list[int]:
    """``--pid``'s process ids: one, or several separated by commas."""
    parts = [p.strip() for p in text.split(",")]
    pids: list[int] = []
    for part in parts:
        if not part.isdigit() or int(part) <= 0:
            raise UsageError(f"{command}: --pid needs a process id, or several separated by commas, not '{text}'")
        if int(part) in pids:
            raise UsageError(f"{command}: --pid names process {int(part)} twice: name each process once")
        pids.append(int(part))
    return pids


def check(command: str, pids: list[int]) -> list[Target]:
    """The processes to join, every one checked before any is touched (a
    launcher stands for its ranks), or one line that says why not (exit 2)."""
    from ctmon.launch.join_target import JoinRefused, join_targets

    try:
        targets = join_targets(pids)
    except JoinRefused as e:
        raise UsageError(f"{command} --pid: {e}") from None
    launched = [p for p in pids if p not in {t.pid for t in targets}]
    if launched:
        joined = ", ".join(str(t.pid) for t in targets)
        whose = "launcher " + ", ".join(str(p) for p in launched)
        sys.stderr.write(
            f"ctmon: joining the ranks of {whose}: processes {joined} (the launcher itself is not joined)\n"
        )
    return targets


def ranks_of(targets: list[Target]) -> list[int] | None:
    """The ranks ctmon gives the processes (join_target.ranks_given; checked already)."""
    from ctmon.launch.join_target import ranks_given

    return ranks_given(targets)


def join_errors(events: list[Any]) -> list[str]:
    """The errors the join itself reported (already monitored, never ran)."""
    return [
        str(ev.message)
        for ev in events
        if getattr(ev, "source", None) == "join" and getattr(ev, "level", None) in ("error", "warning")
    ]


def join_failure(events: list[Any], recording: str) -> str | None:
    """Why nothing was joined, where no process ran ctmon's agent (one of
    several that did not is said, and the others' recording stands)."""
    errors = join_errors(events)
    if not errors or _joined_before(recording) is not None:
        return None
    return errors[0]


def left_running(pids: list[int]) -> list[str]:
    """What ``record --pid`` says at its end of the processes still running."""
    from ctmon.launch.runtime import alive

    running = [str(p) for p in pids if alive(p)]
    if len(running) > 1:
        return [f"ctmon: left processes {', '.join(running)} running, as they were before ctmon joined"]
    return [f"ctmon: left process {p} running, as it was before ctmon joined" for p in running]


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


def attach_pid(pids: list[int], output: str | None) -> int:
    """The TUI on joined processes: ``ctmon record --pid`` runs detached (the
    recording survives the viewer), the viewer follows it, and quitting the
    viewer asks it to leave the processes (SIGINT), which run on."""
    from ctmon.launch import runtime

    targets = check("attach", pids)
    first = targets[0].pid  # the session's job pid (launch/join.py)
    log_path = os.path.join(runtime.runtime_dir(), f"join-{first}-{os.getpid()}.log")
    argv = [sys.executable, "-m", "ctmon", "record", "-q", "--pid", ",".join(str(p) for p in pids)]
    if output:
        argv += ["-o", output]
    with open(log_path, "w+b") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True
        )
        try:
            session = _wait_session(first, proc)
            if session is None:
                proc.wait(timeout=RECORD_END_WAIT_S)
                raise CliError(f"attach --pid: {runtime.last_line(log) or 'ctmon could not join'}", 2)
            _watch(session)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # leave the processes: they run on
                try:
                    proc.wait(timeout=RECORD_END_WAIT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
    try:
        os.unlink(log_path)
    except OSError:
        pass
    left = [str(t.pid) for t in targets if runtime.alive(t.pid)]
    noun = "processes" if len(left) > 1 else "process"
    sys.stderr.write(
        f"ctmon: left {noun} {', '.join(left) or first} running; its recording: {session.get('recording')}\n"
    )
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
