"""One run of ``ctmon bench``: a mode's job under ``ctmon record``, followed
as its recording grows, stopped at its step count or time limit (Ctrl-C,
then SIGTERM, then SIGKILL), and what it is doing, shown on one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import TextIO

from ctmon.agent.bench_mode import TRY_ENV
from ctmon.launch.spec import JobSpec
from ctmon.read.follow import Follower
from ctmon.report.bench import ModeRun

POLL_S = 0.25
TRY = "try"  # the row of the default run with --try's change
INTERRUPT_GRACE_S = 15.0  # after SIGINT: a loop that catches KeyboardInterrupt saves and exits
TERM_GRACE_S = 10.0


def run_files(out_dir: str, mode: str, suffix: str = "") -> tuple[str, str]:
    """A run's recording and its output log."""
    return os.path.join(out_dir, f"{mode}{suffix}.jsonl"), os.path.join(out_dir, f"{mode}{suffix}.output.log")


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
    rec, log = run_files(out_dir, mode, suffix)
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
    follow = RunRecording(rec)
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
    proc: subprocess.Popen[bytes], follow: RunRecording, progress: Progress, label: str, started: float
) -> int | None:
    """One look at the run: its exit status (None: running), its progress shown."""
    code = proc.poll()
    follow.read()
    progress.show(label, *follow.state(), time.monotonic() - started)
    return code


def _interrupt_run(proc: subprocess.Popen[bytes], follow: RunRecording) -> tuple[float, int]:
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


class RunRecording(Follower):
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

    def __init__(self, stream: TextIO) -> None:
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
