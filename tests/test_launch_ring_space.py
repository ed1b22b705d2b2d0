"""No room for the step ring: the job runs to its end and every step is counted.

The step ring is an 8 MiB file in the runtime directory, mapped into the job.
Where the filesystem cannot hold it (a small or full tmpfs, an Inductor cache
filling /tmp) or a file-size limit forbids it (``ulimit -f``), the agent
makes the ring in its own memory and sends the boundaries on its socket
instead, and the user is told why: in ``ctmon record``'s summary, in ``ctmon
report`` (text and JSON) and among the TUI's alerts. Before, a ring on a
full tmpfs killed the job with SIGBUS at the first step whose page the
filesystem could not supply, and a ring refused by ``ulimit -f`` lost every
step without a word.

Real subprocesses throughout: ``ctmon record`` of tests/workloads/faults_job.py,
a tmpfs mounted (and filled) by the test.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import ROOT, WORKLOADS, ctmon, env_with

from ctmon.report.build import build_report
from ctmon.store import Session
from ctmon.tui.panels.alerting import alerts
from ctmon.wire.ring import DEFAULT_CAPACITY, StepRing

JOB = os.path.join(WORKLOADS, "faults_job.py")
RING_BYTES = (8 + DEFAULT_CAPACITY) * 8
FREE_LEFT = 256 << 10  # room for the session's own small files, not for a ring


@pytest.fixture
def full_tmpfs() -> Iterator[str]:
    """A 4 MiB tmpfs (at a short path: sockets live in it) filled but for
    FREE_LEFT bytes."""
    mnt = tempfile.mkdtemp(prefix="ctrs-")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt], capture_output=True, text=True)
    if p.returncode != 0:
        os.rmdir(mnt)
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {p.stderr.strip()}")
    try:
        _fill(os.path.join(mnt, "filler"), FREE_LEFT)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)
        os.rmdir(mnt)


@pytest.fixture
def runtime_dir() -> Iterator[str]:
    """A runtime directory at a short path (sockets live in it)."""
    d = tempfile.mkdtemp(prefix="ctrs-")
    try:
        yield os.path.join(d, "run")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _fill(path: str, leave: int) -> None:
    """Fill the filesystem (unbuffered: nothing left to flush at close), then
    give back ``leave`` bytes."""
    chunk = bytes(1 << 16)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)


def record(
    tmp: str, runtime_dir: str, steps: int, preexec: Any = None, **env: str
) -> tuple[subprocess.CompletedProcess[str], str]:
    rec = os.path.join(tmp, "rec.jsonl")
    p = subprocess.run(
        [sys.executable, "-m", "ctmon", "record", "-o", rec, JOB, "--steps", str(steps)],
        env=env_with(CTMON_RUNTIME_DIR=runtime_dir, **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=preexec,
    )
    return p, rec


def events_of(rec: str) -> list[dict[str, Any]]:
    with open(rec, "rb") as f:
        return [json.loads(line) for line in f if line.strip()]


def assert_told(rec: str, summary: str, reason: str, fix: str) -> None:
    """The reason is in the record summary, the text and JSON reports, and
    the TUI's alerts: once per output, as a warning."""
    assert "ctmon: WARNING: cannot make the step ring in " in summary, summary
    assert f"({reason})" in summary and fix in summary, summary
    text = ctmon("report", rec)
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    assert "warning: cannot make the step ring in" in flat and f"({reason})" in flat, text.stdout
    js = json.loads(ctmon("report", rec, "--json").stdout)
    said = [n for n in js["notes"] if "step ring" in n["message"]]
    assert len(said) == 1 and said[0]["level"] == "warning" and reason in said[0]["message"], js["notes"]
    shown = [e for e in alerts(Session().apply_all(events_of(rec))) if "step ring" in e.text]
    assert len(shown) == 1 and reason in shown[0].text, shown


def assert_every_step(rec: str, steps: int) -> dict[str, Any]:
    events = events_of(rec)
    hello = next(e for e in events if e["kind"] == "process")
    assert "step_ring" not in hello and hello.get("step_ring_error"), hello
    report = build_report(Session().apply_all(events))
    assert report["steps"]["count"] == steps, report["steps"]
    assert report["steps"]["source"] == "api"
    assert events[-1]["kind"] == "exit" and events[-1]["code"] == 0, events[-1]
    return report


@pytest.mark.slow
def test_ring_on_a_full_tmpfs_neither_kills_the_job_nor_loses_a_step(tmp_path, full_tmpfs) -> None:  # type: ignore[no-untyped-def]
    """The runtime directory's filesystem has 256 KiB left, the ring needs
    8 MiB: the ring is made in the job's memory instead, the job exits 0,
    every step is in the recording. (Before: SIGBUS, exit 135, after the
    ~32,000 steps the free pages held.)"""
    n = 50_000
    p, rec = record(str(tmp_path), os.path.join(full_tmpfs, "run"), n)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "SIGBUS" not in p.stderr
    assert_every_step(rec, n)
    assert f"ctmon: {n} steps (api)" in p.stderr, p.stderr
    assert_told(rec, p.stderr, "No space left on device", "free space there or set CTMON_RUNTIME_DIR")
    # the refused ring left no file behind to eat what space is left
    assert not [f for f in os.listdir(full_tmpfs) if f != "filler" and f != "run"], os.listdir(full_tmpfs)


def _file_size_limit(limit: int) -> Any:
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


@pytest.mark.slow
def test_ring_refused_by_ulimit_f_steps_still_recorded_and_reason_shown(tmp_path, runtime_dir) -> None:  # type: ignore[no-untyped-def]
    """``ulimit -f`` of 4 MiB (the recording fits, the 8 MiB ring does not):
    every step is recorded, and the reason is shown with its fix. (Before:
    no step at all, and nothing said.)"""
    n = 20_000
    p, rec = record(str(tmp_path), runtime_dir, n, _file_size_limit(4 << 20))
    assert p.returncode == 0, p.stderr[-3000:]
    assert_every_step(rec, n)
    assert_told(rec, p.stderr, "File too large", "raise the file-size limit (ulimit -f)")


@pytest.mark.slow
def test_ringless_steps_lost_in_memory_are_counted_as_drops(tmp_path, full_tmpfs) -> None:  # type: ignore[no-untyped-def]
    """A 1,024-slot ring (three pages) on a tmpfs with two pages left, so it
    is made in memory; 200,000 steps in a fraction of a second, while the
    sender thread reads the ring four times a second: the boundaries it lost
    are counted, and the step count is still whole."""
    _fill(os.path.join(full_tmpfs, "filler2"), 8 << 10)
    n = 200_000
    p, rec = record(str(tmp_path), os.path.join(full_tmpfs, "run"), n, CTMON_STEP_RING_CAPACITY="1024")
    assert p.returncode == 0, p.stderr[-3000:]
    report = assert_every_step(rec, n)
    received = sum(len(e["ns"]) for e in events_of(rec) if e["kind"] == "steps")
    dropped = report["drops"]["steps"]
    assert dropped > 0 and received + dropped == n, (received, dropped)
    assert f"ctmon: dropped {dropped} step" in p.stderr, p.stderr


def test_create_on_a_full_filesystem_raises_and_leaves_no_file(full_tmpfs) -> None:  # type: ignore[no-untyped-def]
    path = os.path.join(full_tmpfs, "steps.ring")
    with pytest.raises(OSError) as e:
        StepRing.create(path)
    assert e.value.errno == errno.ENOSPC
    assert not os.path.exists(path)
    # what fits is reserved whole: 16 KiB of slots, every page allocated
    small = StepRing.create(path, 2048)
    try:
        assert os.stat(path).st_blocks * 512 >= (8 + 2048) * 8
    finally:
        small.close()
