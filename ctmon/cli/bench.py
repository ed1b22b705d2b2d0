"""``ctmon bench``: run the user's unmodified script in each torch.compile
mode, several times and interleaved, each run recorded, and print one table
and a recommendation that says when it does not know.

Rounds: every mode runs once a round -- the first round in the order given
(eager, the baseline, always first), later rounds in a shuffled order -- until
every mode's speed-up against eager is resolved (after ``MIN_RUNS`` rounds),
``--runs`` rounds have run, or the next round would overrun ``--budget``.
Each mode has an Inductor cache of its own, fresh for its first run (the
cold compile the table shows, whatever the order), reused by its later runs.

Each run is ``ctmon record`` of the script with ``CTMON_COMPILE_MODE`` set
(ctmon/agent/bench_mode.py puts the mode into its torch.compile calls, or
turns compilation off for ``eager``), in a process group of its own. The
runner follows the recording as it grows -- the same store a report reads --
to show which mode runs, whether it is compiling or stepping, and for how
long, and to stop the run cleanly once it has made ``--steps`` steps or
outlived ``--time-limit``: SIGINT to the job's group (Ctrl-C, which a
training loop knows how to take), SIGTERM after a grace, SIGKILL last. A
mode that fails (a compile error, out of memory) gets its line in the table;
the other modes are still measured.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from ctmon.agent.bench_mode import TRY_ENV, parse_try
from ctmon.cli import CliError
from ctmon.cli.args import OptionSpec, format_help, parse_launch
from ctmon.launch import files, runtime
from ctmon.launch.spec import JobSpec
from ctmon.read.follow import Follower as RecordingFollower
from ctmon.report.bench import ModeRun, compare, mode_row, render_markdown, render_text, summarize
from ctmon.words.modes import MODES

DEFAULT_RUNS = 5
MIN_RUNS = 3  # rounds before a resolved verdict may end the bench early
DEFAULT_BUDGET_S = 1200.0

OPTIONS = [
    OptionSpec(
        ("--modes",),
        "modes",
        True,
        help=f"modes to run, comma-separated; eager always runs (default: all of {','.join(MODES)})",
    ),
    OptionSpec(("--steps",), "steps", True, help="stop each run after N steps (default: let it end)", metavar="N"),
    OptionSpec(
        ("--runs",),
        "runs",
        True,
        help=f"run each mode at most N times, interleaved; fewer once resolved (default {DEFAULT_RUNS}, at least "
        f"{MIN_RUNS} for an interval)",
        metavar="N",
    ),
    OptionSpec(
        ("--budget",),
        "budget",
        True,
        help=f"start no new round once the bench has run S seconds, or the next round would pass S "
        f"(default {DEFAULT_BUDGET_S:g}; the first round always runs)",
        metavar="S",
    ),
    OptionSpec(
        ("--try",),
        "try",
        True,
        help="also run default with one change, NAME=VALUE: a torch.compile argument (dynamic=True) or a "
        "setting (torch._dynamo.config.cache_size_limit=64); the row 'try' against the unchanged 'default'",
        metavar="NAME=VALUE",
    ),
    OptionSpec(("--warm",), "warm", help="run each mode again on the same compile cache: cold vs warm compile time"),
    OptionSpec(
        ("--cache-dir",),
        "cache_dir",
        True,
        help="Inductor's caches for the runs, one folder per mode in DIR (default: fresh ones, removed after)",
        metavar="DIR",
    ),
    OptionSpec(
        ("--time-limit",),
        "time_limit",
        True,
        help="stop a run S seconds after it starts, start-up and compiles included (default 1800)",
        metavar="S",
    ),
    OptionSpec(("-o", "--output"), "output", True, help="keep the recordings in DIR", metavar="DIR"),
    OptionSpec(("--json",), "json", help="print the results as JSON"),
    OptionSpec(("--md",), "md", help="print the table as Markdown"),
]
USAGE = "ctmon bench [options] SCRIPT|-m MODULE [ARGS...]"
DESCRIPTION = (
    "Run a script in each torch.compile mode (the mode put into its torch.compile calls; eager, the baseline, "
    "through torch.compiler.set_stance), several times and interleaved, and compare compile time, first step, "
    "steady step time, speed-up with its 95 % interval, memory and recompiles; no winner unless resolved."
)
POLL_S = 0.25
TRY = "try"  # the row of the default run with --try's change
INTERRUPT_GRACE_S = 15.0  # after SIGINT: a loop that catches KeyboardInterrupt saves and exits
TERM_GRACE_S = 10.0


def main(argv: list[str]) -> int:
    parsed = parse_launch("bench", argv, OPTIONS)
    if parsed.help:
        sys.stdout.write(format_help(USAGE, DESCRIPTION, OPTIONS))
        return 0
    assert parsed.spec is not None
    tried = _tried(parsed.text("try"))
    modes = _modes(parsed.text("modes")) + ([] if tried is None else [TRY])
    if tried is not None and "default" not in modes:
        modes.insert(1, "default")  # the unchanged run the tried change is held against
    steps = _number("--steps", parsed.text("steps"), int)
    limit = _number("--time-limit", parsed.text("time_limit"), float) or 1800.0
    max_runs = _number("--runs", parsed.text("runs"), int) or DEFAULT_RUNS
    budget = _number("--budget", parsed.text("budget"), float) or DEFAULT_BUDGET_S
    if parsed.flag("json") and parsed.flag("md"):
        raise CliError("bench: --json and --md are alternatives: give one")
    out_dir = parsed.text("output") or os.path.join(runtime.state_dir(), f"bench-{time.strftime('%Y%m%d-%H%M%S')}")
    _refuse_live_files(out_dir, modes, parsed.flag("warm"), max_runs)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise CliError(f"bench: cannot create {out_dir}: {e.strerror or e}") from None
    held = files.hold_directory(out_dir)  # ctmon runs leaves it alone while held (between runs too)
    own_cache = parsed.text("cache_dir") is None  # ours: removed at the end (Inductor caches grow large)
    cache = parsed.text("cache_dir") or tempfile.mkdtemp(prefix="ctmon-bench-cache-")
    bench = Bench(parsed.spec, modes, out_dir, cache, steps, limit, parsed.flag("warm"), Progress(sys.stderr))
    bench.tried = tried
    # Ctrl-C or a SIGTERM stops the run under way (its job is in a process
    # group of its own, so it would not get the signal), and the table shows
    # what was measured up to then.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        bench.rounds(max_runs, budget)
    except KeyboardInterrupt:  # between two runs: none is under way
        bench.interrupted, bench.ended_by = True, "interrupted"
    finally:
        signal.signal(signal.SIGTERM, previous)
        if held is not None:
            os.close(held)
        if own_cache:
            shutil.rmtree(cache, ignore_errors=True)
    bench.progress.done()
    rows = bench.rows()
    for row in rows:
        if row["mode"] == TRY:
            row["tried"] = tried
    doc: dict[str, Any] = {
        "modes": rows,
        "recommendation": compare(rows),
        "command": parsed.spec.display(),
        "steps_limit": steps,
        "time_limit_s": limit,
        "tried": tried,
        "runs_limit": max_runs,
        "budget_s": budget,
        "rounds": bench.orders,
        "ended_by": bench.ended_by,
        "cache_dir": None if own_cache else cache,
        "cache_given": parsed.text("cache_dir") is not None,
        "mode_caches": {m: _mode_cache(cache, m) for m in bench.runs},
        "recordings": out_dir,
        "device_timed": any(r.get("device_timed") for r in rows),
    }
    if parsed.flag("json"):
        sys.stdout.write(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    elif parsed.flag("md"):
        sys.stdout.write(render_markdown(doc))
    else:
        sys.stdout.write(render_text(doc))
        sys.stdout.write(f"recordings: {out_dir}\n")
    if bench.interrupted:
        sys.stderr.write(f"ctmon: bench interrupted: {len(bench.runs)} of {len(modes)} mode(s) run\n")
        return 130
    return 0 if any(r["status"] in ("ok", "time-limit") for r in rows) else 1


class Bench:
    """The runs of every mode, round by round, and when to stop."""

    def __init__(
        self,
        spec: JobSpec,
        modes: list[str],
        out_dir: str,
        cache: str,
        steps: int | None,
        limit: float,
        warm: bool,
        progress: Progress,
    ) -> None:
        self.spec, self.modes, self.out_dir, self.cache = spec, modes, out_dir, cache
        self.steps, self.limit, self.warm, self.progress = steps, limit, warm, progress
        self.runs: dict[str, list[ModeRun]] = {}  # each mode's runs, in the order they ran
        self.orders: list[list[str]] = []  # the order of each round
        self.interrupted = False
        self.ended_by: str | None = None  # "resolved", "runs", "budget", "interrupted"
        self.tried: str | None = None  # --try: the change the "try" runs make

    def rounds(self, max_runs: int, budget: float) -> None:
        started = time.monotonic()
        last_round = 0.0
        for k in range(1, max_runs + 1):
            if k > 1 and time.monotonic() - started + last_round > budget:
                self.ended_by = "budget"
                return
            order = self._order(k)
            if not order:  # every mode failed: nothing more to measure
                break
            self.orders.append(order)
            round_started = time.monotonic()
            for i, mode in enumerate(order):
                label = f"[{i + 1}/{len(order)}] {mode}" + (f" run {k}" if k > 1 else "")
                if not self._run(mode, k, label):
                    self.interrupted, self.ended_by = True, "interrupted"
                    return
            last_round = time.monotonic() - round_started
            if k >= min(MIN_RUNS, max_runs) and self._resolved(k):
                self.ended_by = "resolved"
                return
        self.ended_by = "runs"

    def _order(self, k: int) -> list[str]:
        """The modes of round ``k``: all of them, as given, in the first;
        later, those whose first run was measured (a failed or uncompiled
        mode is not run again), shuffled."""
        if k == 1:
            return list(self.modes)
        live = [m for m in self.modes if m in self.runs and mode_row(self.runs[m][0])["status"] in ("ok", "time-limit")]
        random.shuffle(live)
        return live

    def _run(self, mode: str, k: int, label: str) -> bool:
        """One run of ``mode`` (and its --warm run after the first); False if interrupted."""
        cache = _mode_cache(self.cache, mode)
        suffix = "" if k == 1 else f"-{k}"
        run = run_mode(
            self.spec, mode, self.out_dir, cache, self.steps, self.limit, self.progress, label, suffix, self.tried
        )
        self.runs.setdefault(mode, []).append(run)
        if run.stopped == "interrupted":
            return False
        if k == 1 and self.warm and mode != "eager" and run.session is not None and run.error is None:
            run.warm = run_mode(
                self.spec,
                mode,
                self.out_dir,
                cache,
                self.steps,
                self.limit,
                self.progress,
                label + " (warm)",
                "-warm",
                self.tried,
            )
            if run.warm.stopped == "interrupted":
                return False
        return True

    def rows(self) -> list[dict[str, Any]]:
        return [summarize(self.runs[m]) for m in self.modes if m in self.runs]

    def _resolved(self, k: int) -> bool:
        """After round ``k``: is every measured mode's speed-up against eager
        resolved? Said on stderr either way."""
        rows = self.rows()
        rec = compare(rows)
        compiled = [r for r in rows if r["mode"] != "eager" and r.get("p50_ms")]
        said = [
            f"{r['mode']} {r['speedup']:.2f}×"
            + (f" ({r['speedup_ci'][0]:.2f}–{r['speedup_ci'][1]:.2f}×)" if r.get("speedup_ci") else "")
            + (" resolved" if r.get("resolved") else " not resolved")
            for r in compiled
            if r.get("speedup")
        ]
        spread = rec["noise"].get("spread_pct")
        noise = f"; noise ±{spread:.1f} %" if spread is not None else ""
        self.progress.say(f"after {k} run(s) per mode: {', '.join(said) or 'nothing compiled to compare'}{noise}")
        return all(r.get("resolved") for r in compiled)


def _tried(text: str | None) -> str | None:
    """``--try``'s NAME=VALUE, checked here so that the job never sees a bad one."""
    if text is None:
        return None
    try:
        parse_try(text)
    except ValueError as e:
        raise CliError(f"bench: --try {e}") from None
    return text.strip()


def _mode_cache(cache: str, mode: str) -> str:
    """A mode's own Inductor cache: no mode reuses another's kernels."""
    return os.path.join(cache, mode)


def _refuse_live_files(out_dir: str, modes: list[str], warm: bool, max_runs: int) -> None:
    """One line before any run if a running ctmon writes in ``out_dir``
    (another bench), or writes a file there that a run here would replace
    (``run_mode`` clears what a run's names hold before the run)."""
    from ctmon.cli.outfile import refuse_busy_directory, refuse_overwrite

    refuse_busy_directory("bench", out_dir)
    for mode in modes:
        suffixes = ["", *(f"-{k}" for k in range(2, max_runs + 1))]
        for suffix in [*suffixes, "-warm"] if warm and mode != "eager" else suffixes:
            for path in _run_files(out_dir, mode, suffix):
                refuse_overwrite("bench", path, ())


def _run_files(out_dir: str, mode: str, suffix: str = "") -> tuple[str, str]:
    """A run's recording and its output log."""
    return os.path.join(out_dir, f"{mode}{suffix}.jsonl"), os.path.join(out_dir, f"{mode}{suffix}.output.log")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _modes(text: str | None) -> list[str]:
    if text is None:
        return list(MODES)
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise CliError(f"bench: unknown mode {', '.join(unknown) or '(none given)'} (modes: {', '.join(MODES)})")
    return list(dict.fromkeys(["eager", *modes]))  # eager is the baseline and the measure of the noise


def _number(option: str, text: str | None, kind: type) -> Any:
    if text is None:
        return None
    try:
        v = kind(text)
    except ValueError:
        raise CliError(f"bench: {option} takes a number, not {text!r}") from None
    if not v > 0:
        raise CliError(f"bench: {option} must be above 0")
    return v


def _job_args(spec: JobSpec) -> list[str]:
    if spec.mode == "module":
        return ["-m", spec.target, *spec.args]
    return ["--", spec.target, *spec.args]


def run_mode(
    spec: JobSpec,
    mode: str,
    out_dir: str,
    cache: str,
    steps: int | None,
    limit: float,
    progress: Progress,
    label: str,
    suffix: str = "",
    tried: str | None = None,
) -> ModeRun:
    rec, log = _run_files(out_dir, mode, suffix)
    for stale in (rec, log):
        if os.path.exists(stale):
            os.unlink(stale)
    env = {**os.environ, "CTMON_COMPILE_MODE": mode, "TORCHINDUCTOR_CACHE_DIR": cache}
    env.pop(TRY_ENV, None)
    if mode == TRY and tried is not None:  # default, with the one change
        env.update({"CTMON_COMPILE_MODE": "default", TRY_ENV: tried})
    cmd = [sys.executable, "-m", "ctmon", "record", "-q", "-o", rec, *_job_args(spec)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, cwd=spec.cwd, start_new_session=True
        )
    follow = Follower(rec)
    started = time.monotonic()
    stopped: str | None = None
    stop_at: float | None = None  # when to escalate the stop
    stage = 0
    while True:
        try:
            code = _step(proc, follow, progress, label, started)
            if code is not None:
                break
            elapsed = time.monotonic() - started
            if stopped is None:
                if steps is not None and follow.steps() >= steps:
                    stopped = "steps"
                elif elapsed > limit:
                    stopped = "time-limit"
                if stopped is not None:
                    stop_at, stage = _interrupt_run(proc, follow)
            elif stage == 0 and follow.events:  # the stop waited for the recording to begin
                stop_at, stage = _interrupt_run(proc, follow)
            elif stop_at is not None and time.monotonic() > stop_at:
                sig = signal.SIGTERM if stage <= 1 else signal.SIGKILL
                _signal_group(proc, sig)
                stop_at, stage = (time.monotonic() + TERM_GRACE_S, 2) if stage <= 1 else (None, 3)
            time.sleep(POLL_S)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM to ctmon bench: stop this run first
            if stopped == "interrupted":  # asked twice: no more grace
                _signal_group(proc, signal.SIGKILL)
            else:
                stopped = "interrupted"
                stop_at, stage = _interrupt_run(proc, follow)
    follow.read(final=True)
    progress.show(label, "done", "", time.monotonic() - started, keep=True)
    run = ModeRun(mode, follow.session if follow.events else None, rec, stopped, code)
    if not follow.events:
        run.error = f"nothing was recorded: {_last_line(log) or f'exit code {code}'}"
    elif stopped is None and code != 0 and follow.session.uncaught is None and not follow.session.ranks:
        run.error = _last_line(log) or f"exited with code {code}"
    return run


def _step(
    proc: subprocess.Popen[bytes], follow: Follower, progress: Progress, label: str, started: float
) -> int | None:
    """One look at the run: its exit status (None: running), its progress shown."""
    code = proc.poll()
    follow.read()
    progress.show(label, *follow.state(), time.monotonic() - started)
    return code


def _interrupt_run(proc: subprocess.Popen[bytes], follow: Follower) -> tuple[float, int]:
    """Ctrl-C to the run, once its recording has begun: (when to escalate,
    stage 1). Until then ``ctmon record`` is starting and has not yet left
    Ctrl-C to the job -- the signal would end ctmon itself, nothing
    recorded, as a short limit on a loaded machine did -- so the stop waits
    for the recording (stage 0), escalating after the same grace."""
    if follow.events:
        _signal_group(proc, signal.SIGINT)
        return time.monotonic() + INTERRUPT_GRACE_S, 1
    return time.monotonic() + INTERRUPT_GRACE_S, 0


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except OSError:
        pass


def _last_line(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            lines = [x.strip() for x in f.read().decode("utf-8", "replace").splitlines() if x.strip()]
    except OSError:
        return None
    return lines[-1][:300] if lines else None


class Follower(RecordingFollower):
    """A run's recording as it grows, and what the run is doing."""

    def state(self) -> tuple[str, str]:
        """What the run is doing (starting, compiling, stepping), and a detail."""
        s = self.session
        cs = s.compile
        open_since = [ev.t for ev in cs.active.values()] + list(cs.phases.backward_open.values())
        for rs in s.ranks.values():
            open_since += [ev.t for ev in rs.session.compile.active.values()]
            open_since += list(rs.session.compile.phases.backward_open.values())
        compiles = cs.compile_count + sum(rs.session.compile.compile_count for rs in s.ranks.values())
        done = f"{compiles} compile{'s' if compiles != 1 else ''} done"
        if open_since:
            return "compiling", f"for {max(0.0, time.time() - min(open_since)):.0f} s, {done}"
        n = self.steps()
        if n:
            return "stepping", f"{n} step{'s' if n != 1 else ''}, {done}"
        return "starting", ""


class Progress:
    """One line, rewritten in place on a terminal; on a pipe, a line per change of what runs."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.last = ""
        self.shown_at = 0.0

    def show(self, label: str, state: str, detail: str, elapsed: float, keep: bool = False) -> None:
        text = f"{label}: {state}{f' {detail}' if detail else ''} ({elapsed:.0f} s)"
        if self.tty:
            self.stream.write("\r\x1b[K" + text[:200] + ("\n" if keep else ""))
            self.stream.flush()
            return
        head = f"{label}: {state}"
        if keep or head != self.last or time.monotonic() - self.shown_at > 30:
            self.stream.write(text + "\n")
            self.stream.flush()
            self.last, self.shown_at = head, time.monotonic()

    def say(self, text: str) -> None:
        """A line that stays (what is resolved so far)."""
        self.stream.write(("\r\x1b[K" if self.tty else "") + text + "\n")
        self.stream.flush()
        self.last = ""

    def done(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
