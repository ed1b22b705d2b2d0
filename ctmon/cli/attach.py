"""``ctmon attach``: run a job and watch it live in the TUI.

The job runs under a detached supervisor, so it survives the viewer (a
closed terminal, a dropped SSH connection, ``q`` then "leave it running").
Without a terminal, or with ``--no-tui``, this is ``ctmon record``.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING

from ctmon.cli import CliError
from ctmon.cli.args import OptionSpec, format_help, parse_launch
from ctmon.cli.diff import live_baseline, since_base, title_new_findings
from ctmon.cli.join_pid import PID_OPTION
from ctmon.cli.record import check_metrics, metrics_url, run_headless
from ctmon.launch.spec import JobSpec, check_not_target, check_writable

if TYPE_CHECKING:
    from ctmon.cli.diff import Baseline
    from ctmon.store import Session
    from ctmon.tui.app import AppResult

OPTIONS = [
    OptionSpec(("-o", "--output"), "output", True, help="keep the recording in FILE", metavar="FILE"),
    OptionSpec(("--no-tui",), "no_tui", help="no TUI: run headless like 'ctmon record'"),
    OptionSpec(
        ("--stop-grace",),
        "stop_grace",
        True,
        metavar="SECONDS",
        help="q → Stop sends SIGTERM, then SIGKILL this long after if the job still runs; "
        "0: never (default $CTMON_STOP_GRACE, else 30)",
    ),
    OptionSpec(
        ("--metrics-port",),
        "metrics_port",
        True,
        help="serve Prometheus metrics at [HOST:]PORT while the job runs, also after the TUI is left "
        "(loopback by default; or CTMON_METRICS_PORT)",
        metavar="ADDR",
    ),
    PID_OPTION,
    OptionSpec(
        ("--baseline",),
        "baseline",
        True,
        help="mark each finding new since BASE, an earlier run of the job (a recording or TORCH_TRACE dir), "
        "read before the job starts; without the TUI, as 'ctmon record --baseline'",
        metavar="BASE",
    ),
    OptionSpec(("--any-job",), "any_job", help="with --baseline: compare with a run of another script too"),
]
USAGE = "ctmon attach [options] SCRIPT|-m MODULE [ARGS...]  |  ctmon attach [options] --pid PID[,PID...]"
DESCRIPTION = (
    "Run a Python job under ctmon and watch compiles, graph breaks, caches and step times live.\n"
    "Of ctmon record's options -o and --metrics-port apply here; --fail-on, --listen and -q are\n"
    "record's: run 'ctmon record' for a headless run with them (and 'ctmon watch' to look at it live)."
)


def main(argv: list[str]) -> int:
    parsed = parse_launch("attach", argv, OPTIONS)
    if parsed.help:
        sys.stdout.write(format_help(USAGE, DESCRIPTION, OPTIONS))
        return 0
    pid_text = parsed.text("pid")
    if pid_text is not None and parsed.text("baseline") is not None:
        raise CliError("attach: --baseline goes with a SCRIPT or -m MODULE, not with --pid")
    if pid_text is not None:
        return _attach_pid(pid_text, parsed.text("output"), parsed.flag("no_tui") or not _interactive())
    assert parsed.spec is not None
    output = parsed.text("output")
    grace = stop_grace(parsed.text("stop_grace"))
    metrics = check_metrics(parsed.text("metrics_port") or os.environ.get("CTMON_METRICS_PORT") or None, "attach")
    # read before the job starts: a bad baseline is one line, and no job runs
    base = live_baseline("attach", parsed.text("baseline"), parsed.flag("any_job"), parsed.spec.display())
    if parsed.flag("no_tui") or not _interactive():
        return run_headless(parsed.spec, output, metrics=metrics, baseline=base)
    return run_tui(parsed.spec, output, grace, metrics, base)


def _attach_pid(pid_text: str, output: str | None, headless: bool) -> int:
    """A running process (ctmon/cli/join_pid.py): the TUI until it is quit,
    then ctmon leaves the process running; headless, ``record --pid``."""
    from ctmon.cli import join_pid
    from ctmon.cli.record import main as record_main

    pids = join_pid.parse_pids("attach", pid_text)
    if headless:
        return record_main(["--pid", ",".join(str(p) for p in pids), *(["-o", output] if output else [])])
    return join_pid.attach_pid(pids, output)


def stop_grace(value: str | None) -> float:
    """--stop-grace, else $CTMON_STOP_GRACE, else the default (seconds; 0: never SIGKILL)."""
    import math

    from ctmon.wire.protocol import DEFAULT_STOP_GRACE_S

    where = "--stop-grace"
    if value is None:
        value, where = os.environ.get("CTMON_STOP_GRACE") or None, "CTMON_STOP_GRACE"
    if value is None:
        return DEFAULT_STOP_GRACE_S
    try:
        grace = float(value)
    except ValueError:
        grace = -1.0
    if not math.isfinite(grace) or grace < 0:
        raise CliError(f"attach: {where} must be a number of seconds >= 0 (0: never SIGKILL), not '{value}'")
    return grace


def _interactive() -> bool:
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def run_tui(
    spec: JobSpec,
    output: str | None,
    grace: float | None = None,
    metrics: str | None = None,
    base: Baseline | None = None,
) -> int:
    from ctmon.launch.daemon import DaemonError, start_detached
    from ctmon.read.feeds import FeedError, SocketFeed

    if output:
        check_writable(output)
        check_not_target(output, spec)
    cols, rows = shutil.get_terminal_size((120, 40))
    try:
        d = start_detached(spec, output, pty_size=(max(rows, 24), max(cols, 80)), metrics=metrics)
    except DaemonError as e:
        raise CliError(f"attach: {e}") from None
    if metrics:  # said before the TUI takes the screen (and after it, if the job runs on: report_after)
        sys.stderr.write(f"ctmon: Prometheus metrics at {metrics_url(metrics)} while the job runs\n")
    try:
        feed = SocketFeed(d.viewer_path)
    except FeedError as e:
        raise CliError(
            f"attach: the job started (recording {d.recording}) but its monitor is unreachable: {e}"
        ) from None

    from ctmon.cli.tui import run_app
    from ctmon.tui.app import CtmonApp

    app = CtmonApp(
        feed,
        launched=True,
        recording=d.recording,
        title=" ".join(spec.display()),
        stop_grace=stop_grace(None) if grace is None else grace,
    )
    app.ctx.since = since_base(base) if base is not None else None
    result = run_app(app)
    feed.close()
    # paths as the user gave them (-o FILE); ctmon's own default, in full
    return report_after(result, d.recording, metrics, d.output_log, output, base)


def report_after(
    result: AppResult | None,
    recording: str,
    metrics: str | None = None,
    output_log: str | None = None,
    given: str | None = None,
    base: Baseline | None = None,
) -> int:
    """What the terminal shows once the TUI has given it back: for a job
    that failed, its traceback and where its whole output is (as ``python
    script.py`` would have left them), then ctmon's summary.

    ``given``: the recording's path as the user gave it (``-o FILE``); the
    output log's is said the same way, beside it."""
    from ctmon.report.build import build_report
    from ctmon.report.text import summary_lines

    shown = given or recording
    if result is None:  # the UI failed; the job runs on under its supervisor
        sys.stderr.write(f"ctmon: the viewer stopped; the job keeps running. Recording: {shown}\n")
        return 1
    session = result.session
    if result.how == "detached" and session.exit is None:
        pid = session.meta.pid
        lines = [
            f"ctmon: the job keeps running (pid {pid}); its recording: {shown}",
            f"ctmon: watch it again with: ctmon watch {pid}" if pid else "ctmon: watch it again with: ctmon watch",
        ]
        if metrics:
            lines.append(f"ctmon: its Prometheus metrics stay at {metrics_url(metrics)} while it runs")
        sys.stderr.write("\n".join(lines) + "\n")
        return 0
    lines = failure_lines(session, _log_shown(output_log, given))
    try:
        report = build_report(session)
        since = base.diff(recording, session, report) if base is not None else None
        said = title_new_findings(report, since, base.name) if base is not None and since is not None else report
        lines += summary_lines(said, shown) + (base.lines(since) if base is not None and since is not None else [])
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
    except OSError:
        pass
    if session.exit is not None:
        return session.exit.status
    return 0


def _log_shown(output_log: str | None, given: str | None) -> str | None:
    """The output log's path, said as the recording's is (beside ``-o FILE``
    as given, else in full); None where there is none."""
    if output_log is None or not os.path.exists(output_log):
        return None
    if given:
        from ctmon.launch.runtime import output_log_path

        beside = output_log_path(given)
        if os.path.abspath(beside) == os.path.abspath(output_log):
            return beside
    return output_log


def failure_lines(session: Session, output_log: str | None) -> list[str]:
    """A failed job's last words on stderr (its traceback, as Python printed
    it), and where its whole output is: what the terminal keeps of a job
    the TUI showed. Nothing for a job that succeeded or still runs."""
    from ctmon.store.job_error import last_traceback, stderr_lines
    from ctmon.words.textsafe import clean

    ended = session.exit
    if ended is None or not ended.known or ended.status == 0:
        return []
    said = [clean(line, keep_sgr=True) for line in last_traceback(stderr_lines(session.output))]
    if any("\x1b[" in line for line in said):
        said[-1] += "\x1b[0m"  # the job's colours end with its traceback
    if output_log:
        said.append(f"ctmon: the job's whole output: {output_log}")
    return said
