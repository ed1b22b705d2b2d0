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
import sys
import tempfile
import time
from types import FrameType
from typing import Any

from ctmon.agent.bench_mode import parse_try
from ctmon.cli import CliError
from ctmon.cli.args import OptionSpec, format_help, parse_launch
from ctmon.cli.bench_run import TRY, Progress, run_files, run_mode
from ctmon.launch import files, runtime
from ctmon.launch.spec import JobSpec
from ctmon.report.bench import ModeRun, compare, mode_row, summarize
from ctmon.report.bench_render import render_markdown, render_text
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
            for path in run_files(out_dir, mode, suffix):
                refuse_overwrite("bench", path, ())


def _interrupt(signum: int, frame: FrameType | None) -> None:
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
