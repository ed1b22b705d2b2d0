"""``ctmon record``: run a job headless; its output passes through unchanged,
its events go to a recording, and a short summary follows on stderr."""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING, Any

from ctmon.cli.args import OptionSpec, format_help, parse_launch
from ctmon.cli.diff import (
    Baseline,
    check_same_job,
    plain_budgets,
    read_baseline,
    regression_failure,
    title_new_findings,
)
from ctmon.cli.join_pid import (
    PID_OPTION,
    before_lines,
    check,
    join_errors,
    join_failure,
    left_running,
    parse_pids,
    ranks_of,
)
from ctmon.launch import runtime
from ctmon.launch.sockets import parse_listen
from ctmon.launch.spec import JobSpec, UsageError, check_not_target, check_writable
from ctmon.report import gate
from ctmon.wire.errors import RecordingError

if TYPE_CHECKING:
    from ctmon.launch.supervisor import Supervisor
    from ctmon.report.model import Note, Report
    from ctmon.store import ExitInfo, Session

OPTIONS = [
    OptionSpec(
        ("-o", "--output"),
        "output",
        True,
        help="write the recording to FILE (default: ~/.local/state/ctmon/runs/)",
        metavar="FILE",
    ),
    OptionSpec(
        ("-q", "--quiet"), "quiet", help="no summary at the end (nor, without --fail-on, a read of the recording)"
    ),
    OptionSpec(
        ("--fail-on",),
        "fail_on",
        True,
        True,
        help="exit 3 if METRIC OP N holds, e.g. 'recompiles>2' (repeatable), or on 'regression' since "
        "--baseline; 4 if the recording is incomplete",
        metavar="EXPR",
    ),
    OptionSpec(
        ("--baseline",),
        "baseline",
        True,
        help="compare with an earlier run of the job (a recording or TORCH_TRACE dir), read before the job "
        "starts; regressions since it are listed on stderr (ctmon diff BASE NEW)",
        metavar="BASE",
    ),
    OptionSpec(("--any-job",), "any_job", help="with --baseline: compare with a run of another script too"),
    OptionSpec(
        ("--listen",),
        "listen",
        True,
        help="also serve viewers over TCP at [HOST:]PORT (loopback by default; token required)",
        metavar="ADDR",
    ),
    OptionSpec(
        ("--metrics-port",),
        "metrics_port",
        True,
        help="serve Prometheus metrics at [HOST:]PORT (loopback by default; or CTMON_METRICS_PORT)",
        metavar="ADDR",
    ),
    PID_OPTION,
]
USAGE = "ctmon record [options] SCRIPT|-m MODULE [ARGS...]  |  ctmon record [options] --pid PID[,PID...]"
DESCRIPTION = "Run a Python job headless under ctmon's hook and record its compile and step events."


def main(argv: list[str]) -> int:
    parsed = parse_launch("record", argv, OPTIONS)
    if parsed.help:
        sys.stdout.write(format_help(USAGE, DESCRIPTION, OPTIONS))
        return 0
    fail_on = parsed.texts("fail_on")
    budgets = parse_budgets(plain_budgets(fail_on))
    listen = check_listen(parsed.text("listen"))
    metrics = check_metrics(parsed.text("metrics_port") or os.environ.get("CTMON_METRICS_PORT") or None)
    pid_text = parsed.text("pid")
    spec, join_pid, join_ranks = parsed.spec, None, None
    if pid_text is not None:
        targets = check("record", parse_pids("record", pid_text))
        join_pid, join_ranks = [t.pid for t in targets], ranks_of(targets)
        spec = joined_spec(targets[0])
    assert spec is not None
    # read before the job starts: a bad baseline is one line, and no job runs
    baseline = read_baseline("record", parsed.text("baseline"), fail_on, parsed.flag("any_job"))
    if baseline is not None and not baseline.any_job:
        check_same_job("record", baseline.run, spec.display())
    return run_headless(
        spec,
        parsed.text("output"),
        quiet=parsed.flag("quiet"),
        budgets=budgets,
        listen=listen,
        metrics=metrics,
        join_pid=join_pid,
        baseline=baseline,
        join_ranks=join_ranks,
    )


def joined_spec(target: Any) -> JobSpec:
    """The joined process's command line, as the session shows it."""
    from ctmon.launch.join_target import job_command

    program, args = job_command(target)
    return JobSpec(mode="command", target=program, args=args, cwd=target.cwd)


def metrics_url(spec: str) -> str:
    from ctmon.launch.metrics import parse_address

    host, port = parse_address(spec)
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"


def check_metrics(spec: str | None, command: str = "record") -> str | None:
    if spec is None:
        return None
    from ctmon.launch.metrics import MetricsError, parse_address

    try:
        parse_address(spec)
    except MetricsError as e:
        raise UsageError(f"{command}: {e}") from None
    return spec


def check_listen(spec: str | None) -> str | None:
    if spec is None:
        return None
    try:
        parse_listen(spec)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return spec


def parse_budgets(exprs: list[str]) -> list[gate.Budget]:
    try:
        return [gate.parse(e) for e in exprs]
    except gate.BudgetError as e:
        raise UsageError(str(e)) from None


def run_headless(
    spec: JobSpec,
    output: str | None,
    quiet: bool = False,
    budgets: list[gate.Budget] | None = None,
    listen: str | None = None,
    metrics: str | None = None,
    join_pid: list[int] | None = None,
    baseline: Baseline | None = None,
    join_ranks: list[int] | None = None,
) -> int:
    # imported here: the job's interpreter was checked (torch, the script)
    # before anything heavier than the standard library is loaded; and
    # before the job starts, so that no import follows its exit (a child
    # of the job may go on printing where ctmon hands its streams off)
    from ctmon.launch.supervisor import Supervisor, SupervisorError, SupervisorOptions
    from ctmon.read import load  # noqa: F401  (used by conclude)
    from ctmon.report import build, text  # noqa: F401  (used by conclude)

    if output:
        check_writable(output)
        check_not_target(output, spec)
    sid = runtime.new_session_id(spec.target)
    recording = output or runtime.default_recording(sid)
    sdir = runtime.session_dir(sid)
    try:
        sup = Supervisor(
            spec,
            SupervisorOptions(
                recording=recording,
                session_dir=sdir,
                session_id=sid,
                mode="record",
                listen=listen,
                metrics=metrics,
                new_files=output is None,
                join_pid=join_pid,
                join_ranks=join_ranks,
            ),
        )
        join_notes: list[Any] = []
        if join_pid is not None:
            sup.on_event = lambda ev: join_notes.append(ev) if getattr(ev, "source", None) == "join" else None
        if listen:
            sup.on_listening = lambda addr, token: _announce(sup, addr, os.path.join(sdir, "token"))
        if metrics:
            sup.on_metrics = lambda: _say(f"ctmon: Prometheus metrics at {metrics_url(metrics)} while the job runs")
        try:
            info = sup.run()
        except SupervisorError as e:
            raise UsageError(str(e)) from None
    finally:
        shutil.rmtree(sdir, ignore_errors=True)
    if join_pid is None:
        return conclude(sup, info, output or recording, quiet, budgets or [], baseline)
    failure = join_failure(join_notes, recording)
    if failure is not None:
        raise UsageError(f"record --pid: {failure}")
    _say_all([f"ctmon: {why}" for why in join_errors(join_notes)])  # some processes were not joined
    code = conclude(sup, info, output or recording, quiet, budgets or [], baseline)
    if not quiet:
        _say_all(before_lines(recording))
    if not quiet:
        _say_all(left_running(join_pid))
    return code if code in (gate.BUDGET_EXIT, gate.RECORDING_EXIT) else 0  # the job's status is not ctmon's


def conclude(
    sup: Supervisor,
    info: ExitInfo,
    shown: str,
    quiet: bool,
    budgets: list[gate.Budget],
    baseline: Baseline | None = None,
) -> int:
    """What follows the job's own output, and ctmon's exit status.

    The summary reads the recording back, so what it says is what the file
    holds (the supervisor folds no store while the job runs). ``-q`` without
    a budget reads nothing back: its warnings come from the counts the
    supervisor kept. Where the disk kept events out of the file, one line
    says what is missing, quiet or not; the exit is the job's, unless a
    budget then cannot be verified (docs in ctmon/report/gate.py)."""
    from ctmon.launch.exit_like import exit_like
    from ctmon.report.model import steps_of
    from ctmon.report.text import summary_lines

    rec = sup.recorder
    incomplete = (rec.last_error or "the recording could not be written") if rec.incomplete else None
    gated = bool(budgets) or (baseline is not None and baseline.fails)
    if quiet and not budgets and baseline is None and not rec.incomplete:
        notes: list[Note] = [
            {"level": n.level, "source": n.source, "message": n.message} for n in sup.registry.counts.capture_notes
        ]
        _say_all([f"ctmon: {msg}" for msg in gate.capture_lines({"notes": notes}, quiet=True)])
        return exit_like(info)
    read = _read_back(sup.recorder.path, info)
    if read is None:  # (the recording was lost under the job: deleted, its disk gone, a device)
        if incomplete is not None:
            _say("ctmon: " + gate.incomplete_line(shown, rec.unwritten, sup.registry.counts.steps, incomplete))
        if gated and info.status == 0:
            _say("ctmon: budget unverified: the recording cannot be read")
            return gate.RECORDING_EXIT
        return exit_like(info)
    session, report = read
    since = baseline.diff(sup.recorder.path, session, report) if baseline is not None else None
    said = title_new_findings(report, since, baseline.name) if baseline is not None and since is not None else report
    lines = [] if quiet else summary_lines(said, shown)
    if incomplete is not None:
        in_file = int(steps_of(report)["count"] or 0)
        steps = max(0, sup.registry.counts.steps - in_file)
        lines.append("ctmon: " + gate.incomplete_line(shown, rec.unwritten, steps, incomplete))
    failures = gate.broken(budgets, report, incomplete)
    regressed = baseline.lines(since) if baseline is not None and since is not None else []
    if baseline is not None and baseline.fails and regressed and incomplete is None:
        failures.append(regression_failure(regressed))
    lines += regressed
    lines += [f"ctmon: {msg}" for msg in gate.capture_lines(report, quiet, incomplete_notes=False) + failures]
    _say_all(lines)
    if info.status == 0 and gated and incomplete is not None:
        return gate.RECORDING_EXIT  # the job's own failure, if any, wins over budgets
    if info.status == 0 and failures:
        return gate.BUDGET_EXIT
    return exit_like(info)


def _read_back(path: str, info: ExitInfo) -> tuple[Session, Report] | None:
    """What the recording holds, and its report (None: it cannot be read)."""
    from ctmon.read.load import load
    from ctmon.report.build import build_report
    from ctmon.wire import events as E

    try:
        session, _ = load(path)
    except RecordingError as e:
        _say(f"ctmon: {e}")
        return None
    if session.exit is None and info.known:
        # the disk kept the exit out of the file: the job's status is still the truth to tell
        session.apply(E.Exit(t=info.t, code=info.code, signal=info.signal))
    return session, build_report(session)


def _announce(sup: Supervisor, addr: str, token_path: str) -> None:
    """How to connect, without the token itself: a command line (this one, or
    the viewer's) is readable by every local user through /proc."""
    if sup.tcp_all_interfaces:
        _say(
            f"ctmon: warning: --listen {addr} is reachable from the network, not only from this machine "
            "(a token is still required; listen on 127.0.0.1 and use ssh -L to keep it local)"
        )
    _say(
        f"ctmon: viewers can connect to {addr}: ctmon watch --connect {addr} --token-file {token_path} "
        f"(or CTMON_TOKEN=$(cat {token_path}) ctmon watch --connect {addr})"
    )


def _say_all(lines: list[str]) -> None:
    if not lines:
        return
    try:
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
    except OSError:
        pass


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:
        pass
