"""The fault suite: whatever happens to the viewer, the supervisor or the job,
the job ends with the exit status and step count it has without ctmon, and
the recording is complete.

Every case runs ``tests/workloads/faults_job.py`` -- N steps marked with
``ctmon.step()``, lines on stdout, a chosen ending -- once plainly (the
reference) and once under ctmon with the fault injected, then compares:

* the exit status (or signal) is the reference's;
* the report's ``steps.count`` is N;
* the recording is complete: every line is an event, the first is
  ``session``, the last is the one ``exit``, and the job's output in it is
  the reference's output line for line.

The reference run leaves out ``--step-ms`` and ``--compiles``: they change
how long the job takes, not what it prints, its steps or its exit status.

Viewers are real processes: ``tests/workloads/faults_viewer.py`` (a
``SocketFeed`` folding events into the store, as the TUI does) or the real
TUI (``ctmon attach`` / ``ctmon watch``) in tmux. docs/RELIABILITY.md
tabulates what these tests measure; set CTMON_FAULTS_MEASURE=FILE to collect
the measured values as JSON lines.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest
from helpers import ROOT, WORKLOADS, env_with, short_tmux_dir

from ctmon.launch.runtime import output_log_path
from ctmon.read.output_log import output_bytes
from ctmon.report.build import build_report
from ctmon.store import Session

pytestmark = pytest.mark.slow  # faults injected into real jobs, supervisors and viewers

PY = sys.executable
JOB = os.path.join(WORKLOADS, "faults_job.py")
VIEWER = os.path.join(WORKLOADS, "faults_viewer.py")


# ---------------------------------------------------------------- helpers


def measure(case: str, **values: Any) -> None:
    """Append measured values for docs/RELIABILITY.md (only when asked to)."""
    path = os.environ.get("CTMON_FAULTS_MEASURE")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"case": case, **values}) + "\n")


def wait_until(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def alive(pid: int) -> bool:
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def job_info(text: str) -> dict[str, Any] | None:
    for line in text.splitlines():
        if line.startswith("FAULTS_JOB "):
            return json.loads(line[len("FAULTS_JOB ") :])
    return None


def job_lines(text: str) -> list[str]:
    """The job's output without its timing line (the only one that varies)."""
    return [ln for ln in text.splitlines() if not ln.startswith("FAULTS_JOB ")]


def status_of(rc: int) -> int:
    """A Popen return code as a shell shows it ($?)."""
    return rc if rc >= 0 else 128 - rc


@pytest.fixture
def rt() -> Iterator[str]:
    """A private runtime dir for the session sockets, with a short path
    (a Unix socket path must stay under 108 bytes)."""
    d = tempfile.mkdtemp(prefix="ctf-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def env_for(rt: str, **extra: str) -> dict[str, str]:
    env = env_with(**extra)
    env["CTMON_RUNTIME_DIR"] = os.path.join(rt, "run")
    return env


@dataclass
class Ref:
    rc: int
    stdout: str
    stderr: str

    @property
    def steps(self) -> int:
        info = job_info(self.stdout)
        assert info is not None, self.stdout[-2000:]
        return int(info["steps"])


def _fast(args: list[str]) -> list[str]:
    out: list[str] = []
    it = iter(args)
    for a in it:
        if a in ("--step-ms", "--compiles"):
            next(it, None)
            continue
        out.append(a)
    return out


def reference(args: list[str], tmp: str | None = None, timeout: float = 120) -> Ref:
    """The job run plainly, without ctmon: what every fault is compared with."""
    args = _fast(args)
    if tmp is not None:  # gates open from the start
        for opt, suffix in (("--gate", ""), ("--done", ".go")):
            if opt in args:
                i = args.index(opt)
                args[i + 1] = os.path.join(tmp, f"ref{opt.strip('-')}")
                open(args[i + 1] + suffix, "w").close()
    p = subprocess.run([PY, JOB, *args], env=env_with(), cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return Ref(p.returncode, p.stdout, p.stderr)


def reference_signalled(args: list[str], tmp: str, signals: list[signal.Signals], group: bool = False) -> Ref:
    """The job run plainly with --end wait, then signalled like the ctmon run."""
    out, err = os.path.join(tmp, "ref.out"), os.path.join(tmp, "ref.err")
    with open(out, "wb") as fo, open(err, "wb") as fe:
        p = subprocess.Popen(
            [PY, JOB, *_fast(args)], env=env_with(), cwd=ROOT, stdout=fo, stderr=fe, start_new_session=True
        )
    try:
        wait_until(lambda: "WAITING" in _read(out), 30, "the plain job to wait")
        for sig in signals:
            (os.killpg if group else os.kill)(p.pid, sig)
            time.sleep(0.3)
        rc = p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
    return Ref(rc, _read(out), _read(err))


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def read_events(path: str) -> tuple[list[dict[str, Any]], int]:
    """Every line of a recording as an event; (events, lines that were not events)."""
    events: list[dict[str, Any]] = []
    bad = 0
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return [], 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(ev, dict) and isinstance(ev.get("kind"), str):
            events.append(ev)
        else:
            bad += 1
    return events, bad


def stdout_of(events: list[dict[str, Any]], stream: str = "stdout") -> str:
    return "".join(e["data"] for e in events if e["kind"] == "output" and e.get("stream") == stream)


def has_exit(path: str) -> bool:
    return any(e["kind"] == "exit" for e in read_events(path)[0])


def assert_complete(
    rec: str,
    steps: int,
    ref: Ref | None = None,
    *,
    expected_lines: list[str] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The recording is whole: events only, session first, one exit last, N steps, all output."""
    events, bad = read_events(rec)
    assert bad == 0, f"{bad} lines of {rec} are not events"
    assert events, f"{rec} is empty"
    assert events[0]["kind"] == "session", events[0]
    assert events[-1]["kind"] == "exit", [e["kind"] for e in events[-5:]]
    assert [e["kind"] for e in events].count("exit") == 1
    assert [e["kind"] for e in events].count("session") == 1
    report = build_report(Session().apply_all(events))
    assert report["steps"]["count"] == steps, report["steps"]
    if steps:
        assert report["steps"]["source"] == "api"
    # every byte, also those of reads too big to go inline (X.output.log)
    out = output_bytes(rec).get("stdout", b"").decode("utf-8", "replace")
    if ref is not None:
        assert job_lines(out) == job_lines(ref.stdout), "the recorded output is not the job's output"
        assert (job_info(out) is None) == (job_info(ref.stdout) is None)
    if expected_lines is not None:
        assert job_lines(out) == expected_lines
    if ref is not None:
        ex = events[-1]
        rc = ref.rc
        if rc >= 0:
            assert ex["code"] == rc and ex["signal"] is None, ex
        else:
            assert ex["code"] is None and ex["signal"] == signal.Signals(-rc).name, ex
    return events, report


def step_lines(n: int, every: int, pad: int = 0) -> list[str]:
    filler = "x" * max(0, pad - 16)
    return [f"step {i} {filler}" for i in range(0, n, every)]


class Record:
    """``ctmon record`` in the background (its own process group), output in files."""

    def __init__(
        self,
        tmp: str,
        args: list[str],
        env: dict[str, str],
        *,
        rec: str | None = None,
        options: list[str] | None = None,
        target: list[str] | None = None,
    ) -> None:
        self.rec = rec or os.path.join(tmp, "rec.jsonl")
        self.out_path = os.path.join(tmp, "ctmon.out")
        self.err_path = os.path.join(tmp, "ctmon.err")
        cmd = [PY, "-m", "ctmon", "record", "-o", self.rec, *(options or []), *(target or [JOB]), *args]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=err, start_new_session=True)
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stdout(self) -> str:
        return _read(self.out_path)

    def stderr(self) -> str:
        return _read(self.err_path)

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.rec)[0]

    def session(self, timeout: float = 30) -> dict[str, Any]:
        def first() -> dict[str, Any] | None:
            evs = self.events()
            return evs[0] if evs and evs[0]["kind"] == "session" else None

        return wait_until(first, timeout, "the session event")  # type: ignore[no-any-return]

    def wait_stdout(self, text: str, timeout: float = 30) -> None:
        wait_until(lambda: text in self.stdout() or self.proc.poll() is not None, timeout, f"{text!r} on stdout")
        assert text in self.stdout(), f"ctmon exited ({self.proc.returncode}) before {text!r}:\n{self.stderr()}"

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"ctmon record did not finish in {timeout} s:\n{self.stderr()[-3000:]}") from None

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@contextlib.contextmanager
def recording(tmp: str, args: list[str], env: dict[str, str], **kw: Any) -> Iterator[Record]:
    r = Record(tmp, args, env, **kw)
    try:
        yield r
    finally:
        r.cleanup()


def viewer_socket(rt: str, timeout: float = 30) -> str:
    def find() -> str | None:
        found = glob.glob(os.path.join(rt, "run", "*", "viewer.sock"))
        return found[0] if found else None

    return wait_until(find, timeout, "the session's viewer socket")  # type: ignore[no-any-return]


class Viewer:
    """tests/workloads/faults_viewer.py: a viewer process on a session's socket."""

    def __init__(self, tmp: str, sock: str, *extra: str, name: str = "viewer") -> None:
        self.status_path = os.path.join(tmp, f"{name}.json")
        self.err_path = os.path.join(tmp, f"{name}.err")
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [PY, VIEWER, sock, self.status_path, *extra],
                env=env_with(),
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def status(self) -> dict[str, Any]:
        try:
            with open(self.status_path) as f:
                return json.load(f)  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return {}

    def wait_events(self, n: int = 1, timeout: float = 30) -> dict[str, Any]:
        def got() -> dict[str, Any] | None:
            st = self.status()
            if self.proc.poll() is not None and not st.get("done"):
                raise AssertionError(f"the viewer died: {_read(self.err_path)[-2000:]}")
            return st if st.get("events", 0) >= n else None

        return wait_until(got, timeout, f"the viewer to read {n} events")  # type: ignore[no-any-return]

    def wait_done(self, timeout: float = 30) -> dict[str, Any]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the viewer did not finish: {self.status()}") from None
        assert self.proc.returncode == 0, _read(self.err_path)[-3000:]
        st = self.status()
        assert st.get("done"), st
        return st

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)


def _peak_rss_mb(pid: int) -> float | None:
    """The kernel's high-water mark of a process's RSS (VmHWM), so no peak falls between samples."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class RssSampler:
    """Peak RSS (VmHWM) of some processes, read in a thread until they exit."""

    def __init__(self, interval: float = 0.1) -> None:
        self.pids: dict[str, int] = {}
        self.peak: dict[str, float] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, daemon=True)

    def watch(self, name: str, pid: int) -> None:
        self.pids[name] = pid

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pid in list(self.pids.items()):
                mb = _peak_rss_mb(pid)
                if mb is None:
                    continue
                self.peak[name] = max(self.peak.get(name, 0.0), mb)
            self.samples += 1
            self._stop.wait(self._interval)


# ------------------------------------------------------- the job's own end


@pytest.mark.parametrize("how, rc", [("ok", 0), ("exception", 1), ("exit", 7), ("sigkill", -signal.SIGKILL)])
def test_job_end_as_without_ctmon(tmp_path, rt, how, rc) -> None:  # type: ignore[no-untyped-def]
    """Never attached, and crashes: exception, os._exit, SIGKILL. Exit status,
    steps, output and the traceback are the plain run's; the recording ends
    with the exit (boundaries written before SIGKILL included)."""
    args = ["--steps", "20000", "--print-every", "1000", "--end", how]
    ref = reference(args)
    assert ref.rc == rc and ref.steps == 20000
    with recording(str(tmp_path), args, env_for(rt)) as run:
        got = run.wait(60)
        assert got == ref.rc, run.stderr()
        events, report = assert_complete(run.rec, ref.steps, ref)
        if how == "exception":
            assert ref.stderr and ref.stderr in run.stderr(), run.stderr()  # the same traceback, no ctmon frames
            assert run.stderr().count("Traceback") == 1
        measure(
            f"job end: {how}",
            plain_rc=ref.rc,
            ctmon_rc=got,
            plain_steps=ref.steps,
            steps=report["steps"]["count"],
            events=len(events),
        )


def test_never_attached_detached_supervisor(tmp_path, rt, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``ctmon attach``'s own path with no viewer ever: the detached supervisor
    runs the job to its end, keeps its output in a log beside the recording,
    and the recording is complete."""
    from ctmon.launch.daemon import start_detached
    from ctmon.launch.spec import JobSpec

    args = ["--steps", "400", "--step-ms", "2", "--print-every", "1", "--end", "exit"]
    ref = reference(args)
    monkeypatch.setenv("CTMON_RUNTIME_DIR", os.path.join(rt, "run"))
    monkeypatch.setenv("PYTHONPATH", ROOT)
    rec = str(tmp_path / "detached.jsonl")
    d = start_detached(JobSpec(mode="script", target=JOB, args=args, cwd=ROOT), rec)
    try:
        assert d.proc.wait(60) == 0
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
    events, report = assert_complete(rec, ref.steps, ref)
    assert events[0]["mode"] == "attach"
    assert d.output_log == output_log_path(rec) == str(tmp_path / "detached.output.log")
    assert job_lines(_read(d.output_log)) == job_lines(ref.stdout)
    assert not os.path.exists(d.session_dir), "the session dir outlived its supervisor"
    measure(
        "never attached (detached supervisor)",
        plain_rc=ref.rc,
        exit_code=events[-1]["code"],
        steps=report["steps"]["count"],
        output_log_lines=len(_read(d.output_log).splitlines()),
    )


# ----------------------------------------------------------- viewer faults


def test_viewer_kill9_mid_run(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """A viewer killed with -9 mid-run: the job runs on; a viewer that comes
    later gets the whole history from the first event to the exit."""
    tmp = str(tmp_path)
    args = ["--steps", "400", "--step-ms", "5", "--print-every", "1", "--line-bytes", "200"]
    ref = reference(args)
    with recording(tmp, args, env_for(rt)) as run:
        sock = viewer_socket(rt)
        v = Viewer(tmp, sock, name="killed")
        try:
            st = v.wait_events(20)
            assert st["first"] == "session"
            assert not has_exit(run.rec), "the job ended before the viewer was killed"
            os.kill(v.pid, signal.SIGKILL)
            v.proc.wait(10)
            late = Viewer(tmp, sock, name="late")
            try:
                final = late.wait_done(60)
            finally:
                late.cleanup()
        finally:
            v.cleanup()
        rc = run.wait(60)
        assert rc == ref.rc, run.stderr()
        events, report = assert_complete(run.rec, ref.steps, ref)
        assert final["first"] == "session" and final["last"] == "exit"
        assert final["events"] == len(events) and final["steps"] == ref.steps
        measure(
            "viewer kill -9",
            plain_rc=ref.rc,
            ctmon_rc=rc,
            steps=report["steps"]["count"],
            killed_after_events=st["events"],
            late_viewer_events=final["events"],
            recording_events=len(events),
        )


def test_viewer_stopped_30s_does_not_slow_the_job(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """A viewer stopped (SIGSTOP) for 30 s while the job writes ~4 MB of
    output: the job keeps its pace (its stdout never blocks), the recording
    is complete, and after SIGCONT the viewer catches up to the exit."""
    tmp = str(tmp_path)
    n, ms, pad = 3600, 10, 1000
    args = ["--steps", str(n), "--step-ms", str(ms), "--print-every", "1", "--line-bytes", str(pad)]
    # The pace without ctmon: the same steps, sleep included, on this machine.
    base = subprocess.run(
        [PY, JOB, "--steps", "300", "--step-ms", str(ms), "--print-every", "1", "--line-bytes", str(pad)],
        env=env_with(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    base_step_s = job_info(base.stdout)["loop_s"] / 300  # type: ignore[index]
    with recording(tmp, args, env_for(rt)) as run:
        v = Viewer(tmp, viewer_socket(rt))
        try:
            before = v.wait_events(10)
            os.kill(v.pid, signal.SIGSTOP)
            stopped_at = time.monotonic()
            lines_at_stop = len(run.events())
            time.sleep(30)
            lines_at_cont = len(run.events())
            os.kill(v.pid, signal.SIGCONT)
            cont_at = time.monotonic()
            caught = v.wait_events(lines_at_cont, 20)
            catch_up_s = time.monotonic() - cont_at
            rc = run.wait(60)
            final = v.wait_done(30)
        finally:
            v.cleanup()
        assert rc == base.returncode == 0, run.stderr()
        info = job_info(run.stdout())
        assert info is not None and info["steps"] == n
        step_s = info["loop_s"] / n
        # Blocked output would show as one step of ~30 s; a slower job as a slower pace.
        assert info["max_gap_s"] < 1.0, info
        assert step_s < base_step_s * 1.3 + 0.001, (step_s, base_step_s)
        events, report = assert_complete(run.rec, n, expected_lines=step_lines(n, 1, pad))
        assert lines_at_cont - lines_at_stop > 1000, "the recording did not grow while the viewer was stopped"
        assert final["events"] == len(events) and final["last"] == "exit" and final["steps"] == n
        measure(
            "viewer SIGSTOP 30 s",
            rc=rc,
            steps=report["steps"]["count"],
            plain_step_ms=round(base_step_s * 1e3, 3),
            step_ms=round(step_s * 1e3, 3),
            max_gap_s=info["max_gap_s"],
            loop_s=info["loop_s"],
            stopped_s=round(cont_at - stopped_at, 1),
            events_before_stop=before["events"],
            recording_grew_by=lines_at_cont - lines_at_stop,
            catch_up_s=round(catch_up_s, 2),
            viewer_events=final["events"],
            recording_events=len(events),
            recording_mb=round(os.path.getsize(run.rec) / 2**20, 1),
            caught_events=caught["events"],
        )


def _open_fds(pid: int) -> int:
    """Open fds of a process (the least of a few looks: its sampler thread opens /proc files now and then)."""
    counts = []
    for _ in range(5):
        counts.append(len(os.listdir(f"/proc/{pid}/fd")))
        time.sleep(0.05)
    return min(counts)


def _fds_settled_to(pid: int, bound: int, within_s: float = 15.0) -> int:
    """The supervisor's open fds once they are back to ``bound`` (it closes a
    viewer's socket on one of its next passes, later on a busy machine); the
    last count if they never are within ``within_s``: a leak."""
    deadline = time.monotonic() + within_s
    n = _open_fds(pid)
    while n > bound and time.monotonic() < deadline:
        time.sleep(0.1)
        n = _open_fds(pid)
    return n


def test_attach_detach_ten_times(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """Ten viewers come and go mid-run: each gets the history from the first
    event; the supervisor keeps no trace of them (same open fds); the job is
    unaffected and a last viewer reads the whole recording."""
    tmp = str(tmp_path)
    # the job holds after its steps until the viewers are done: on a loaded
    # machine ten viewers' start-ups outlast any fixed number of steps
    done = os.path.join(tmp, "done")
    args = ["--steps", "1600", "--step-ms", "5", "--print-every", "1", "--done", done]
    ref = reference(args, tmp)
    with recording(tmp, args, env_for(rt)) as run:
        sock = viewer_socket(rt)
        run.session()
        time.sleep(0.3)
        fds_before = _open_fds(run.pid)
        seen = []
        for i in range(10):
            v = Viewer(tmp, sock, "--detach-after", "30", name=f"v{i}")
            try:
                st = v.wait_done(30)
            finally:
                v.cleanup()
            assert st["first"] == "session" and st["events"] >= 30, st
            seen.append(st["events"])
        fds_after = _fds_settled_to(run.pid, fds_before)  # the supervisor notices the last close on a later pass
        assert not has_exit(run.rec), "the job ended before the viewers were done"
        open(done + ".go", "w").close()
        last = Viewer(tmp, sock, name="last")
        try:
            final = last.wait_done(60)
        finally:
            last.cleanup()
        rc = run.wait(60)
        assert rc == ref.rc, run.stderr()
        events, report = assert_complete(run.rec, ref.steps, ref)
        assert fds_after <= fds_before, (fds_before, fds_after)  # no viewer left a trace
        assert final["events"] == len(events) and final["steps"] == ref.steps
        measure(
            "attach/detach x10",
            plain_rc=ref.rc,
            ctmon_rc=rc,
            steps=report["steps"]["count"],
            viewer_events=seen,
            supervisor_fds=[fds_before, fds_after],
            last_viewer_events=final["events"],
        )


# ------------------------------------------------------ supervisor faults


@pytest.mark.parametrize("warmup", [10, 0], ids=["mid-run", "from-the-first-step"])
def test_step_ring_overflow_counts_drops(tmp_path, rt, warmup) -> None:  # type: ignore[no-untyped-def]
    """The supervisor stopped (SIGSTOP) while the job marks 200,000 steps into
    a 1024-slot ring: the job never waits; the boundaries it overwrote are
    counted as drops; the step count stays the job's.

    mid-run: the supervisor had already read the first steps. from the first
    step: it had read none, so the ring also lost the marker that names the
    step source."""
    tmp = str(tmp_path)
    n = 200_000
    gate, done = os.path.join(tmp, "gate"), os.path.join(tmp, "done")
    args = ["--warmup", str(warmup), "--steps", str(n), "--gate", gate, "--done", done]
    ref = reference(args, tmp)
    total = warmup + n
    assert ref.rc == 0 and ref.steps == total
    with recording(tmp, args, env_for(rt, CTMON_STEP_RING_CAPACITY="1024")) as run:
        run.wait_stdout("READY")
        if warmup:
            wait_until(lambda: any(e["kind"] == "steps" for e in run.events()), 10, "the warm-up steps")
        os.kill(run.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            open(gate, "w").close()
            wait_until(lambda: os.path.exists(done), 30, "the job's steps (with the supervisor stopped)")
            steps_s = time.monotonic() - t0
        finally:
            os.kill(run.pid, signal.SIGCONT)
        open(done + ".go", "w").close()
        rc = run.wait(60)
        assert rc == ref.rc, run.stderr()
        events, bad = read_events(run.rec)
        received = sum(len(e["ns"]) for e in events if e["kind"] == "steps")
        drops = max((e.get("steps", 0) for e in events if e["kind"] == "drops"), default=0)
        srcs = {e["src"] for e in events if e["kind"] == "steps"}
        measure(
            f"step ring overflow ({'mid-run' if warmup else 'from the first step'})",
            plain_rc=ref.rc,
            ctmon_rc=rc,
            steps_written=total,
            steps_received=received,
            drops_steps=drops,
            sources=sorted(srcs),
            job_steps_s=round(steps_s, 2),
        )
        assert drops > 0, "nothing was dropped: the ring did not overflow"
        assert srcs == {"api"}, f"steps events name the source {srcs}"
        assert received + drops == total, (received, drops, total)
        _, report = assert_complete(run.rec, total, ref)
        assert report["drops"]["steps"] == drops
        assert f"dropped {drops} step" in run.stderr()


def test_event_queue_overflow_counts_drops(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """The supervisor stopped (SIGSTOP) while the job pours 120,000 records
    into PyTorch's structured trace -- more than the agent's bounded event
    queue holds: the job never waits for the monitor, the records past the cap
    are counted as drops (shown in the summary), and every record is either
    received or counted."""
    from ctmon.agent.channel import EVENT_QUEUE_MAX

    tmp = str(tmp_path)
    n = EVENT_QUEUE_MAX + 20_000
    gate, done = os.path.join(tmp, "gate"), os.path.join(tmp, "done")
    args = ["--steps", "20", "--trace-records", str(n), "--gate", gate, "--done", done]
    ref = reference(args, tmp, timeout=300)
    assert ref.rc == 0 and ref.steps == 20
    ref_trace_s = job_info(ref.stdout)["trace_s"]  # type: ignore[index]
    with recording(tmp, args, env_for(rt)) as run:
        run.wait_stdout("READY", timeout=60)
        os.kill(run.pid, signal.SIGSTOP)
        try:
            open(gate, "w").close()
            wait_until(lambda: os.path.exists(done), 240, "the job's records (with the supervisor stopped)")
        finally:
            os.kill(run.pid, signal.SIGCONT)
        open(done + ".go", "w").close()
        rc = run.wait(120)
        assert rc == ref.rc, run.stderr()
        events, report = assert_complete(run.rec, 20, ref)
        received = sum(1 for e in events if e["kind"] == "cache" and e.get("key") == "faults-job")
        drops = max((e.get("events", 0) for e in events if e["kind"] == "drops"), default=0)
        info = job_info(stdout_of(events))
        assert info is not None
        measure(
            "event queue overflow",
            plain_rc=ref.rc,
            ctmon_rc=rc,
            records_written=n,
            received=received,
            drops_events=drops,
            plain_trace_s=ref_trace_s,
            ctmon_trace_s=info["trace_s"],
        )
        assert drops > 0, "nothing was dropped: the queue did not overflow"
        assert received + drops == n, (received, drops, n)
        assert received >= EVENT_QUEUE_MAX, received
        assert report["drops"]["events"] == drops
        assert f"{drops} other events" in run.stderr()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_signal_to_ctmon_is_forwarded(tmp_path, rt, sig) -> None:  # type: ignore[no-untyped-def]
    """``kill -TERM <ctmon>``: the job gets it and ends by it, and ctmon ends
    the same way, as the job alone would."""
    tmp = str(tmp_path)
    args = ["--steps", "50", "--print-every", "10", "--end", "wait"]
    ref = reference_signalled(args, tmp, [sig])
    assert ref.rc == -sig
    with recording(tmp, args, env_for(rt)) as run:
        run.wait_stdout("WAITING")
        os.kill(run.pid, sig)
        rc = run.wait(30)
        assert rc == ref.rc, run.stderr()
        events, report = assert_complete(run.rec, 50, ref)
        assert any(e["kind"] == "note" and f"sent {sig.name} to the job" in e.get("message", "") for e in events)
        measure(
            f"{sig.name} to ctmon record",
            plain_rc=ref.rc,
            ctmon_rc=rc,
            steps=report["steps"]["count"],
            exit_signal=events[-1]["signal"],
        )


def test_ctrl_c_to_the_process_group(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """SIGINT to the foreground group (Ctrl-C in a terminal): ctmon ignores it,
    the job gets KeyboardInterrupt and ends by SIGINT; so does ctmon."""
    tmp = str(tmp_path)
    args = ["--steps", "50", "--print-every", "10", "--end", "wait"]
    ref = reference_signalled(args, tmp, [signal.SIGINT], group=True)
    assert ref.rc == -signal.SIGINT and "KeyboardInterrupt" in ref.stderr
    with recording(tmp, args, env_for(rt)) as run:
        run.wait_stdout("WAITING")
        os.killpg(run.pid, signal.SIGINT)
        rc = run.wait(30)
        assert rc == ref.rc, run.stderr()
        assert run.stderr().count("Traceback") == 1 and "KeyboardInterrupt" in run.stderr()
        events, report = assert_complete(run.rec, 50, ref)
        measure(
            "SIGINT to the process group",
            plain_rc=ref.rc,
            ctmon_rc=rc,
            steps=report["steps"]["count"],
            exit_signal=events[-1]["signal"],
        )


# -------------------------------------------------------------- disk full


@pytest.fixture
def small_tmpfs(tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    mnt = tmp_path / "small"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {p.stderr.strip()}")
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(path: str) -> None:
    with open(path, "wb") as f:
        chunk = b"\0" * (1 << 16)
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass


def test_disk_full_then_freed(tmp_path, rt, small_tmpfs) -> None:  # type: ignore[no-untyped-def]
    """The recording's disk fills mid-run: the job runs on at its pace; when
    space comes back the recording resumes with nothing lost."""
    tmp = str(tmp_path)
    filler = os.path.join(small_tmpfs, "filler")
    _fill(filler)
    with open(filler, "r+b") as f:  # leave ~128 KiB: the recording starts, then hits the wall
        f.truncate(os.path.getsize(filler) - (128 << 10))
    n, pad = 3000, 500
    args = ["--steps", str(n), "--step-ms", "2", "--print-every", "1", "--line-bytes", str(pad)]
    ref = reference(args)
    rec = os.path.join(small_tmpfs, "rec.jsonl")
    with recording(tmp, args, env_for(rt), rec=rec) as run:
        wait_until(
            lambda: "cannot write the recording" in run.stderr() or run.proc.poll() is not None, 30, "the disk to fill"
        )
        assert "cannot write the recording (No space left on device)" in run.stderr(), run.stderr()
        time.sleep(1.0)  # full for a while: events wait in memory
        os.unlink(filler)
        rc = run.wait(60)
        assert rc == ref.rc, run.stderr()
        assert "ctmon: recording resumed" in run.stderr()
        info = job_info(run.stdout())
        assert info is not None and info["max_gap_s"] < 1.0, info
        events, report = assert_complete(rec, n, ref)
        assert not [e for e in events if e["kind"] == "note" and "lost" in str(e.get("message"))]
        measure(
            "disk full, then freed",
            plain_rc=ref.rc,
            ctmon_rc=rc,
            steps=report["steps"]["count"],
            max_gap_s=info["max_gap_s"],
            loop_s=info["loop_s"],
            nominal_loop_s=n * 2 / 1000,
            recording_kb=os.path.getsize(rec) // 1024,
            events=len(events),
        )


def test_recording_to_dev_full_never_blocks_the_job(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    args = ["--steps", "20000", "--print-every", "100"]
    ref = reference(args)
    with recording(str(tmp_path), args, env_for(rt), rec="/dev/full") as run:
        rc = run.wait(60)
        assert rc == ref.rc == 0, run.stderr()
        assert job_lines(run.stdout()) == job_lines(ref.stdout)  # passed through
        err = run.stderr()
        assert "ctmon: cannot write the recording (No space left on device)" in err
        # nothing reached the file: the summary says what it lacks, not what memory held
        assert "ctmon: recording /dev/full is INCOMPLETE: " in err
        assert "events (20000 steps) could not be written: No space left on device" in err
        assert "Traceback" not in err
        measure(
            "recording to /dev/full",
            plain_rc=ref.rc,
            ctmon_rc=rc,
            summary_steps=20000,
            duration_s=round(time.monotonic() - run.started, 2),
        )


# ------------------------------------------------------------------- soak


def test_soak_a_million_events_bounded_memory(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """A job of 1,000,000 steps, 200,000 output lines, 100 compiles and
    1,000,000 more events sent on the agent socket, with a viewer attached
    the whole time: supervisor and viewer stay under 150 MB, the viewer sees
    everything, the recording is complete."""
    tmp = str(tmp_path)
    n, every, raw, compiles = 1_000_000, 5, 1_000_000, 100
    args = ["--steps", str(n), "--print-every", str(every), "--compiles", str(compiles), "--raw-events", str(raw)]
    ref = reference(args)
    with RssSampler() as rss, recording(tmp, args, env_for(rt)) as run:
        rss.watch("supervisor", run.pid)
        v = Viewer(tmp, viewer_socket(rt))
        rss.watch("viewer", v.pid)
        try:
            rc = run.wait(240)
            final = v.wait_done(120)
        finally:
            v.cleanup()
    assert rc == ref.rc == 0, run.stderr()
    events, report = assert_complete(run.rec, n, ref)
    kinds: dict[str, int] = {}
    for e in events:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    assert kinds.get("x_soak") == raw
    assert report["compile"]["compiles"] == compiles
    assert final["events"] == len(events) and final["steps"] == n
    assert final["unknown"].get("x_soak") == raw and final["output_lines"] == n // every + 1
    job_events = n + n // every + 1 + raw + kinds.get("compile", 0) + kinds.get("compile_start", 0)
    measure(
        "1M-event soak",
        rc=rc,
        steps=report["steps"]["count"],
        job_events=job_events,
        recording_events=len(events),
        recording_mb=round(os.path.getsize(run.rec) / 2**20, 1),
        kinds=kinds,
        supervisor_peak_rss_mb=round(rss.peak.get("supervisor", 0), 1),
        viewer_peak_rss_mb=round(rss.peak.get("viewer", 0), 1),
        viewer_maxrss_mb=final["max_rss_mb"],
        rss_samples=rss.samples,
        duration_s=round(time.monotonic() - run.started, 1),
    )
    assert len(events) >= 1_000_000
    assert 0 < rss.peak["supervisor"] < 150, rss.peak
    assert 0 < rss.peak["viewer"] < 150 and final["max_rss_mb"] < 150, (rss.peak, final)


@pytest.mark.parametrize("recording_then", ["kept", "replaced by another run's"])
def test_a_viewer_behind_when_the_run_ends_still_sees_every_event(tmp_path, rt, recording_then) -> None:  # type: ignore[no-untyped-def]
    """The soak's viewer, slowed by a loaded machine, was still megabytes
    behind when the job ended; the supervisor serves late viewers for a few
    seconds, then closes. Here the viewer is stopped (SIGSTOP) from before the
    job's 3 MB of output until ctmon has exited: continued, it reads what the
    socket held, then the rest from the recording, from where the stream
    stopped. Every event, the exit last. A recording another run has written
    over meanwhile is not read on (the viewer ends short, as disconnected)."""
    tmp = str(tmp_path)
    gate = os.path.join(tmp, "gate")
    n = 3000
    args = ["--steps", str(n), "--print-every", "1", "--line-bytes", "1000", "--gate", gate]
    ref = reference(args, tmp)
    with recording(tmp, args, env_for(rt)) as run:
        run.wait_stdout("READY")
        v = Viewer(tmp, viewer_socket(rt))
        try:
            v.wait_events(1)
            os.kill(v.pid, signal.SIGSTOP)
            open(gate, "w").close()
            rc = run.wait(120)  # ctmon has ended: the viewer's connection is closed
            events, _ = assert_complete(run.rec, n, ref)
            if recording_then != "kept":
                other = os.path.join(tmp, "other.jsonl")
                with open(other, "w") as f:  # longer than this run's: an offset into it has events
                    f.write(json.dumps({"kind": "session", "t": time.time(), "id": "other"}) + "\n")
                    line = {"kind": "output", "t": time.time(), "stream": "stdout", "data": "y" * 1000 + "\n"}
                    f.writelines(json.dumps(line) + "\n" for _ in range(2 * n))
                    f.write(json.dumps({"kind": "exit", "t": time.time(), "code": 3}) + "\n")
                os.replace(other, run.rec)
            os.kill(v.pid, signal.SIGCONT)
            final = v.wait_done(120)
        finally:
            v.cleanup()
    assert rc == ref.rc == 0, run.stderr()
    if recording_then != "kept":
        assert final["events"] < len(events) and final["exit"] is None, final
        return
    # the job wrote far more than the socket's buffers hold while the viewer
    # was stopped (reads too big to go inline are in X.output.log, their tails in events)
    log = output_log_path(run.rec)
    behind = os.path.getsize(run.rec) + (os.path.getsize(log) if os.path.exists(log) else 0)
    assert behind > 2 << 20, behind
    assert (final["events"], final["last"], final["steps"]) == (len(events), "exit", n), final
    # the lines the recording gives a screen: READY, the steps, the last line;
    # fewer where a read too big to go inline is shown as its last lines
    # (the rest kept in X.output.log: assert_complete read every byte back)
    recorded = Session().apply_all(events).output.total_lines
    assert final["output_lines"] == recorded and final["exit"] is not None, (final, recorded)
    if not any(e["kind"] == "output" and e.get("enc") == "log" for e in events):
        assert recorded == n + 2


# ------------------------------------------------------ the TUI, in tmux

PROMPT = "FAULTS$ "
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    """A private tmux server (its own socket) with one pane running bash."""

    def __init__(self, tmpdir: str, env: dict[str, str]) -> None:
        self.socket = f"ctf-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.dir = short_tmux_dir(tmpdir)
        self.env = dict(os.environ, TMUX_TMPDIR=self.dir)
        self.env.pop("TMUX", None)
        args = ["new-session", "-d", "-s", "f", "-x", "150", "-y", "45"]
        for k, v in env.items():
            args += ["-e", f"{k}={v}"]
        self(*args, "bash --norc --noprofile")
        self.send(f"export PS1='{PROMPT}'; cd {ROOT} && clear")
        self.wait_for(lambda s: PROMPT.strip() in s, 15, "the shell prompt")

    def __call__(self, *args: str) -> str:
        p = subprocess.run(["tmux", "-L", self.socket, *args], env=self.env, capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {p.stderr.strip()}")
        return p.stdout

    def send(self, line: str) -> None:
        self("send-keys", "-t", "f", "-l", line)
        self("send-keys", "-t", "f", "Enter")

    def keys(self, *keys: str) -> None:
        self("send-keys", "-t", "f", *keys)

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "f")

    def flag(self, name: str) -> str:
        return self("display-message", "-p", "-t", "f", "#{" + name + "}").strip()

    def wait_for(self, pred: Callable[[str], Any], timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if pred(text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; the screen was:\n{text}")

    def pane_pid(self) -> int:
        return int(self.flag("pane_pid"))

    def kill_server(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env, capture_output=True, timeout=30)
        if self.dir.startswith("/tmp/ctx-"):
            shutil.rmtree(self.dir, ignore_errors=True)


def _tmux_env(rt: str) -> dict[str, str]:
    env = {
        "CTMON_RUNTIME_DIR": os.path.join(rt, "run"),
        "XDG_STATE_HOME": os.environ["XDG_STATE_HOME"],
        "PYTHONPATH": ROOT,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "TERM": "xterm-256color",
    }
    return env


@contextlib.contextmanager
def tmux_shell(tmp_path, rt: str) -> Iterator[Tmux]:  # type: ignore[no-untyped-def]
    d = tmp_path / "tmux"
    d.mkdir(exist_ok=True)
    tm = Tmux(str(d), _tmux_env(rt))
    try:
        yield tm
    finally:
        tm.kill_server()


def _ctmon_child(tm: Tmux, word: str, timeout: float = 20) -> psutil.Process:
    """The ctmon process the shell runs in the foreground (``ctmon attach``/``watch``)."""

    def find() -> psutil.Process | None:
        with contextlib.suppress(psutil.Error):
            for p in psutil.Process(tm.pane_pid()).children():
                cmd = p.cmdline()
                if "ctmon" in cmd and word in cmd:
                    return p
        return None

    return wait_until(find, timeout, f"ctmon {word} in the pane")  # type: ignore[no-untyped-def, no-any-return]


def _session_event(rec: str, timeout: float = 30) -> dict[str, Any]:
    def first() -> dict[str, Any] | None:
        evs = read_events(rec)[0]
        return evs[0] if evs and evs[0]["kind"] == "session" else None

    return wait_until(first, timeout, "the recording's session event")  # type: ignore[no-any-return]


def _recorded_stdout_has(rec: str, text: str) -> bool:
    return text in stdout_of(read_events(rec)[0])


def _end(*pids: int | None) -> None:
    """Kill what a failed test may leave behind (by pid: a job, a viewer stuck after its terminal closed)."""
    for pid in pids:
        if pid is not None and alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _steps_in(rec: str) -> int:
    return sum(len(e["ns"]) for e in read_events(rec)[0] if e["kind"] == "steps")


def assert_terminal_restored(tm: Tmux, status: int, timeout: float = 30) -> str:
    """Back at a working shell prompt: the TUI's screen gone, no alternate
    screen or mouse reporting left, the tty cooked with echo."""
    screen = tm.wait_for(
        lambda s: f"RC={status}" in s and s.rstrip().endswith(PROMPT.rstrip()),
        timeout,
        f"RC={status} and a shell prompt",
    )
    assert "─ Steps" not in screen and "─ Compilation" not in screen, screen
    flags = {
        f: tm.flag(f)
        for f in (
            "alternate_on",
            "mouse_any_flag",
            "mouse_all_flag",
            "mouse_button_flag",
            "mouse_sgr_flag",
            "cursor_flag",
            "keypad_cursor_flag",
        )
    }
    assert flags == {
        "alternate_on": "0",
        "mouse_any_flag": "0",
        "mouse_all_flag": "0",
        "mouse_button_flag": "0",
        "mouse_sgr_flag": "0",
        "cursor_flag": "1",
        "keypad_cursor_flag": "0",
    }, flags
    tm.send(
        "echo TTY: $(stty -a | tr ' ;' '\\n\\n' | grep -xE -- '-?(icanon|echo|isig|opost)' | tr '\\n' ' ')=$((6*7))"
    )
    after = tm.wait_for(lambda s: "=42" in s.split("echo TTY:")[-1], 15, "the shell to answer")
    tty = next(ln for ln in after.splitlines() if ln.startswith("TTY:") and "=42" in ln)
    assert sorted(tty.split("=")[0].split()[1:]) == ["echo", "icanon", "isig", "opost"], tty
    return screen


def _attach(tm: Tmux, rec: str, args: list[str]) -> None:
    tm.send(f"{PY} -m ctmon attach -o {rec} {JOB} {shlex.join(args)}; echo RC=$?")


TUI_CASES = {
    # name: (job args, expected $?, what the keys/signals do)
    "q then y (stop)": (["--steps", "100", "--print-every", "10", "--end", "wait"], 128 + signal.SIGTERM),
    "job crash, then q": (["--steps", "300", "--step-ms", "3", "--print-every", "50", "--end", "exception"], 1),
    "Ctrl-C": (["--steps", "100", "--print-every", "10", "--end", "wait"], 128 + signal.SIGINT),
    "Ctrl-C twice": (
        ["--steps", "100", "--print-every", "10", "--ignore-sigint", "--end", "wait"],
        128 + signal.SIGKILL,
    ),
    "viewer SIGTERM": (["--steps", "600", "--step-ms", "10", "--print-every", "10"], 0),
    "q then d (leave running), watch, q": (["--steps", "700", "--step-ms", "10", "--print-every", "10"], 0),
}


@needs_tmux
@pytest.mark.parametrize("case", list(TUI_CASES))
def test_tui_exit_restores_the_terminal(tmp_path, rt, case) -> None:  # type: ignore[no-untyped-def]
    """``ctmon attach`` in a real terminal, left in every way: the job ends as
    asked (or runs on when the viewer leaves), with its plain exit status and
    steps, and the shell gets a clean terminal back."""
    args, status = TUI_CASES[case]
    outlives = case == "viewer SIGTERM" or case.startswith("q then d")
    done = str(tmp_path / "done")
    if outlives:  # after its steps the job waits for done.go, so "it runs on" is checked without a race
        args = [*args, "--done", done]
    rec = str(tmp_path / "tui.jsonl")
    job_pid = None
    viewers: list[int] = []
    with tmux_shell(tmp_path, rt) as tm:
        try:
            _attach(tm, rec, args)
            job_pid = _session_event(rec)["job_pid"]
            tm.wait_for(lambda s: "● running" in s or "exited" in s or "✗" in s, 90, "the live TUI")
            viewer = _ctmon_child(tm, "attach")
            viewers.append(viewer.pid)
            if case == "q then y (stop)":
                wait_until(lambda: _recorded_stdout_has(rec, "WAITING"), 30, "the job to wait")
                tm.keys("q")
                tm.wait_for(lambda s: "Stop the job?" in s, 15, "the stop question")
                tm.keys("y")
            elif case == "job crash, then q":
                wait_until(lambda: has_exit(rec), 30, "the job's crash")
                tm.wait_for(lambda s: "■ exited" in s, 15, "the TUI to show the end")
                tm.keys("q")
            elif case == "Ctrl-C":
                wait_until(lambda: _recorded_stdout_has(rec, "WAITING"), 30, "the job to wait")
                tm.keys("C-c")
                wait_until(lambda: has_exit(rec), 30, "the job to end by SIGINT")
                tm.wait_for(lambda s: "■ exited" in s, 15, "the TUI to show the end")
                tm.keys("q")
            elif case == "Ctrl-C twice":
                wait_until(lambda: _recorded_stdout_has(rec, "WAITING"), 30, "the job to wait")
                tm.keys("C-c")
                wait_until(lambda: _recorded_stdout_has(rec, "got SIGINT, going on"), 15, "the first SIGINT")
                assert alive(job_pid), "the first Ctrl-C must only interrupt (the job ignores it)"
                tm.keys("C-c")
                wait_until(lambda: has_exit(rec), 30, "the job to be killed")
                tm.wait_for(lambda s: "■ exited" in s, 15, "the TUI to show the end")
                tm.keys("q")
            elif case == "viewer SIGTERM":
                os.kill(viewer.pid, signal.SIGTERM)
            elif case.startswith("q then d"):
                tm.keys("q")
                tm.wait_for(lambda s: "Stop the job?" in s, 15, "the stop question")
                tm.keys("d")
            screen = assert_terminal_restored(tm, status)
            if outlives:
                assert "the job keeps running" in screen, screen
                assert not has_exit(rec) and alive(job_pid), "the job must outlive its viewer"
            if case.startswith("q then d"):
                # come back with ctmon watch, then leave it again with q
                tm.send("clear")
                tm.send(f"{PY} -m ctmon watch {job_pid}; echo RC=$?")
                tm.wait_for(lambda s: "● running" in s, 90, "ctmon watch's live view")
                viewers.append(_ctmon_child(tm, "watch").pid)
                tm.keys("q")
                screen = assert_terminal_restored(tm, 0)
                assert "detached; the job keeps running" in screen, screen
            if outlives:
                wait_until(lambda: os.path.exists(done), 60, "the job's last step")
                open(done + ".go", "w").close()
            wait_until(lambda: has_exit(rec), 60, "the job's end")
            wait_until(lambda: not alive(job_pid), 15, "the job process to go")
            ref_args = args
            if "--end" in args and args[args.index("--end") + 1] == "wait":
                sigs = {
                    "q then y (stop)": [signal.SIGTERM],
                    "Ctrl-C": [signal.SIGINT],
                    "Ctrl-C twice": [signal.SIGINT, signal.SIGKILL],
                }[case]
                ref = reference_signalled(ref_args, str(tmp_path), sigs, group=True)
            else:
                ref = reference(ref_args, str(tmp_path))
            assert status_of(ref.rc) == status, (case, ref.rc)
            events, report = assert_complete(rec, ref.steps, ref)
            if case == "Ctrl-C twice":  # ctmon sent that SIGKILL: said so, no out-of-memory killer blamed
                said = "stopped by ctmon (Ctrl-C twice: SIGKILL)"
                assert any(said in f["title"] for f in report["findings"]), report["findings"]
                assert said in screen and "dmesg" not in json.dumps(report["findings"]), screen
            log = _read(output_log_path(rec))
            assert job_lines(log)[: len(job_lines(ref.stdout))] == job_lines(ref.stdout)
            measure(
                f"TUI: {case}",
                plain_status=status_of(ref.rc),
                shell_status=status,
                steps=report["steps"]["count"],
                exit=events[-1],
            )
        finally:
            _end(job_pid, *viewers)


@needs_tmux
@pytest.mark.parametrize("how", ["kill -9 the viewer", "terminal closed (SIGHUP)"])
def test_attach_job_outlives_its_viewer(tmp_path, rt, how) -> None:  # type: ignore[no-untyped-def]
    """The real ``ctmon attach``: its viewer killed with -9, or its terminal
    closed under it (tmux kill-server: SIGHUP, the pty gone). The detached
    supervisor runs the job to its end; the recording is complete and the
    job's output is in ``<recording>.output.log``."""
    done = str(tmp_path / "done")  # after its steps the job waits for done.go: "it outlived the viewer" is then no race
    args = ["--steps", "500", "--step-ms", "10", "--print-every", "1", "--line-bytes", "100", "--done", done]
    ref = reference(args, str(tmp_path))
    rec = str(tmp_path / "attach.jsonl")
    job_pid = viewer = None
    tm = Tmux(str(tmp_path), _tmux_env(rt))
    try:
        _attach(tm, rec, args)
        job_pid = _session_event(rec)["job_pid"]
        tm.wait_for(lambda s: "● running" in s, 90, "the live TUI")
        viewer = _ctmon_child(tm, "attach")
        wait_until(lambda: any(e["kind"] == "steps" for e in read_events(rec)[0]), 30, "the first steps")
        flags = {}
        if how.startswith("kill -9"):
            viewer.kill()
            tm.wait_for(lambda s: "RC=137" in s, 15, "the shell to see the viewer die")
            # Nothing can restore a terminal for a process killed with -9: record what it left.
            flags = {f: tm.flag(f) for f in ("alternate_on", "mouse_any_flag")}
        else:
            tm.kill_server()
        # A viewer whose terminal is gone must go too, not linger.
        wait_until(lambda: not alive(viewer.pid), 15, "the viewer to go")
        steps_then = _steps_in(rec)
        assert not has_exit(rec) and alive(job_pid), "the job must outlive its viewer"
        wait_until(lambda: os.path.exists(done), 60, "the job's last step")
        open(done + ".go", "w").close()
        wait_until(lambda: has_exit(rec), 60, "the job's end")
        events, report = assert_complete(rec, ref.steps, ref)
        assert events[0]["mode"] == "attach"
        log = output_log_path(rec)
        assert os.path.dirname(log) == str(tmp_path) and job_lines(_read(log)) == job_lines(ref.stdout)
        measure(
            f"attach: {how}",
            plain_rc=ref.rc,
            exit_code=events[-1]["code"],
            steps=report["steps"]["count"],
            steps_when_the_viewer_was_gone=steps_then,
            output_log_lines=len(_read(log).splitlines()),
            terminal_left=flags,
        )
    finally:
        tm.kill_server()
        _end(job_pid, viewer.pid if viewer is not None else None)
