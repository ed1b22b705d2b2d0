"""``ctmon runs`` and what it must never do: remove what a live job writes
(whatever runtime directory that job has), put a recorded escape sequence on
the terminal, or fail on one bad file in the state directory."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from helpers import WORKLOADS, ctmon, env_with

from ctmon.launch import files

PY = sys.executable
WAIT = os.path.join(WORKLOADS, "wait_for_file.py")
DAY = 86400
ESC_COMMAND = ["python", "\x1b]0;owned\x07job.py", "\x1b[2J\x1b[H", "a\nfake row", "\x9b31m"]


def _runs_dir(state: str) -> str:
    return os.path.join(state, "ctmon", "runs")


@pytest.fixture
def runtime_base(tmp_path):  # type: ignore[no-untyped-def]
    """A base for runtime directories where socket paths fit (108 bytes):
    under tmp_path if it is short, else in /tmp, removed after the test (every
    ctmon command makes its runtime directory again)."""
    if len(str(tmp_path)) <= 50:
        yield str(tmp_path)
        return
    base = tempfile.mkdtemp(prefix="ctmon-runs-", dir="/tmp")
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _wait_for(predicate, what: str, proc: subprocess.Popen[bytes], timeout: float = 90.0):  # type: ignore[no-untyped-def]
    """``predicate()``'s first true value, polled while ``proc`` runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args!r} ended ({proc.returncode}) before {what}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _recording_saying(runs: str, text: str) -> str | None:
    """The recording in ``runs`` whose job has printed ``text``."""
    try:
        names = [n for n in os.listdir(runs) if n.endswith(".jsonl")]
    except OSError:
        return None
    for n in names:
        path = os.path.join(runs, n)
        with open(path, "rb") as f:
            if text.encode() in f.read():
                return path
    return None


def _age(path: str, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def _no_traceback(out: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in out.stderr, out.stderr


# ------------------------------------------------------------ live runs


@pytest.mark.slow
def test_a_job_of_another_runtime_dir_is_running_and_never_pruned(tmp_path, runtime_base: str) -> None:  # type: ignore[no-untyped-def]
    """Each SLURM job has its own TMPDIR, so the shell running ``ctmon runs``
    does not see the job's session: the recording's lock must say it is live."""
    state = str(tmp_path / "state")
    base = runtime_base
    go = str(tmp_path / "go")
    job_env = env_with(XDG_STATE_HOME=state, CTMON_RUNTIME_DIR=os.path.join(base, "rj"))
    shell_env = env_with(XDG_STATE_HOME=state, CTMON_RUNTIME_DIR=os.path.join(base, "rs"))
    runs = _runs_dir(state)
    job = subprocess.Popen(
        [PY, "-m", "ctmon", "record", "-q", WAIT, go],
        env=job_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        rec = _wait_for(lambda: _recording_saying(runs, "ready"), "the job to start", job)
        assert files.lock_holder(os.stat(rec)) == job.pid  # the supervisor, all the run long
        [row] = json.loads(ctmon("runs", "--json", env=shell_env).stdout)
        assert row["path"] == rec and row["live"] is True
        assert "running" in ctmon("runs", env=shell_env).stdout

        # The supervisor stopped for a moment (the job runs on): no sample
        # moves the recording's mtime forward past the age given to it.
        os.kill(job.pid, signal.SIGSTOP)
        try:
            for prune in (["--keep", "0"], ["--older-than", "1d"]):
                _age(rec, 10 * DAY)
                out = ctmon("runs", *prune, env=shell_env)
                _no_traceback(out)
                assert out.returncode == 0 and out.stdout == "", prune
                assert f"keeping {rec}: its job is still running" in out.stderr, prune
                assert os.path.exists(rec), prune
        finally:
            os.kill(job.pid, signal.SIGCONT)

        open(go, "w").close()
        assert job.wait(timeout=90) == 0
    finally:
        open(go, "a").close()
        if job.poll() is None:
            job.kill()
            job.wait(timeout=30)
    _age(rec, 10 * DAY)  # the job's last lines moved it forward
    out = ctmon("runs", "--older-than", "1d", env=shell_env)
    assert out.returncode == 0 and out.stdout.strip() == f"removed {rec}", out.stderr
    assert not os.path.exists(rec)


def test_a_held_output_log_keeps_its_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A relay that outlives the supervisor still writes the output log: the
    run stays while anyone holds either file's lock."""
    state = str(tmp_path / "state")
    runs = _runs_dir(state)
    os.makedirs(runs)
    rec = os.path.join(runs, "r.jsonl")
    with open(rec, "w") as f:
        f.write('{"kind":"session","command":["python","r.py"]}\n{"kind":"exit","code":0}\n')
    _age(rec, 10 * DAY)
    fd = files.open_new(os.path.join(runs, "r.output.log"))  # locked, as a run's log is
    env = env_with(XDG_STATE_HOME=state)
    try:
        out = ctmon("runs", "--keep", "0", env=env)
        assert "its job is still running" in out.stderr and os.path.exists(rec)
    finally:
        os.close(fd)
    assert ctmon("runs", "--keep", "0", env=env).stdout.strip() == f"removed {rec}"
    assert os.listdir(runs) == []


def test_looking_at_a_lock_never_takes_it_from_the_writer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The probe is a shared flock on an open file description of its own,
    let go at once: the writer's exclusive lock stays whole."""
    path = str(tmp_path / "r.jsonl")
    fd = files.open_new(path)
    try:
        for _ in range(3):
            assert files.path_locked(path)
        with pytest.raises(files.FileRefused, match="being written by another ctmon"):
            files.open_given(path)  # still ours alone
    finally:
        os.close(fd)
    assert not files.path_locked(path)


def test_a_run_starting_while_someone_looks_waits_for_the_look(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``ctmon runs`` holds a shared lock for an instant: a run opening its
    recording at that instant must not take it for a second ctmon."""
    path = str(tmp_path / "r.jsonl")
    looker = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    fcntl.flock(looker, fcntl.LOCK_SH | fcntl.LOCK_NB)  # someone looking, right now
    real_sleep = time.sleep

    def look_ends(s: float) -> None:  # the look ends while the writer waits
        fcntl.flock(looker, fcntl.LOCK_UN)
        real_sleep(s)

    monkeypatch.setattr(time, "sleep", look_ends)
    try:
        os.close(files.open_given(path))
    finally:
        os.close(looker)


@pytest.mark.slow
def test_a_live_bench_directory_is_kept(tmp_path, runtime_base: str) -> None:  # type: ignore[no-untyped-def]
    """``ctmon bench`` holds its directory's lock for all its runs (between
    two of them no recording is locked), so pruning leaves it alone."""
    state = str(tmp_path / "state")
    base = runtime_base
    go = str(tmp_path / "go")
    env = env_with(XDG_STATE_HOME=state, CTMON_RUNTIME_DIR=base)
    runs = _runs_dir(state)
    bench = subprocess.Popen(
        [PY, "-m", "ctmon", "bench", "--modes", "eager", "--json", WAIT, go],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        out_dir = _wait_for(
            lambda: (
                next((os.path.join(runs, n) for n in os.listdir(runs) if n.startswith("bench-")), None)
                if os.path.isdir(runs)
                else None
            ),
            "the bench directory",
            bench,
        )
        _wait_for(lambda: files.lock_holder(os.stat(out_dir)) == bench.pid, "bench to hold its directory", bench)
        _wait_for(lambda: _recording_saying(out_dir, "ready"), "the job to start", bench)  # no new file until it ends
        _age(out_dir, 10 * DAY)
        for prune in (["--keep", "0"], ["--older-than", "1d"]):
            out = ctmon("runs", *prune, env=env)
            _no_traceback(out)
            assert f"keeping {out_dir}: its job is still running" in out.stderr, prune
            assert os.path.isdir(out_dir)
        open(go, "w").close()
        bench.wait(timeout=120)
    finally:
        open(go, "a").close()
        if bench.poll() is None:
            bench.kill()
            bench.wait(timeout=30)
    out = ctmon("runs", "--keep", "0", env=env)
    assert out.stdout.strip() == f"removed {out_dir}", out.stderr
    assert not os.path.exists(out_dir)


# ------------------------------------------------------------ terminal safety


def test_recorded_escape_sequences_never_reach_the_terminal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    state = str(tmp_path / "state")
    runs = _runs_dir(state)
    os.makedirs(runs)
    rec = os.path.join(runs, "evil-\x1b]52;c;aGk=\x07\x1b[31m.jsonl")
    with open(rec, "w") as f:
        f.write(json.dumps({"kind": "session", "command": ESC_COMMAND}) + "\n")
        f.write(json.dumps({"kind": "exit", "code": "\x1b[2J"}, separators=(",", ":")) + "\n")
    env = env_with(XDG_STATE_HOME=state)

    text = ctmon("runs", env=env)
    assert text.returncode == 0, text.stderr
    for shown in (text.stdout, text.stderr):
        assert not any(c in shown for c in "\x1b\x07\x9b\r"), repr(shown)
    lines = text.stdout.splitlines()
    assert len(lines) == 3 and "job.py" in lines[0] and "fake row" in lines[0], lines  # one row, not a forged one

    [row] = json.loads(ctmon("runs", "--json", env=env).stdout)  # exact, as recorded
    assert row["command"] == " ".join(ESC_COMMAND) and row["path"] == rec and row["exit_code"] is None

    _age(rec, 10 * DAY)
    pruned = ctmon("runs", "--older-than", "1d", env=env)
    assert pruned.returncode == 0 and not os.path.exists(rec)
    assert not any(c in pruned.stdout + pruned.stderr for c in "\x1b\x07"), repr(pruned.stdout)


# ------------------------------------------------------------ bad files

DEEP = b"[" * 60000
BAD_FILES: dict[str, bytes | None] = {
    "nested-deep": DEEP + b"\n",
    "nested-command": b'{"kind":"session","command":' + DEEP + b"\n",
    "nested-exit": b'{"kind":"session","command":["a"]}\n{"kind":"exit","code":' + b"[" * 10000 + b"\n",
    "first-line-list": b'["kind","session"]\n',
    "first-line-number": b"42\n",
    "first-line-string": b'"session"\n',
    "command-a-number": b'{"kind":"session","command":5}\n',
    "command-an-object": b'{"kind":"session","command":{"a":[1,{"b":2}]}}\n',
    "huge-int": b'{"kind":"session","command":[' + b"9" * 5000 + b"]}\n",
    "huge-exit-code": b'{"kind":"session","command":["a"]}\n{"kind":"exit","code":' + b"9" * 4000 + b"}\n",
    "binary": bytes(range(256)) * 64,
    "empty": b"",
    "symlink-loop": None,
}


def _bad_state(tmp_path, name: str):  # type: ignore[no-untyped-def]
    state = str(tmp_path / "state")
    runs = _runs_dir(state)
    os.makedirs(runs)
    good = os.path.join(runs, "good.jsonl")
    with open(good, "w") as f:
        f.write('{"kind":"session","command":["python","good.py"]}\n{"kind":"exit","code":3}\n')
    bad = os.path.join(runs, f"{name}.jsonl")
    content = BAD_FILES[name]
    if content is None:
        os.symlink(os.path.basename(bad), bad)
        then = time.time() - 10 * DAY
        os.utime(bad, (then, then), follow_symlinks=False)
    else:
        with open(bad, "wb") as f:
            f.write(content)
        _age(bad, 10 * DAY)
    return env_with(XDG_STATE_HOME=state), good, bad


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_bad_recording_is_listed_and_prunable(tmp_path, name: str) -> None:  # type: ignore[no-untyped-def]
    env, good, bad = _bad_state(tmp_path, name)
    out = ctmon("runs", "--json", env=env)
    _no_traceback(out)
    rows = {r["path"]: r for r in json.loads(out.stdout)}
    assert rows[good]["exit_code"] == 3 and rows[good]["command"] == "python good.py"
    assert rows[bad]["live"] is False and rows[bad]["exit_code"] is None
    text = ctmon("runs", env=env)
    _no_traceback(text)
    assert text.returncode == 0 and "exit 3" in text.stdout and bad in text.stdout
    pruned = ctmon("runs", "--older-than", "1d", env=env)
    _no_traceback(pruned)
    assert pruned.returncode == 0 and pruned.stdout.strip() == f"removed {bad}"
    assert not os.path.lexists(bad) and os.path.exists(good)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file without read permission")
def test_a_recording_without_read_permission_is_listed_and_prunable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env, good, bad = _bad_state(tmp_path, "empty")
    os.chmod(bad, 0)
    rows = {r["path"]: r for r in json.loads(ctmon("runs", "--json", env=env).stdout)}
    assert rows[bad]["readable"] is False and rows[good]["exit_code"] == 3
    assert "unreadable" in ctmon("runs", env=env).stdout
    assert ctmon("runs", "--keep", "1", env=env).stdout.strip() == f"removed {bad}"


def test_a_fifo_or_directory_named_like_a_recording_never_hangs_the_listing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env, good, _ = _bad_state(tmp_path, "empty")
    runs = os.path.dirname(good)
    fifo = os.path.join(runs, "fifo.jsonl")
    os.mkfifo(fifo)
    os.mkdir(os.path.join(runs, "dir.jsonl"))  # not ctmon's: neither listed nor removed
    os.symlink("/dev/zero", os.path.join(runs, "zero.jsonl"))  # never read
    out = ctmon("runs", "--json", env=env, timeout=60)
    _no_traceback(out)
    rows = {r["path"]: r for r in json.loads(out.stdout)}
    assert rows[fifo]["readable"] is False and os.path.join(runs, "dir.jsonl") not in rows
    assert rows[os.path.join(runs, "zero.jsonl")]["readable"] is False
    ctmon("runs", "--keep", "0", env=env, timeout=60)
    assert os.listdir(runs) == ["dir.jsonl"]


def test_a_huge_recording_is_listed_from_its_ends(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A 64 GiB recording (sparse) is listed in a bounded read, under a memory
    limit far below its size."""
    env, good, _ = _bad_state(tmp_path, "empty")
    huge = os.path.join(os.path.dirname(good), "huge.jsonl")
    with open(huge, "wb") as f:
        f.write(b'{"kind":"session","command":["python","big.py"]}\n')
        f.truncate(64 << 30)
        f.seek(0, os.SEEK_END)
        f.write(b'\n{"kind":"exit","code":7}\n')
    limit = "import resource,runpy,sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
    out = subprocess.run(
        [PY, "-c", limit + "sys.argv=['ctmon','runs','--json']; runpy.run_module('ctmon', run_name='__main__')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    _no_traceback(out)
    rows = {r["path"]: r for r in json.loads(out.stdout)}
    assert rows[huge]["exit_code"] == 7 and rows[huge]["command"] == "python big.py"


@pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="needs a tmpfs, which keeps any date")
def test_a_date_past_any_calendar_is_listed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    state = tempfile.mkdtemp(prefix="ctmon-runs-", dir="/dev/shm")
    try:
        runs = _runs_dir(state)
        os.makedirs(runs)
        rec = os.path.join(runs, "future.jsonl")
        with open(rec, "w") as f:
            f.write('{"kind":"session","command":["python","f.py"]}\n')
        os.utime(rec, (1e17, 1e17))
        out = ctmon("runs", env=env_with(XDG_STATE_HOME=state))
        _no_traceback(out)
        assert out.returncode == 0 and "python f.py" in out.stdout
    finally:
        shutil.rmtree(state, ignore_errors=True)
