"""Files and directories a run writes: socket paths that fit, recordings that
are never truncated before the job starts, locked, and never written through
a planted symlink."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from helpers import ROOT, WORKLOADS, env_with, one_line_containing

from ctmon.launch import files, runtime

PY = sys.executable
JOB = os.path.join(WORKLOADS, "faults_job.py")
WAIT = os.path.join(WORKLOADS, "wait_for_file.py")
EARLIER = '{"kind":"session","t":1.0,"v":1}\n'


def ctmon(*args: str, env: dict[str, str] | None = None, cwd: str = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "ctmon", *args], env=env or env_with(), cwd=cwd, capture_output=True, text=True, timeout=120
    )


def marker_script(d: str) -> tuple[str, str]:
    marker = os.path.join(d, "it-ran")
    script = os.path.join(d, "job.py")
    with open(script, "w") as f:
        f.write(f"open({marker!r}, 'w').close()\n")
    return script, marker


def kinds(path: str) -> list[str]:
    with open(path) as f:
        return [json.loads(ln)["kind"] for ln in f if ln.strip()]


# ------------------------------------------------------------ socket paths


@pytest.fixture
def long_tmpdir():  # type: ignore[no-untyped-def]
    """A SLURM-style TMPDIR: well past what a socket path can hold."""
    base = tempfile.mkdtemp(prefix="ctlong-")
    d = os.path.join(base, "slurm-job-1234567", "node-a01.cluster.example.org", "tmp-of-this-job-step-0001")
    os.makedirs(d)
    assert len(d) > 80
    yield d
    shutil.rmtree(base, ignore_errors=True)


def test_long_tmpdir_runs_the_job_and_keeps_the_recording(tmp_path, long_tmpdir) -> None:  # type: ignore[no-untyped-def]
    script, marker = marker_script(str(tmp_path))
    rec = tmp_path / "r.jsonl"
    rec.write_text(EARLIER)
    env = env_with(TMPDIR=long_tmpdir)
    env.pop("CTMON_RUNTIME_DIR", None)
    out = ctmon("record", "-q", "-o", str(rec), script, env=env)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert os.path.exists(marker)
    assert kinds(str(rec))[0] == "session" and kinds(str(rec))[-1] == "exit"


def test_explicit_runtime_dir_too_long_is_one_line_and_harms_nothing(tmp_path, long_tmpdir) -> None:  # type: ignore[no-untyped-def]
    script, marker = marker_script(str(tmp_path))
    rec = tmp_path / "r.jsonl"
    rec.write_text(EARLIER)
    out = ctmon("record", "-o", str(rec), script, env=env_with(CTMON_RUNTIME_DIR=long_tmpdir))
    one_line_containing(out, "too long", "CTMON_RUNTIME_DIR")
    assert not os.path.exists(marker)
    assert rec.read_text() == EARLIER


# ------------------------------------------------------------ -o FILE


def test_output_into_a_missing_directory_creates_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "runs" / "today" / "r.jsonl"
    out = ctmon("record", "-q", "-o", str(target), JOB)
    assert out.returncode == 0, out.stderr
    assert kinds(str(target))[-1] == "exit"


@pytest.mark.slow
def test_second_record_to_the_same_file_is_refused_and_the_first_is_unharmed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rec = str(tmp_path / "same.jsonl")
    release = str(tmp_path / "release")
    first = subprocess.Popen(
        [PY, "-m", "ctmon", "record", "-q", "-o", rec, WAIT, release],
        env=env_with(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None
        assert first.stdout.readline().strip() == "ready"
        script, marker = marker_script(str(tmp_path))
        out = ctmon("record", "-o", rec, script)
        with open(rec) as f:
            sup_pid = json.loads(f.readline())["pid"]
        one_line_containing(out, f"{rec} is being written by another ctmon (pid {sup_pid})")
        assert not os.path.exists(marker)
    finally:
        open(release, "w").close()
        first.communicate(timeout=60)
    assert first.returncode == 0
    ks = kinds(rec)
    assert ks.count("session") == 1 and ks[-1] == "exit"


def test_symlink_planted_in_a_shared_sticky_directory_is_not_followed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    if os.getuid() != 0:
        pytest.skip("planting another user's symlink needs root (chown)")
    shared = tempfile.mkdtemp(prefix="ctsticky-")
    try:
        os.chmod(shared, 0o1777)
        victim = tmp_path / "precious"
        victim.write_text("keep me\n")
        link = os.path.join(shared, "r.jsonl")
        os.symlink(str(victim), link)
        os.lchown(link, 65534, 65534)
        script, marker = marker_script(str(tmp_path))
        out = ctmon("record", "-o", link, script)
        one_line_containing(out, "symlink another user owns", "refusing to follow it")
        assert victim.read_text() == "keep me\n" and not os.path.exists(marker)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# ------------------------------------------------------------ the state directory


def _state(tmp_path) -> str:  # type: ignore[no-untyped-def]
    return str(tmp_path / "state")


def test_world_writable_state_dir_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runs = os.path.join(_state(tmp_path), "ctmon", "runs")
    os.makedirs(runs)
    os.chmod(runs, 0o777)
    script, marker = marker_script(str(tmp_path))
    out = ctmon("record", script, env=env_with(XDG_STATE_HOME=_state(tmp_path)))
    one_line_containing(out, runs, "writable by other users")
    assert not os.path.exists(marker)


def test_state_dir_symlinked_to_another_users_directory_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    if os.getuid() != 0:
        pytest.skip("another user's directory needs root (chown)")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    os.makedirs(os.path.join(_state(tmp_path), "ctmon"))
    runs = os.path.join(_state(tmp_path), "ctmon", "runs")
    os.symlink(str(theirs), runs)
    script, marker = marker_script(str(tmp_path))
    out = ctmon("record", script, env=env_with(XDG_STATE_HOME=_state(tmp_path)))
    one_line_containing(out, runs, "belongs to another user")
    assert not os.path.exists(marker)


def test_state_dir_symlinked_to_our_own_directory_is_used(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ours = tmp_path / "elsewhere"
    ours.mkdir(mode=0o700)
    os.makedirs(os.path.join(_state(tmp_path), "ctmon"))
    os.symlink(str(ours), os.path.join(_state(tmp_path), "ctmon", "runs"))
    out = ctmon("record", "-q", JOB, env=env_with(XDG_STATE_HOME=_state(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert [p for p in os.listdir(ours) if p.endswith(".jsonl")]


def test_files_ctmon_names_are_created_never_written_through(tmp_path) -> None:  # type: ignore[no-untyped-def]
    victim = tmp_path / "precious"
    victim.write_text("keep me\n")
    planted = tmp_path / "20261123-000000-job-1.jsonl"
    os.symlink(str(victim), planted)
    with pytest.raises(files.FileRefused, match="already exists"):
        files.open_new(str(planted))
    log = tmp_path / "r.output.log"
    os.symlink(str(victim), log)
    with pytest.raises(files.FileRefused, match="symlink"):
        files.open_beside(str(log))
    assert victim.read_text() == "keep me\n"


def test_runtime_dir_falls_back_when_socket_paths_would_not_fit(monkeypatch, long_tmpdir) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("CTMON_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(runtime.tempfile, "gettempdir", lambda: long_tmpdir)
    sid = f"{time.strftime('%Y%m%d-%H%M%S')}-a_rather_long_script_nam-4194304"
    d = runtime.session_dir(sid)
    try:
        assert d == os.path.join(runtime.fallback_runtime_dir(), sid)
        assert all(len(os.path.join(d, n)) <= runtime.SOCKET_PATH_MAX for n in runtime.SOCKET_NAMES)
    finally:
        os.rmdir(d)


def test_output_that_is_a_fifo_is_refused_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    fifo = str(tmp_path / "r.jsonl")
    os.mkfifo(fifo)
    script, marker = marker_script(str(tmp_path))
    one_line_containing(ctmon("record", "-o", fifo, script), f"ctmon: {fifo} is not a regular file")
    assert not os.path.exists(marker)


def test_attach_to_a_recording_being_written_fails_before_its_monitor_says_ready(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``attach`` takes the viewer socket's appearance as "ready": the lock is
    taken before it, so a refused recording is an error, not a dead monitor."""
    import fcntl

    from ctmon.launch.daemon import DaemonError, start_detached
    from ctmon.launch.spec import JobSpec

    rec = str(tmp_path / "busy.jsonl")
    script, marker = marker_script(str(tmp_path))
    with open(rec, "w") as holder:
        holder.write(EARLIER)
        holder.flush()
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(DaemonError, match=f"{rec} is being written by another ctmon \\(pid {os.getpid()}\\)"):
            start_detached(JobSpec(mode="script", target=script, cwd=str(tmp_path)), rec)
    assert not os.path.exists(marker)
    with open(rec) as f:
        assert f.read() == EARLIER
