"""``ctmon record --pid``: joining a plain ``python script.py`` that runs.

The job compiles, then waits for files the test writes; ctmon joins it after
its first compile. What came before is in the ``joined`` event (never as
compile events), a later recompile and graph break are recorded, leaving
takes every hook out, and the job's output and exit code are a plain run's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from trace_shape import TraceShape, from_script, read_trace_shape

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="joining uses /proc and gdb"),
]
needs_gdb = pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed")

WAIT_S = 120.0  # a compile on a busy 2-core machine; every wait is bounded by it

JOB = textwrap.dedent(
    """
    import logging, os, sys, threading, time
    import torch
    d = sys.argv[1]

    def wait(name):
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(d, name)):
            if time.monotonic() > deadline:
                sys.exit(7)
            time.sleep(0.02)

    @torch.compile(backend="eager")
    def f(x):
        return torch.sin(x) + 1

    f(torch.randn(4))
    cmodel = torch.compile(torch.nn.Linear(3, 3), backend="eager")  # a compiled module, as scripts keep them
    cmodel(torch.randn(2, 3))
    print("compiled once", flush=True)
    open(os.path.join(d, "ready"), "w").close()
    wait("go")
    f(torch.randn(4, 3))  # a recompile: the rank of x changed

    def g(x):
        y = x * 2
        print("a print breaks the graph", file=sys.stderr, flush=True)
        return y + 1

    torch.compile(g, backend="eager")(torch.randn(3))
    open(os.path.join(d, "compiled"), "w").close()
    wait("end")
    from torch.optim.optimizer import _global_optimizer_post_hooks
    print("threads", sorted(t.name for t in threading.enumerate()))
    print("trace handlers", len(logging.getLogger("torch.__trace").handlers))
    print("optimizer hooks", len(_global_optimizer_post_hooks))
    print("torch.compile", torch.compile.__module__, hasattr(torch.compile, "__ctmon_wrapped__"))
    sys.exit(3)
    """
)
BREAK_LINE = 1 + JOB.splitlines().index('    print("a print breaks the graph", file=sys.stderr, flush=True)')
F_LINE = 1 + JOB.splitlines().index('@torch.compile(backend="eager")')  # a decorated function starts at its decorator


def _wait(cond: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _ctmon(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ctmon", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _ctmon_out(*args: str) -> str:
    """A ctmon command run to its end: its stdout (exit 0 asserted)."""
    done = subprocess.run([sys.executable, "-m", "ctmon", *args], capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _join_then_leave(pid: int, rec: Path, d: Path, *options: str, env: dict[str, str] | None = None) -> str:
    """``record --pid`` joins the job after its first compile, lets it
    recompile and break the graph (the ``go`` file), then leaves mid-run on
    SIGINT, as Ctrl-C would: ctmon's stderr (it exited 0)."""
    ctmon = _ctmon("record", *options, "--pid", str(pid), "-o", str(rec), env=env)
    try:
        _wait(lambda: bool(_kinds(rec, "joined")) or ctmon.poll() is not None, "the joined event")
        assert ctmon.poll() is None, ctmon.communicate()
        (d / "go").touch()
        _wait(lambda: bool(_kinds(rec, "graph_break")) or ctmon.poll() is not None, "the graph break")
        ctmon.send_signal(signal.SIGINT)
        _, err = ctmon.communicate(timeout=WAIT_S)
    finally:
        _kill(ctmon)
    assert ctmon.returncode == 0, err
    return err


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return out


def _kinds(path: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in _events(path) if e.get("kind") == kind]


def _kill(p: subprocess.Popen[Any]) -> None:
    if p.poll() is None:
        p.kill()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


@pytest.fixture
def job_script(tmp_path: Path) -> Path:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    return script


def _start_job(
    tmp_path: Path, job_script: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], Path]:
    """The job, plain python, past its first compile and waiting."""
    d = tmp_path / "signals"
    d.mkdir()
    job = subprocess.Popen(
        [sys.executable, str(job_script), str(d)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    try:
        _wait(lambda: (d / "ready").exists() or job.poll() is not None, "the job's first compile")
        assert job.poll() is None, job.communicate()
    except BaseException:
        _kill(job)
        raise
    return job, d


@pytest.fixture
def started(tmp_path: Path, job_script: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    job, d = _start_job(tmp_path, job_script)
    try:
        yield job, d
    finally:
        _kill(job)


def _plain_run(tmp_path: Path, job_script: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    d = tmp_path / "plain"
    d.mkdir()
    for name in ("go", "end"):
        (d / name).touch()
    done = subprocess.run(
        [sys.executable, str(job_script), str(d)], capture_output=True, text=True, cwd=tmp_path, timeout=WAIT_S, env=env
    )
    return done.returncode, done.stdout, done.stderr


@needs_gdb
def test_join_lists_what_came_before_records_what_follows_and_leaves_cleanly(
    tmp_path: Path, job_script: Path, started: tuple[subprocess.Popen[str], Path]
) -> None:
    job, d = started
    rec = tmp_path / "joined.jsonl"
    err = _join_then_leave(job.pid, rec, d)
    assert job.poll() is None  # left running
    (d / "end").touch()
    job_out, job_err = job.communicate(timeout=WAIT_S)

    # the job's output and exit code are a plain run's: nothing of ctmon is left in it
    assert (job.returncode, job_out, job_err) == _plain_run(tmp_path, job_script)
    assert "threads ['MainThread']" in job_out and "trace handlers 0" in job_out
    assert "optimizer hooks 0" in job_out and "torch.compile torch False" in job_out

    (joined,) = _kinds(rec, "joined")
    frames = joined["before"]["frames"]["list"]
    mine = [(f["file"], f["line"], f["name"], f["entries"]) for f in frames if f["file"] == str(job_script)]
    assert mine == [(str(job_script), F_LINE, "f", 1)], frames
    # torch.compile(module) compiles torch's wrapper of the module's call: named by the script's module
    (wrapper,) = [f for f in frames if f["file"] != str(job_script)]
    assert wrapper["modules"] == ["cmodel = Linear"] and wrapper["entries"] == 1, wrapper
    assert joined["before"]["counters"]["stats"]["unique_graphs"] == 2
    assert joined["before"]["config"]["recompile_limit"] >= 1
    # before the join is never told as compile events: the recording's compiles are the later ones
    compiles = _kinds(rec, "compile")
    assert [c["compile_id"] for c in compiles][:1] == ["0/1"]
    # files PyTorch's trace named (by number) before the join are still named
    starts = {s["compile_id"]: s for s in _kinds(rec, "compile_start")}
    assert starts["0/1"]["file"] == str(job_script) and starts["0/1"]["line"] == F_LINE
    (reasons,) = _kinds(rec, "recompile_reasons")
    assert "rank mismatch" in reasons["reasons"][0]
    breaks = _kinds(rec, "graph_break")
    assert [(b["file"], b["line"]) for b in breaks] == [(str(job_script), BREAK_LINE)]
    assert any(n.get("source") == "join" and "left process" in n["message"] for n in _kinds(rec, "note"))
    assert "before ctmon joined: 2 frame(s)" in err and f"left process {job.pid} running" in err
    assert "(torch.compile of cmodel = Linear)" in err
    # the report says it as what came before the join, and that ctmon left the job running
    report = json.loads(_ctmon_out("report", str(rec), "--json"))
    assert report["joined"]["frame_count"] == 2 and report["joined"]["left_running"] is True
    assert report["joined"]["unique_graphs"] == 2 and report["joined"]["graph_breaks"] == 0
    assert report["compile"]["compiles"] == len(compiles)  # from the join on, nothing before it
    text = _ctmon_out("report", str(rec))
    assert "Was joined with --pid and left running" in text
    assert "Before ctmon joined" in text and "torch.compile of cmodel = Linear" in text, text


CTMON_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ctmon") + os.sep


def _ctmon_in_stacks(shape: TraceShape, script: str) -> list[str]:
    """Frames of ctmon in any stack Dynamo recorded from the script down."""
    bad = []
    for cid, stack in shape.start_stacks.items():
        bad += [f"{cid}: {fn}:{line}" for fn, line, _ in from_script(stack, script) if fn.startswith(CTMON_DIR)]
    for cid, lines in shape.metric_stacks.items():
        bad += [f"{cid}: {text}" for text in lines if CTMON_DIR in text]
    return bad


@needs_gdb
def test_a_joined_job_traces_as_a_plain_run(tmp_path: Path, job_script: Path) -> None:
    """The never-change-the-program rule, for a job ctmon joined mid-run:
    PyTorch's own TORCH_TRACE of it (compile ids, frames, recompile reasons,
    graph breaks) and its output and exit code are a plain run's."""
    joined_trace, plain_trace = tmp_path / "joined_trace", tmp_path / "plain_trace"
    job, d = _start_job(tmp_path, job_script, {**os.environ, "TORCH_TRACE": str(joined_trace)})
    rec = tmp_path / "joined.jsonl"
    try:
        _join_then_leave(job.pid, rec, d, "-q")
        (d / "end").touch()
        job_out, job_err = job.communicate(timeout=WAIT_S)
    finally:
        _kill(job)
    plain = _plain_run(tmp_path, job_script, {**os.environ, "TORCH_TRACE": str(plain_trace)})

    want, got = read_trace_shape(str(plain_trace)), read_trace_shape(str(joined_trace))
    assert len(want.compiles) >= 3, want.compiles  # f, f's recompile, g (and g's resume after the break)
    assert want.breaks, "the print's graph break is the premise"
    assert [c.compile_id for c in got.compiles] == [c.compile_id for c in want.compiles]
    assert got.compiles == want.compiles
    assert got.breaks == want.breaks
    assert sorted(got.start_stacks) == sorted(want.start_stacks)
    assert _ctmon_in_stacks(got, str(job_script)) == []
    assert (job.returncode, job_out, job_err) == plain
    # ctmon saw what came after the join
    assert _kinds(rec, "graph_break") and _kinds(rec, "recompile_reasons")


@needs_gdb
def test_joining_twice_is_refused_and_a_job_that_exits_ends_the_recording(
    tmp_path: Path, started: tuple[subprocess.Popen[str], Path]
) -> None:
    job, d = started
    rec = tmp_path / "first.jsonl"
    first = _ctmon("record", "-q", "--pid", str(job.pid), "-o", str(rec))
    try:
        _wait(lambda: bool(_kinds(rec, "joined")) or first.poll() is not None, "the joined event")
        second = _ctmon("record", "--pid", str(job.pid), "-o", str(tmp_path / "second.jsonl"))
        try:
            _, err = second.communicate(timeout=WAIT_S)
        finally:
            _kill(second)
        assert second.returncode == 2
        assert err.splitlines() == [
            f"ctmon: record --pid: ctmon has joined process {job.pid} already: watch it with: ctmon watch {job.pid}"
        ]
        # a ctmon that cannot see the first one's session (another runtime
        # directory) is told by the agent in the job itself
        elsewhere = tempfile.mkdtemp(prefix="ctj-")  # short: socket paths have a limit
        try:
            env = {**os.environ, "CTMON_RUNTIME_DIR": elsewhere}
            third = _ctmon("record", "--pid", str(job.pid), "-o", str(tmp_path / "third.jsonl"), env=env)
            try:
                _, err = third.communicate(timeout=WAIT_S)
            finally:
                _kill(third)
        finally:
            shutil.rmtree(elsewhere, ignore_errors=True)
        assert third.returncode == 2
        assert err.splitlines() == [f"ctmon: record --pid: process {job.pid} is monitored by ctmon already"]
        (d / "go").touch()
        (d / "end").touch()
        job.communicate(timeout=WAIT_S)
        _, err = first.communicate(timeout=WAIT_S)  # the job's own exit ends the recording
    finally:
        _kill(first)
    assert job.returncode == 3
    assert first.returncode == 0, err
    assert _kinds(rec, "exit") and _kinds(rec, "graph_break")


def test_call_addresses_are_where_the_process_has_its_functions() -> None:
    """What gdb calls by address (no symbols read while the job is stopped)
    is where the process's own dynamic linker put each function."""
    from ctmon.launch.join_inject import call_addresses

    show = (
        "import ctypes, sys\n"
        "at = lambda f: ctypes.cast(f, ctypes.c_void_p).value\n"
        "print(at(ctypes.CDLL(None).mmap), at(ctypes.pythonapi.Py_AddPendingCall),"
        " at(ctypes.pythonapi.PyRun_SimpleString), flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", show], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        want = [int(v) for v in child.stdout.readline().split()]
        got = call_addresses(child.pid)
        assert got is not None
        assert [got["mmap"], got["Py_AddPendingCall"], got["PyRun_SimpleString"]] == want
    finally:
        _kill(child)
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert call_addresses(gone.pid) is None  # gdb's own lookup is the fallback


def _refusal(pid: int, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ctmon", "record", "--pid", str(pid)],
        capture_output=True,
        text=True,
        env=env,
        timeout=WAIT_S,
    )
    assert done.returncode == 2, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctmon: "), done.stderr
    return lines[0]


def test_refusals_are_one_line_and_leave_the_process_alone() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert f"no process {gone.pid}" in _refusal(gone.pid)

    sleeper = subprocess.Popen(["sleep", "60"])
    quiet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    env = {**os.environ, "CTMON_AGENT_SOCKET": "/nonexistent/agent.sock"}
    launched = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(60)"], env=env)
    try:
        assert "(sleep) is not a Python process" in _refusal(sleeper.pid)
        assert f"runs under ctmon already: watch it with: ctmon watch {launched.pid}" in _refusal(launched.pid)
        no_gdb = {**os.environ, "PATH": "/nonexistent"}
        assert "needs gdb: apt-get install gdb" in _refusal(quiet.pid, no_gdb)
        assert "not 'x'" in _refusal_text("x")
        os.kill(quiet.pid, signal.SIGSTOP)
        try:
            _wait(lambda: Path(f"/proc/{quiet.pid}/stat").read_text().rpartition(")")[2].split()[0] == "T", "the stop")
            assert f"is stopped (SIGSTOP, or a debugger holds it): continue it (kill -CONT {quiet.pid})" in _refusal(
                quiet.pid
            )
        finally:
            os.kill(quiet.pid, signal.SIGCONT)
        for p in (sleeper, quiet, launched):
            assert p.poll() is None  # untouched
    finally:
        for p in (sleeper, quiet, launched):
            _kill(p)


def test_a_launcher_and_one_of_its_ranks_together_are_refused() -> None:
    """A launcher's pid stands for its ranks (tests/test_launch_join_ranks.py):
    naming one of them beside it names that process twice, one line, and
    neither is touched."""
    assert "needs a process id, or several separated by commas, not '123,'" in _refusal_text("123,")
    spawn_ranks = (
        "import os, subprocess, sys\n"
        "kids = [subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], stdin=subprocess.PIPE,"
        " env={**os.environ, 'RANK': str(r), 'WORLD_SIZE': '2'}) for r in range(2)]\n"
        "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    launcher = subprocess.Popen(
        [sys.executable, "-c", spawn_ranks], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert launcher.stdout is not None
        ranks = sorted(int(p) for p in launcher.stdout.readline().split())
        line = _refusal_text(f"{launcher.pid},{ranks[1]}")
        assert line == (
            f"ctmon: record --pid: process {ranks[1]} is named twice: itself, and as a rank of launcher "
            f"{launcher.pid}; name each process once\n"
        ), line
        assert launcher.poll() is None
    finally:
        _kill(launcher)  # its children end when their stdin (the launcher's pipes) closes


def _refusal_text(pid_text: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ctmon", "record", "--pid", pid_text], capture_output=True, text=True, timeout=WAIT_S
    )
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done
    return done.stderr


@needs_gdb
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_attach_pid_watches_then_leaves_the_job_running_when_quit(
    tmp_path: Path, started: tuple[subprocess.Popen[str], Path]
) -> None:
    from test_tui_e2e import Tmux

    job, d = started
    rec = tmp_path / "attached.jsonl"
    tm = Tmux(str(tmp_path))
    try:
        tm.start_shell(140, 40)
        tm("send-keys", "-t", "e2e", f"clear; {sys.executable} -m ctmon attach --pid {job.pid} -o {rec}", "Enter")
        _wait(lambda: bool(_kinds(rec, "joined")), "the joined event")
        (d / "go").touch()
        _wait(lambda: bool(_kinds(rec, "graph_break")), "the graph break")
        tm.wait_for(lambda s: "job.py" in s, WAIT_S, "the viewer")
        tm("send-keys", "-t", "e2e", "q")
        text = tm.wait_for(lambda s: f"left process {job.pid} running" in s, WAIT_S, "the viewer's exit")
        assert "Traceback" not in text
        _wait(lambda: any("left process" in n["message"] for n in _kinds(rec, "note")), "the agent's goodbye")
        assert job.poll() is None  # left running
        (d / "end").touch()
        out, _ = job.communicate(timeout=WAIT_S)
        assert job.returncode == 3 and "threads ['MainThread']" in out
    finally:
        tm.kill()


BLOCKED_JOB = textwrap.dedent(
    """
    import sys
    import torch

    @torch.compile(backend="eager")
    def f(x):
        return torch.sin(x) + 1

    f(torch.randn(4))
    print("ready", flush=True)
    line = sys.stdin.readline()  # the main thread blocked in one call: a pending call waits for its return
    f(torch.randn(4, 3))  # a recompile
    print("got", line.strip(), flush=True)
    print("bye", sys.stdin.readline().strip(), flush=True)
    """
)


def _blocked_job(tmp_path: Path) -> subprocess.Popen[str]:
    """A job past its first compile, its main thread blocked reading stdin."""
    script = tmp_path / "blocked.py"
    script.write_text(BLOCKED_JOB)
    job = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert job.stdout is not None
    try:
        assert job.stdout.readline() == "ready\n", job.communicate()
    except BaseException:
        _kill(job)
        raise
    return job


def _say_to(job: subprocess.Popen[str], line: str) -> None:
    assert job.stdin is not None
    job.stdin.write(line + "\n")
    job.stdin.flush()


@needs_gdb
def test_a_job_blocked_in_one_call_joins_when_the_call_returns(tmp_path: Path) -> None:
    job = _blocked_job(tmp_path)
    rec = tmp_path / "blocked.jsonl"
    ctmon = _ctmon("record", "-q", "--pid", str(job.pid), "-o", str(rec))
    try:
        held = lambda: any("gdb held it" in n["message"] for n in _kinds(rec, "note"))  # noqa: E731
        _wait(lambda: held() or ctmon.poll() is not None, "gdb's scheduling of the agent")
        assert ctmon.poll() is None and not _kinds(rec, "joined")  # scheduled, waiting for the read to return
        _say_to(job, "one")
        _wait(lambda: bool(_kinds(rec, "compile")) or ctmon.poll() is not None, "the recompile after the read")
        assert len(_kinds(rec, "joined")) == 1
        ctmon.send_signal(signal.SIGINT)
        _, err = ctmon.communicate(timeout=WAIT_S)
        assert ctmon.returncode == 0, err
        _say_to(job, "two")
        out, job_err = job.communicate(timeout=WAIT_S)
    finally:
        _kill(ctmon)
        _kill(job)
    assert (job.returncode, out) == (0, "got one\nbye two\n"), job_err


@needs_gdb
def test_a_job_that_never_runs_the_agent_is_left_as_it_was_and_ends_normally(tmp_path: Path) -> None:
    """$CTMON_JOIN_TIMEOUT_S: how long ctmon waits for the job's main thread
    (60 s unless said). The pending call, run when the read returns, finds no
    ctmon to connect to and does nothing: the job goes on as a plain run."""
    job = _blocked_job(tmp_path)
    env = {**os.environ, "CTMON_JOIN_TIMEOUT_S": "2"}
    try:
        ctmon = _ctmon("record", "--pid", str(job.pid), "-o", str(tmp_path / "never.jsonl"), env=env)
        try:
            _, err = ctmon.communicate(timeout=40)  # well before the 60 s default
        finally:
            _kill(ctmon)
        assert ctmon.returncode == 2 and err.splitlines() == [
            f"ctmon: record --pid: process {job.pid} did not run ctmon's agent within 2 s (its main thread may be "
            "blocked in one long call); it was left as it was"
        ], err
        assert job.poll() is None
        _say_to(job, "one")
        _say_to(job, "two")
        out, job_err = job.communicate(timeout=WAIT_S)
    finally:
        _kill(job)
    assert (job.returncode, out) == (0, "got one\nbye two\n"), job_err
    assert "ctmon" not in job_err


# What gdb 13.1 printed joining a CUDA job on an H200 host (recent Intel
# Xeon): attached, but every call into the process failed; gdb 16.3 joined it.
XSTATE_GDB = """#!/bin/sh
echo '0x00007fafa42ecbdf in clock_nanosleep () from /lib/x86_64-linux-gnu/libc.so.6'
echo 'ctmon-buf ctmon-rc [Inferior 1 (process 1569) detached]'
echo "Couldn't write extended state status: Bad address." >&2
echo "Value can't be converted to integer." >&2
echo 'Invalid cast.' >&2
"""


def test_a_gdb_that_cannot_call_into_the_process_is_one_line_naming_the_cause(tmp_path: Path) -> None:
    """The first error gdb printed is the cause (the later ones follow from
    it), and gdb's known failure on recent Xeons says what to do; the process
    is left running."""
    from ctmon.launch.join_inject import gdb_failure

    fake = tmp_path / "bin" / "gdb"
    fake.parent.mkdir()
    fake.write_text(XSTATE_GDB)
    fake.chmod(0o755)
    quiet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        line = _refusal(quiet.pid, {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"})
        assert f"gdb could not call into process {quiet.pid} (Couldn't write extended state status)" in line, line
        assert "install a newer gdb" in line and "\n" not in line.strip()
        assert quiet.poll() is None
    finally:
        _kill(quiet)
    other = "warning: Could not load shared library symbols\nNo symbol table is loaded.\nValue can't be converted."
    assert gdb_failure(7, other) == "gdb could not schedule ctmon in process 7: No symbol table is loaded."


@pytest.mark.skipif(shutil.which("lldb") is None, reason="lldb is not installed (.ci/run installs it)")
@pytest.mark.slow
def test_lldb_joins_where_gdb_is_not_installed(
    tmp_path: Path, job_script: Path, started: tuple[subprocess.Popen[str], Path]
) -> None:
    """No gdb on PATH, lldb there: lldb schedules the agent, which records
    what follows; leaving lets the job end as a plain run does."""
    job, d = started
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lldb").symlink_to(str(shutil.which("lldb")))
    keep = [p for p in os.environ["PATH"].split(os.pathsep) if p and not os.path.exists(os.path.join(p, "gdb"))]
    keep = [p for p in keep if not os.path.exists(os.path.join(p, "lldb"))]
    env = {**os.environ, "PATH": os.pathsep.join([str(bin_dir), *keep])}
    rec = tmp_path / "joined.jsonl"
    err = _join_then_leave(job.pid, rec, d, env=env)
    assert f"left process {job.pid} running" in err
    (d / "end").touch()
    job_out, job_err = job.communicate(timeout=WAIT_S)
    assert (job.returncode, job_out, job_err) == _plain_run(tmp_path, job_script)
    notes = [n["message"] for n in _kinds(rec, "note")]
    assert any(n.startswith(f"joining process {job.pid}: lldb held it ") for n in notes), notes
    assert [(b["file"], b["line"]) for b in _kinds(rec, "graph_break")] == [(str(job_script), BREAK_LINE)]
    assert "rank mismatch" in _kinds(rec, "recompile_reasons")[0]["reasons"][0]
