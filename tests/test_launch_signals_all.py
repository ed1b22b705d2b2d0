"""Every signal that would end ctmon, a script whose name starts with ``-``, and
who is named when ctmon itself stopped the job.

* A signal whose default action ends a process, sent to ``ctmon record`` (or
  to ``ctmon attach``'s detached supervisor) while the job runs, is passed on
  to the job or, where it is about ctmon's own process (SIGXCPU, SIGXFSZ),
  ignored with a note (ctmon/launch/signal_policy.py): ctmon never dies
  leaving the job running unrecorded, and the recording ends with the job's
  ``exit``. Sent to the TUI, it ends the viewer in order, as SIGTERM does.
* ``ctmon record -- '-c print(1)#.py'`` runs that file, as ``python -- NAME``
  would, not the code in its name.
* When ctmon sent the signal the job died by (Ctrl-C twice in a viewer, a
  stop's SIGKILL after its grace), the findings and the end-of-run summary
  say "stopped by ctmon (...)", never "the out-of-memory killer".

Every wait is bounded; the jobs are a few lines of Python (no torch).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import WORKLOADS, env_with
from test_whole_faults import (
    _attach,
    _ctmon_child,
    _end,
    _session_event,
    alive,
    assert_terminal_restored,
    needs_tmux,
    read_events,
    stdout_of,
    tmux_shell,
    wait_until,
)

from ctmon.launch.signal_policy import signal_name, signal_number
from ctmon.launch.spec import JobSpec
from ctmon.report.build import build_report
from ctmon.report.text import summary_lines
from ctmon.store import Session

PY = sys.executable
STEPS = 5

# A job that marks STEPS steps, says WAITING, then waits (at most 120 s) for
# the file named by its first argument. --ignore-int: the first SIGINT only
# prints "got SIGINT, going on"; --ignore-term: SIGTERM only prints.
TINY_JOB = """\
import os, signal, sys, time
import ctmon

if "--ignore-int" in sys.argv:
    seen = []

    def on_int(signum, frame):
        if seen:
            raise KeyboardInterrupt
        seen.append(signum)
        print("got SIGINT, going on", flush=True)

    signal.signal(signal.SIGINT, on_int)
if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, lambda signum, frame: print("got SIGTERM, going on", flush=True))
for _ in range(STEPS_HERE):
    ctmon.step()
print("WAITING", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.02)
print("DONE", flush=True)
""".replace("STEPS_HERE", str(STEPS))


@pytest.fixture
def rt() -> Iterator[str]:
    """A runtime dir with a short path (a Unix socket path stays under 108 bytes)."""
    d = tempfile.mkdtemp(prefix="cts-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _env(rt: str) -> dict[str, str]:
    return env_with(CTMON_RUNTIME_DIR=os.path.join(rt, "run"))


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


class TinyRecord:
    """``ctmon record`` of TINY_JOB in its own process group, its output in files."""

    def __init__(self, tmp: str, rt: str, *job_flags: str) -> None:
        self.job = os.path.join(tmp, "tiny_job.py")
        with open(self.job, "w") as f:
            f.write(TINY_JOB)
        self.go = os.path.join(tmp, "go")
        self.rec = os.path.join(tmp, "rec.jsonl")
        self.out, self.err = os.path.join(tmp, "ctmon.out"), os.path.join(tmp, "ctmon.err")
        self.rt = rt
        cmd = [PY, "-m", "ctmon", "record", "-o", self.rec, self.job, self.go, *job_flags]
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(cmd, env=_env(rt), cwd=tmp, stdout=out, stderr=err, start_new_session=True)

    def stdout(self) -> str:
        return _read(self.out)

    def stderr(self) -> str:
        return _read(self.err)

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.rec)[0]

    def wait_stdout(self, text: str, timeout: float = 60) -> None:
        wait_until(lambda: text in self.stdout() or self.proc.poll() is not None, timeout, f"{text!r} on stdout")
        assert text in self.stdout(), f"ctmon exited ({self.proc.returncode}) before {text!r}:\n{self.stderr()}"

    def job_pid(self) -> int:
        evs = wait_until(lambda: [e for e in self.events() if e["kind"] == "session"], 30, "the session event")
        return int(evs[0]["job_pid"])

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"ctmon record did not finish in {timeout} s:\n{self.stderr()[-3000:]}") from None

    def viewer_socket(self) -> str:
        found = wait_until(lambda: glob.glob(os.path.join(self.rt, "run", "*", "viewer.sock")), 30, "the viewer socket")
        return str(found[0])

    def cleanup(self) -> None:
        open(self.go, "w").close()  # a job left waiting ends by itself
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@contextlib.contextmanager
def tiny_record(tmp: str, rt: str, *job_flags: str) -> Iterator[TinyRecord]:
    run = TinyRecord(tmp, rt, *job_flags)
    job_pid = None
    try:
        run.wait_stdout("WAITING")
        job_pid = run.job_pid()
        yield run
    finally:
        run.cleanup()
        _end(job_pid)  # a job ctmon left behind (the bug this file is about) goes too


def assert_complete(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Session first, the one exit last, every step; returns the report."""
    kinds = [e["kind"] for e in events]
    assert kinds and kinds[0] == "session", kinds[:3]
    assert kinds[-1] == "exit" and kinds.count("exit") == 1, kinds[-5:]
    report = build_report(Session().apply_all(events))
    assert report["steps"]["count"] == STEPS, report["steps"]
    return report


def _rt_signal(offset: int) -> int:
    return int(signal.SIGRTMIN) + offset


# ------------------------------------------------ signals to ctmon record

FORWARDED = {
    "SIGALRM": signal.SIGALRM,
    "SIGUSR1": signal.SIGUSR1,
    "SIGUSR2": signal.SIGUSR2,
    "SIGVTALRM": signal.SIGVTALRM,
    "SIGRTMIN+2": _rt_signal(2),
}
IGNORED = {"SIGXCPU": signal.SIGXCPU, "SIGXFSZ": signal.SIGXFSZ}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FORWARDED))
def test_a_signal_to_ctmon_record_is_passed_on_to_the_job(tmp_path, rt, name) -> None:  # type: ignore[no-untyped-def]
    """``kill -ALRM <ctmon>`` (or USR1, USR2, VTALRM, a real-time signal): the
    job gets it and ends by it, as it would have without ctmon; ctmon records
    that end and then leaves the same way."""
    sig = FORWARDED[name]
    with tiny_record(str(tmp_path), rt) as run:
        job_pid = run.job_pid()
        os.kill(run.proc.pid, sig)
        rc = run.wait(60)
        assert rc == -sig, run.stderr()
        assert not alive(job_pid), "the job must not outlive ctmon"
        events = run.events()
        assert_complete(events)
        assert events[-1]["signal"] == name and events[-1]["code"] is None, events[-1]
        notes = [e["message"] for e in events if e["kind"] == "note"]
        assert f"sent {name} to the job (passed on: ctmon received it)" in notes, notes
        assert f"killed by {name}" in run.stderr()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(IGNORED))
def test_a_signal_about_ctmons_own_limits_is_ignored_with_a_note(tmp_path, rt, name) -> None:  # type: ignore[no-untyped-def]
    """SIGXCPU / SIGXFSZ: the kernel sends them for ctmon's own CPU time and
    file size limits. ctmon notes them once and runs on; the job is not
    touched and finishes as it would have."""
    sig = IGNORED[name]
    with tiny_record(str(tmp_path), rt) as run:
        job_pid = run.job_pid()
        for _ in range(2):  # a limit repeats: noted once
            os.kill(run.proc.pid, sig)

        def noted() -> list[str]:
            return [e["message"] for e in run.events() if e["kind"] == "note" and f"received {name}" in e["message"]]

        wait_until(noted, 30, f"the note about {name}")
        assert run.proc.poll() is None and alive(job_pid), "ctmon and the job run on"
        open(run.go, "w").close()
        rc = run.wait(60)
        assert rc == 0, run.stderr()
        events = run.events()
        assert_complete(events)
        assert events[-1]["code"] == 0, events[-1]
        assert "DONE" in stdout_of(events)
        said = [e["message"] for e in events if e["kind"] == "note" and f"received {name}" in e["message"]]
        assert said == [f"ctmon received {name} and ignored it: it is about {_limit(name)}"], said
        assert not [e for e in events if e["kind"] == "note" and e["message"].startswith("sent ")]


def _limit(name: str) -> str:
    from ctmon.launch.signal_policy import IGNORED as POLICY

    return POLICY[int(getattr(signal, name))]


@pytest.mark.slow
def test_a_signal_to_the_detached_supervisor_is_passed_on(tmp_path, rt, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``ctmon attach``'s supervisor (detached, no terminal): a SIGQUIT sent to
    it reaches the job, which ends by it; the recording ends with that exit.
    (Before, it killed the supervisor and left the job running unrecorded.)"""
    from ctmon.launch.daemon import start_detached

    monkeypatch.setenv("CTMON_RUNTIME_DIR", os.path.join(rt, "run"))
    job = tmp_path / "tiny_job.py"
    job.write_text(TINY_JOB)
    go, rec = str(tmp_path / "go"), str(tmp_path / "attach.jsonl")
    spec = JobSpec(mode="script", target=str(job), args=[go], cwd=str(tmp_path), python=PY)
    d = start_detached(spec, rec)
    job_pid = None
    try:
        job_pid = _session_event(rec)["job_pid"]
        wait_until(lambda: "WAITING" in stdout_of(read_events(rec)[0]), 60, "the job to wait")
        os.kill(d.proc.pid, signal.SIGQUIT)  # Ctrl-\ has no terminal to come from here: meant for the job
        wait_until(lambda: not alive(job_pid), 30, "the job to end by SIGQUIT")
        assert d.proc.wait(60) == 0, _read(os.path.join(d.session_dir, "supervisor.log"))
        events = read_events(rec)[0]
        assert_complete(events)
        assert events[-1]["signal"] == "SIGQUIT", events[-1]
        assert any(e["kind"] == "note" and e["message"].startswith("sent SIGQUIT to the job") for e in events)
    finally:
        open(go, "w").close()
        _end(job_pid, d.proc.pid)


@pytest.mark.slow
def test_a_signal_to_an_adopted_jobs_supervisor_is_noted_and_ignored(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """A job that called ``ctmon.install()`` is not ctmon's to signal. A
    SIGTERM (or SIGALRM) to its supervisor -- a scheduler signals every process
    of a job at once -- is noted and ignored: the supervisor records the job
    to its end. (Before, it died, and the rest of the run went unrecorded.)"""
    job = tmp_path / "adopted.py"
    rec, go = str(tmp_path / "adopted.jsonl"), str(tmp_path / "go")
    job.write_text(TINY_JOB.replace("import ctmon\n", f"import ctmon\nctmon.install({rec!r})\n", 1))
    out = str(tmp_path / "adopted.out")
    with open(out, "wb") as f:
        proc = subprocess.Popen([PY, str(job), go], env=_env(rt), cwd=tmp_path, stdout=f, stderr=subprocess.STDOUT)
    supervisor = None
    try:
        supervisor = int(_session_event(rec, 60)["pid"])
        wait_until(lambda: "WAITING" in _read(out), 60, "the job to wait")
        for sig in (signal.SIGTERM, signal.SIGALRM):
            os.kill(supervisor, sig)

        def noted() -> list[str]:
            return [e["message"] for e in read_events(rec)[0] if e["kind"] == "note" and "ignored it" in e["message"]]

        wait_until(lambda: len(noted()) == 2, 30, "the supervisor's notes")
        assert alive(supervisor), "the supervisor must outlive the signals"
        open(go, "w").close()
        assert proc.wait(60) == 0, _read(out)
        wait_until(lambda: any(e["kind"] == "exit" for e in read_events(rec)[0]), 30, "the recording's exit")
        events = read_events(rec)[0]
        assert_complete(events)
        assert sorted(noted()) == [  # (in whichever order they were handled)
            f"ctmon received {name} and ignored it: this job is not ctmon's to signal, and ctmon records it until "
            "it ends"
            for name in ("SIGALRM", "SIGTERM")
        ]
    finally:
        open(go, "w").close()
        _end(proc.pid, supervisor)


# ------------------------------------------------------ the TUI's signals


@needs_tmux
@pytest.mark.slow
def test_a_signal_to_the_tui_leaves_it_in_order(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """SIGUSR1 to ``ctmon attach``'s viewer: it leaves as for SIGTERM -- the
    terminal restored, the job running on under its supervisor, recorded to
    its end. (Before, the viewer died by SIGUSR1 in the alternate screen.)"""
    done = str(tmp_path / "done")
    args = ["--steps", "300", "--step-ms", "10", "--print-every", "10", "--done", done]
    rec = str(tmp_path / "tui.jsonl")
    job_pid = viewer = None
    with tmux_shell(tmp_path, rt) as tm:
        try:
            _attach(tm, rec, args)
            job_pid = _session_event(rec)["job_pid"]
            tm.wait_for(lambda s: "● running" in s or "exited" in s, 90, "the live TUI")
            viewer = _ctmon_child(tm, "attach").pid
            os.kill(viewer, signal.SIGUSR1)
            screen = assert_terminal_restored(tm, 0)
            assert "the job keeps running" in screen, screen
            assert alive(job_pid), "the job must outlive its viewer"
            wait_until(lambda: os.path.exists(done), 90, "the job's last step")
            open(done + ".go", "w").close()
            wait_until(lambda: any(e["kind"] == "exit" for e in read_events(rec)[0]), 60, "the job's end")
            events = read_events(rec)[0]
            assert events[-1]["kind"] == "exit" and events[-1]["code"] == 0, events[-1]
        finally:
            _end(job_pid, viewer)


# ------------------------------------------------- a script named -c ...


def _whoami(stdout: str) -> dict[str, Any]:
    first = stdout.splitlines()[0] if stdout else ""
    assert first.startswith("WHOAMI "), f"the script did not run first: {stdout[:300]!r}"
    return json.loads(first[len("WHOAMI ") :])  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["-c print(1)#.py", "-x.py", "--help.py", "-"])
def test_a_script_named_like_an_option_runs_as_a_file(tmp_path, rt, name) -> None:  # type: ignore[no-untyped-def]
    """``ctmon record -- '-c print(1)#.py'`` runs that file -- same sys.argv,
    sys.path[0], __main__ and __file__ as ``python -- NAME`` -- not the code
    in its name (``python NAME`` reads it as ``-c``). A file named ``-`` is
    run as ``./-`` (python reads stdin for ``-``, even after ``--``)."""
    shutil.copy(os.path.join(WORKLOADS, "whoami.py"), tmp_path / name)
    plain_name = os.path.join(".", name) if name == "-" else name
    plain = subprocess.run(
        [PY, "--", plain_name, "a", "b c"], cwd=tmp_path, capture_output=True, text=True, env=env_with(), timeout=120
    )
    assert plain.returncode == 0, plain.stderr
    rec = str(tmp_path / "r.jsonl")
    run = subprocess.run(
        [PY, "-m", "ctmon", "record", "-o", rec, "--", name, "a", "b c"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_env(rt),
        input="print('stdin ran instead of the file')\n",
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert _whoami(run.stdout) == _whoami(plain.stdout)
    events = read_events(rec)[0]
    command = ["python", *(["--", name] if name.startswith("-") and name != "-" else ["./-"]), "a", "b c"]
    assert events[0]["command"] == command, events[0]


def test_the_job_command_line_keeps_python_from_reading_a_name_as_an_option() -> None:
    """JobSpec.argv for each mode: ``--`` only before a script named ``-...``
    (a normal name keeps python's own command line, sys.orig_argv included)."""
    py = "/usr/bin/python3"
    assert JobSpec("script", "train.py", ["-x"], python=py).argv() == [py, "train.py", "-x"]
    assert JobSpec("script", "-c1.py", ["-x"], python=py).argv() == [py, "--", "-c1.py", "-x"]
    assert JobSpec("script", "-", [], python=py).argv() == [py, "./-"]
    assert JobSpec("module", "pkg.mod", ["-c"], python=py).argv() == [py, "-m", "pkg.mod", "-c"]
    assert JobSpec("command", "/usr/bin/torchrun", ["-c"], python=py).argv() == ["/usr/bin/torchrun", "-c"]


def test_signal_names_round_trip() -> None:
    for sig in [signal.SIGALRM, signal.SIGKILL, signal.SIGRTMIN, _rt_signal(3), signal.SIGRTMAX]:
        assert signal_number(signal_name(sig)) == sig
    assert signal_name(_rt_signal(3)) == "SIGRTMIN+3"
    assert signal_number("SIGNOPE") is None and signal_number("nonsense") is None


# ------------------------------------------- who killed the job: ctmon


def _viewer_control(run: TinyRecord) -> Any:
    from ctmon.read.feeds import SocketFeed

    return SocketFeed(run.viewer_socket())


def _findings_and_summary(run: TinyRecord) -> tuple[list[dict[str, Any]], str]:
    report = assert_complete(run.events())
    return report["findings"], "\n".join(summary_lines(report))


@pytest.mark.slow
def test_ctrl_c_twice_in_a_viewer_is_named_not_blamed_on_the_oom_killer(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """A job that ignores the first SIGINT, under ``ctmon record``; a viewer
    sends what the TUI's Ctrl-C twice sends (interrupt, then kill). The job
    dies by SIGKILL; the recording says ctmon sent it, the finding is
    "stopped by ctmon (Ctrl-C twice: SIGKILL)", and the summary ctmon prints
    says so too -- nothing points at the out-of-memory killer or dmesg."""
    with tiny_record(str(tmp_path), rt, "--ignore-int") as run:
        feed = _viewer_control(run)
        try:
            assert feed.control("interrupt")
            run.wait_stdout("got SIGINT, going on")
            assert feed.control("kill")
            rc = run.wait(60)
        finally:
            feed.close()
        assert rc == -signal.SIGKILL, run.stderr()
        events = run.events()
        notes = [e["message"] for e in events if e["kind"] == "note"]
        assert "sent SIGINT to the job (Ctrl-C)" in notes and "sent SIGKILL to the job (Ctrl-C twice)" in notes, notes
        findings, summary = _findings_and_summary(run)
        (f,) = [f for f in findings if f["rule"] == "job-failed"]
        assert f["title"] == f"The job was stopped by ctmon (Ctrl-C twice: SIGKILL) after {STEPS - 1} steps", f
        assert f["severity"] == "warning"
        assert "stopped by ctmon (Ctrl-C twice: SIGKILL)" in summary, summary
        assert "stopped by ctmon (Ctrl-C twice: SIGKILL)" in run.stderr(), run.stderr()
        text = json.dumps(findings) + summary + run.stderr()
        assert "dmesg" not in text and "out-of-memory killer or" not in text, text


@pytest.mark.slow
def test_stops_sigkill_after_its_grace_is_named(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """``q`` → Stop: SIGTERM, then SIGKILL after the grace (here 0.5 s) to a
    job that ignores SIGTERM: the finding says ctmon's stop sent the SIGKILL."""
    with tiny_record(str(tmp_path), rt, "--ignore-term") as run:
        feed = _viewer_control(run)
        try:
            assert feed.control("stop", grace=0.5)
            rc = run.wait(60)
        finally:
            feed.close()
        assert rc == -signal.SIGKILL, run.stderr()
        assert "got SIGTERM, going on" in run.stdout()
        findings, summary = _findings_and_summary(run)
        (f,) = [f for f in findings if f["rule"] == "job-failed"]
        want = "stopped by ctmon (q → Stop, still running after its 0.5 s grace: SIGKILL)"
        assert want in f["title"] and want in summary, (f, summary)
        assert "dmesg" not in json.dumps(findings)


@pytest.mark.slow
def test_a_viewers_kill_alone_is_named(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    with tiny_record(str(tmp_path), rt) as run:
        feed = _viewer_control(run)
        try:
            assert feed.control("kill")
            rc = run.wait(60)
        finally:
            feed.close()
        assert rc == -signal.SIGKILL, run.stderr()
        findings, _ = _findings_and_summary(run)
        (f,) = [f for f in findings if f["rule"] == "job-failed"]
        assert f["title"].startswith("The job was stopped by ctmon (a viewer's kill: SIGKILL)"), f


@pytest.mark.slow
def test_ctrl_c_twice_at_record_s_terminal_is_the_jobs_own(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C twice where ``ctmon record`` runs (SIGINT to the foreground
    process group, twice): the job receives both itself and ends by SIGINT,
    as without ctmon; ctmon sends nothing and the job is "interrupted"."""
    with tiny_record(str(tmp_path), rt, "--ignore-int") as run:
        os.killpg(run.proc.pid, signal.SIGINT)
        run.wait_stdout("got SIGINT, going on")
        os.killpg(run.proc.pid, signal.SIGINT)
        rc = run.wait(60)
        assert rc == -signal.SIGINT, run.stderr()
        events = run.events()
        assert not [e for e in events if e["kind"] == "note" and e["message"].startswith("sent ")]
        findings, _ = _findings_and_summary(run)
        (f,) = [f for f in findings if f["rule"] == "job-failed"]
        assert f["id"] == "job-failed:interrupted", f


def test_a_sigkill_ctmon_did_not_send_still_points_at_memory() -> None:
    """The other side: a SIGKILL with no note from ctmon keeps its advice (the
    out-of-memory killer, dmesg); a SIGKILL ctmon only sent earlier as some
    other signal does not count."""
    base: list[dict[str, Any]] = [
        {"kind": "session", "t": 1.0, "v": 1, "id": "x", "mode": "record", "command": ["python", "t.py"]},
        {"kind": "note", "t": 2.0, "level": "info", "source": "ctmon", "message": "sent SIGINT to the job (Ctrl-C)"},
        {"kind": "exit", "t": 3.0, "code": None, "signal": "SIGKILL"},
    ]
    report = build_report(Session().apply_all(base))
    (f,) = [f for f in report["findings"] if f["rule"] == "job-failed"]
    assert f["id"] == "job-failed:SIGKILL" and "dmesg" in f["fix"], f
    # a note from another source that mimics ctmon's does not count either
    forged = [base[0], {**base[1], "source": "agent", "message": "sent SIGKILL to the job (Ctrl-C twice)"}, base[2]]
    report = build_report(Session().apply_all(forged))
    (f,) = [f for f in report["findings"] if f["rule"] == "job-failed"]
    assert f["id"] == "job-failed:SIGKILL", f


@pytest.mark.slow
def test_a_normal_script_name_is_unchanged(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """The usual case keeps python's own command line: no ``--`` is added."""
    script = os.path.join(WORKLOADS, "whoami.py")
    rec = str(tmp_path / "r.jsonl")
    run = subprocess.run(
        [PY, "-m", "ctmon", "record", "-o", rec, script, "x"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_env(rt),
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert read_events(rec)[0][0]["command"] == ["python", script, "x"]


# --------------------------------------------- Ctrl-C while the agent starts


def _agent_tree_that_is_interrupted(tmp: str) -> str:
    """ctmon's real sitecustomize beside a stand-in agent whose start is cut
    short by Ctrl-C (KeyboardInterrupt), and a stand-in torch: where the user's
    Ctrl-C lands when it comes while the agent starts. Returns the site dir."""
    site = os.path.join(tmp, "root", "ctmon", "agent", "site")
    os.makedirs(site)
    here = os.path.dirname(os.path.abspath(__file__))
    shutil.copy(os.path.join(here, "..", "ctmon", "agent", "site", "sitecustomize.py"), site)
    for pkg in ("ctmon", os.path.join("ctmon", "agent")):
        open(os.path.join(tmp, "root", pkg, "__init__.py"), "w").close()
    with open(os.path.join(tmp, "root", "ctmon", "agent", "boot.py"), "w") as f:
        f.write("def start(pending=False):\n    raise KeyboardInterrupt\n")
    os.makedirs(os.path.join(tmp, "lib"))
    with open(os.path.join(tmp, "lib", "torch.py"), "w") as f:
        f.write("")
    return site


@pytest.mark.slow
@pytest.mark.parametrize("when", ["at start-up", "at import torch"])
def test_ctrl_c_while_the_agent_starts_stops_the_job_as_without_ctmon(tmp_path, when) -> None:  # type: ignore[no-untyped-def]
    site = _agent_tree_that_is_interrupted(str(tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTMON_")}
    env["PYTHONPATH"] = os.pathsep.join([site, str(tmp_path / "lib")])
    env["CTMON_AGENT_SOCKET"] = str(tmp_path / "agent.sock")
    if when == "at import torch":  # a quiet child that may become a rank: the agent starts at `import torch`
        env["CTMON_AGENT_PID"] = "1"
    code = "import torch\nprint('the job ran on')"
    p = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    # as python ends on an uncaught KeyboardInterrupt: by SIGINT, the job's code not run on
    assert p.returncode == -signal.SIGINT, (p.returncode, p.stdout, p.stderr)
    assert "the job ran on" not in p.stdout
    assert "hook disabled" not in p.stderr
    if when == "at import torch":
        assert "KeyboardInterrupt" in p.stderr  # the traceback at the job's own `import torch` line
