"""``ctmon record --pid A,B`` and ``--pid LAUNCHER``: several running
processes joined as one job's ranks.

Plain ``python`` processes (no RANK) are numbered in the order named; a
torchrun launcher's pid stands for its workers, which keep their RANK. Each
process compiles after the join, recorded under its rank; one that exits
while joined ends its rank and the others go on; leaving takes ctmon out of
every process, and each runs on to its normal end. Bad input is one line,
exit 2, with no process touched.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="joining uses /proc and gdb"),
]
needs_gdb = pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed")

WAIT_S = 180.0  # several processes importing torch on a busy 2-core machine; every wait is bounded by it

# One process: named by its RANK (torchrun's workers) or by argv[2] (plain runs).
JOB = textwrap.dedent(
    """
    import os, sys, threading, time
    import torch
    d = sys.argv[1]
    name = os.environ.get("RANK") or sys.argv[2]
    if "RANK" in os.environ:
        import torch.distributed as dist
        dist.init_process_group("gloo")

    def wait(what):
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(d, f"{what}-{name}")):
            if time.monotonic() > deadline:
                sys.exit(7)
            time.sleep(0.02)

    @torch.compile(backend="eager")
    def before(x):
        return torch.sin(x) + 1

    before(torch.randn(4))
    print(f"compiled once {name}", flush=True)
    open(os.path.join(d, f"ready-{name}"), "w").close()
    wait("go")

    @torch.compile(backend="eager")
    def after(x):
        return torch.cos(x) * 2

    after(torch.randn(3))
    open(os.path.join(d, f"compiled-{name}"), "w").close()
    wait("end")
    deadline = time.monotonic() + 60
    while threading.active_count() > 1 and time.monotonic() < deadline:
        time.sleep(0.02)  # ctmon's agent, asked to leave, ends its thread at its next flush
    print(f"done {name}", sorted(t.name for t in threading.enumerate()), flush=True)
    """
)


def _wait(cond: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _ready(marker: Path, proc: subprocess.Popen[str]) -> Callable[[], bool]:
    """The process wrote its marker file, or exited (then the test says why)."""
    return lambda: marker.exists() or proc.poll() is not None


def _ctmon(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ctmon", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


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


def _ranks_of(path: Path, kind: str) -> set[int]:
    return {e["rank"] for e in _kinds(path, kind) if e.get("rank") is not None}


def _notes(path: Path) -> list[str]:
    return [n["message"] for n in _kinds(path, "note")]


def _kill(p: subprocess.Popen[Any]) -> None:
    if p.poll() is None:
        p.kill()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _plain_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}


@pytest.fixture
def signals(tmp_path: Path) -> Path:
    (tmp_path / "job.py").write_text(JOB)
    d = tmp_path / "signals"
    d.mkdir()
    return d


@pytest.fixture
def two_jobs(tmp_path: Path, signals: Path) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Two plain python processes ("a", "b"), each past its first compile and waiting."""
    jobs = {
        name: subprocess.Popen(
            [sys.executable, str(tmp_path / "job.py"), str(signals), name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_plain_env(),
        )
        for name in ("a", "b")
    }
    try:
        for name, job in jobs.items():
            _wait(_ready(signals / f"ready-{name}", job), f"job {name}'s compile")
            assert job.poll() is None, job.communicate()
        yield jobs
    finally:
        for job in jobs.values():
            _kill(job)


def _touch(d: Path, what: str, *names: str) -> None:
    for name in names:
        (d / f"{what}-{name}").touch()


def _refusal(pid_text: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ctmon", "record", "--pid", pid_text, "-o", os.devnull],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done
    return done.stderr.strip()


@needs_gdb
def test_two_processes_are_ranks_0_and_1_and_leaving_leaves_both_running(
    tmp_path: Path, signals: Path, two_jobs: dict[str, subprocess.Popen[str]]
) -> None:
    a, b = two_jobs["a"], two_jobs["b"]
    rec = tmp_path / "ranks.jsonl"
    ctmon = _ctmon("record", "--pid", f"{a.pid},{b.pid}", "-o", str(rec))
    try:
        _wait(lambda: len(_kinds(rec, "joined")) == 2 or ctmon.poll() is not None, "both joined events")
        assert ctmon.poll() is None, ctmon.communicate()
        # a second ctmon is refused either process, the second one too
        assert _refusal(str(b.pid)) == (
            f"ctmon: record --pid: ctmon has joined process {b.pid} already: watch it with: ctmon watch {b.pid}"
        )
        _touch(signals, "go", "a", "b")
        _wait(lambda: _ranks_of(rec, "compile") == {0, 1} or ctmon.poll() is not None, "a compile of each rank")
        ctmon.send_signal(signal.SIGINT)  # as Ctrl-C: leave both
        _, err = ctmon.communicate(timeout=WAIT_S)
    finally:
        _kill(ctmon)
    assert ctmon.returncode == 0, err
    assert f"left processes {a.pid}, {b.pid} running" in err and "Traceback" not in err

    # the order named is the ranks' order; every event of a process says its rank
    hellos = {e["pid"]: e["rank"] for e in _kinds(rec, "process") if e.get("rank") is not None}
    assert hellos == {a.pid: 0, b.pid: 1}
    assert {e["rank"] for e in _kinds(rec, "joined")} == {0, 1}
    holds = [n for n in _notes(rec) if "gdb held it" in n]
    assert len(holds) == 2 and f"process {a.pid} (rank 0)" in holds[0] and f"process {b.pid} (rank 1)" in holds[1]
    assert any(n.startswith("joined 2 processes: gdb held them") for n in _notes(rec))
    # the samples are the whole job's: both processes, not the first named alone
    assert max(e.get("procs") or 0 for e in _kinds(rec, "sample")) == 2

    # both ran on, ctmon gone from them, to their normal end
    assert a.poll() is None and b.poll() is None
    _touch(signals, "end", "a", "b")
    for name, job in two_jobs.items():
        out, job_err = job.communicate(timeout=WAIT_S)
        assert (job.returncode, out) == (0, f"compiled once {name}\ndone {name} ['MainThread']\n"), job_err
        assert "ctmon" not in job_err

    report = json.loads(
        subprocess.run(
            [sys.executable, "-m", "ctmon", "report", str(rec), "--json"],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        ).stdout
    )
    assert [(r["rank"], r["pid"]) for r in report["ranks"]] == [(0, a.pid), (1, b.pid)]
    assert all(r["compile"]["compiles"] >= 1 for r in report["ranks"])
    text = subprocess.run(
        [sys.executable, "-m", "ctmon", "report", str(rec)], capture_output=True, text=True, timeout=WAIT_S
    ).stdout
    assert "rank 0" in text and "rank 1" in text, text


@needs_gdb
def test_a_process_that_exits_ends_its_rank_and_the_others_go_on(
    tmp_path: Path, signals: Path, two_jobs: dict[str, subprocess.Popen[str]]
) -> None:
    a, b = two_jobs["a"], two_jobs["b"]
    rec = tmp_path / "ranks.jsonl"
    ctmon = _ctmon("record", "-q", "--pid", f"{b.pid},{a.pid}", "-o", str(rec))  # b named first: rank 0
    try:
        _wait(lambda: len(_kinds(rec, "joined")) == 2 or ctmon.poll() is not None, "both joined events")
        assert ctmon.poll() is None, ctmon.communicate()
        _touch(signals, "go", "a")
        _touch(signals, "end", "a")
        ended = f"process {a.pid} (rank 1) exited; ctmon goes on recording the other 1"
        _wait(lambda: ended in _notes(rec) or ctmon.poll() is not None, "rank 1's end")
        assert a.wait(timeout=WAIT_S) == 0
        _touch(signals, "go", "b")  # rank 0 compiles after rank 1 ended: still recorded
        _wait(lambda: 0 in _ranks_of(rec, "compile") or ctmon.poll() is not None, "rank 0's compile")
        assert ctmon.poll() is None, ctmon.communicate()
        _touch(signals, "end", "b")
        _, err = ctmon.communicate(timeout=WAIT_S)  # the last one's exit ends the recording
    finally:
        _kill(ctmon)
    assert ctmon.returncode == 0 and "Traceback" not in err, err
    assert _ranks_of(rec, "compile") == {0, 1}
    assert _ranks_of(rec, "process_end") == {0, 1}
    assert b.wait(timeout=WAIT_S) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@needs_gdb
def test_a_torchrun_launchers_pid_joins_its_workers_as_their_ranks(tmp_path: Path, signals: Path) -> None:
    launch = ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    launcher = subprocess.Popen(
        [sys.executable, *launch, "--master-port", str(_free_port()), str(tmp_path / "job.py"), str(signals)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_plain_env(),
    )
    rec = tmp_path / "launcher.jsonl"
    ctmon: subprocess.Popen[str] | None = None
    try:
        for rank in ("0", "1"):
            _wait(_ready(signals / f"ready-{rank}", launcher), f"rank {rank}")
        assert launcher.poll() is None, launcher.communicate()
        ctmon = _ctmon("record", "--pid", str(launcher.pid), "-o", str(rec))
        _wait(lambda: len(_kinds(rec, "joined")) == 2 or ctmon.poll() is not None, "both workers joined")
        assert ctmon.poll() is None, ctmon.communicate()
        _touch(signals, "go", "0", "1")
        _wait(lambda: _ranks_of(rec, "compile") == {0, 1} or ctmon.poll() is not None, "a compile of each rank")
        ctmon.send_signal(signal.SIGINT)
        _, err = ctmon.communicate(timeout=WAIT_S)
        assert ctmon.returncode == 0, err
        workers = {e["rank"]: e["pid"] for e in _kinds(rec, "process") if e.get("rank") is not None}
        assert sorted(workers) == [0, 1] and launcher.pid not in workers.values()
        joined = f"{min(workers.values())}, {max(workers.values())}"
        assert err.startswith(
            f"ctmon: joining the ranks of launcher {launcher.pid}: processes {joined} (the launcher itself is not joined)"
        ), err
        assert launcher.poll() is None
        _touch(signals, "end", "0", "1")
        out, launcher_err = launcher.communicate(timeout=WAIT_S)
        assert launcher.returncode == 0, launcher_err
        assert "done 0" in out and "done 1" in out
    finally:
        if ctmon is not None:
            _kill(ctmon)
        _kill(launcher)


def test_bad_lists_are_one_line_each_and_touch_no_process(tmp_path: Path) -> None:
    """A pid named twice, a list with a process that is not Python, ranks of
    two different jobs: refused before any process is joined."""
    waiting = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    plain = subprocess.Popen(waiting, stdin=subprocess.PIPE, env=_plain_env())
    sleeper = subprocess.Popen(["sleep", "300"])
    rank0 = [
        subprocess.Popen(waiting, stdin=subprocess.PIPE, env={**_plain_env(), "RANK": "0", "WORLD_SIZE": "2"})
        for _ in range(2)
    ]
    try:
        assert _refusal(f"{plain.pid},{plain.pid}") == (
            f"ctmon: record: --pid names process {plain.pid} twice: name each process once"
        )
        assert _refusal(f"{plain.pid},x") == (
            f"ctmon: record: --pid needs a process id, or several separated by commas, not '{plain.pid},x'"
        )
        assert _refusal(f"{plain.pid},{sleeper.pid}") == (
            f"ctmon: record --pid: process {sleeper.pid} (sleep) is not a Python process"
        )
        assert _refusal(f"{rank0[0].pid},{rank0[1].pid}") == (
            f"ctmon: record --pid: processes {rank0[0].pid} and {rank0[1].pid} are both rank 0: they are ranks of "
            "different jobs; join each job in its own ctmon session"
        )
        assert _refusal(f"{rank0[0].pid},{plain.pid}") == (
            f"ctmon: record --pid: process {rank0[0].pid} is rank 0 of a launched job and process {plain.pid} is no "
            "rank: join them in separate ctmon sessions"
        )
        for p in (plain, sleeper, *rank0):
            assert p.poll() is None  # untouched
            with open(f"/proc/{p.pid}/status") as f:
                assert "TracerPid:\t0" in f.read()
    finally:
        for p in (plain, sleeper, *rank0):
            _kill(p)


@needs_gdb
def test_leaving_a_stopped_process_ends_the_recording_and_ctmon_leaves_it_once_continued(
    tmp_path: Path, signals: Path, two_jobs: dict[str, subprocess.Popen[str]]
) -> None:
    """A joined process stopped (SIGSTOP) cannot take ctmon out when the user
    leaves: the recording still ends (after a bounded wait) and says so; the
    other process is left at once; continued, the stopped one leaves too and
    both end as plain runs."""
    a, b = two_jobs["a"], two_jobs["b"]
    rec = tmp_path / "stopped.jsonl"
    ctmon = _ctmon("record", "-q", "--pid", f"{a.pid},{b.pid}", "-o", str(rec))
    try:
        _wait(lambda: len(_kinds(rec, "joined")) == 2 or ctmon.poll() is not None, "both joined events")
        assert ctmon.poll() is None, ctmon.communicate()
        os.kill(b.pid, signal.SIGSTOP)
        try:
            ctmon.send_signal(signal.SIGINT)
            _, err = ctmon.communicate(timeout=WAIT_S)
            assert ctmon.returncode == 0 and "Traceback" not in err, err
            assert (
                f"process {b.pid} did not answer within 10 s (is it stopped?); ctmon leaves it when it runs again"
                in (_notes(rec))
            )
            assert _ranks_of(rec, "process_end") == {0}  # rank 0 left; rank 1 stopped, its connection closed by ctmon
        finally:
            os.kill(b.pid, signal.SIGCONT)
        _touch(signals, "go", "a", "b")
        _touch(signals, "end", "a", "b")
        for name, job in two_jobs.items():
            out, job_err = job.communicate(timeout=WAIT_S)
            assert (job.returncode, out) == (0, f"compiled once {name}\ndone {name} ['MainThread']\n"), job_err
            assert "ctmon" not in job_err
    finally:
        _kill(ctmon)
