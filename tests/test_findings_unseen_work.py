"""Work of the job that ctmon cannot see is counted, or said; never silent.

Processes started without a fresh interpreter (the ``fork`` start method:
``start_processes(..., start_method="fork")``, a fork-context
``multiprocessing.Process``) inherit the agent from the job's process. They
used to record nothing at all: 0 compiles, no ranks, no note. A forked rank
now claims its rank at ``init_process_group``, as a spawned one does, and
its counts equal its own part of PyTorch's TORCH_TRACE. A child that
compiles and is never a rank (forked or spawned) says, at its exit, what
was left out. A fork never hangs the child on a lock ctmon's thread held.

And what ctmon sees it does not overstate: new code's first run in a
shared Inductor cache directory misses every graph there, which is said,
not warned about.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types

import pytest
from helpers import ROOT, env_with, read_torch_trace, record, workload
from test_whole_ranks import free_port

SCRIPT = workload("fork_ranks.py")


def _run(tmp_path_factory, name: str, args: list[str]) -> types.SimpleNamespace:
    base = tmp_path_factory.mktemp(name)
    env = {"MASTER_PORT": str(free_port()), "MASTER_ADDR": "127.0.0.1"}
    run = record(base, [SCRIPT, *args], options=["-q"], extra_env=env, timeout=240)
    assert run.returncode == 0, run.proc.stdout[-2000:] + run.proc.stderr[-3000:]
    return types.SimpleNamespace(run=run, rep=run.report(), out=run.proc.stdout)


def _compiles_by_pid(trace_dir: str) -> dict[int, int]:
    """Compiles in PyTorch's own TORCH_TRACE, by the pid in each record's
    prefix: a child forked after the parent opened its trace file writes
    into that same file."""
    counts: dict[int, int] = {}
    for name in os.listdir(trace_dir):
        with open(os.path.join(trace_dir, name), encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.startswith("\t") and '{"compilation_metrics"' in line:
                    pid = int(line.split()[2])
                    counts[pid] = counts.get(pid, 0) + 1
    return counts


@pytest.fixture(scope="module")
def forked_ranks(tmp_path_factory):
    return _run(tmp_path_factory, "ranks", ["--start", "start_processes", "--group", "--parent-compiles"])


@pytest.mark.slow
def test_fork_started_ranks_count_what_their_trace_says(forked_ranks):
    rep, trace_dir = forked_ranks.rep, forked_ranks.run.trace_dir
    by_pid = _compiles_by_pid(trace_dir)
    ranks = rep["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1], rep
    for r in ranks:
        # the warm-up compiled before init_process_group, then the model
        assert r["compile"]["compiles"] == by_pid[r["pid"]] == 2, (r, by_pid)
        assert r["steps"]["count"] == 5 and r["world_size"] == 2
    # the parent's one compile, and every rank's
    assert rep["compile"]["compiles"] == read_torch_trace(trace_dir).compiles == 5
    assert by_pid[rep["pid"]] == 1
    assert not [n for n in rep["notes"] if n["level"] != "info"], rep["notes"]


@pytest.mark.slow
def test_a_forked_child_runs_no_thread_of_ctmon_before_it_compiles(forked_ranks):
    counts = re.findall(r"child \d threads before compiling: (\d+)", forked_ranks.out)
    assert counts == ["1", "1"], forked_ranks.out


def _unseen_notes(rep: dict) -> list[dict]:
    return [n for n in rep["notes"] if n["source"] == "capture" and "never found it a rank" in n["message"]]


@pytest.mark.slow
@pytest.mark.parametrize("start", ["process", "spawn"])
def test_a_child_that_compiles_and_is_no_rank_says_what_was_left_out(tmp_path_factory, start):
    job = _run(tmp_path_factory, start, ["--start", start])
    rep, by_pid = job.rep, _compiles_by_pid(job.run.trace_dir)
    assert rep["ranks"] == [] and rep["compile"]["compiles"] == 0
    notes = _unseen_notes(rep)
    assert len(notes) == 2, rep["notes"]
    how = "forked" if start == "process" else "started"
    for n in notes:
        m = re.match(rf"process (\d+) \({how} by process (\d+)\) compiled (\d+) time", n["message"])
        assert m is not None, n
        assert int(m.group(2)) == rep["pid"] and int(m.group(3)) == by_pid[int(m.group(1))] == 2, (n, by_pid)
        assert n["level"] == "warning"
    # said where a reader looks: record's summary and report's text
    assert "never found it a rank of a process group" in " ".join(job.run.proc.stderr.split())
    text = subprocess.run(
        [sys.executable, "-m", "ctmon", "report", job.run.recording], capture_output=True, text=True, env=env_with()
    )
    assert " ".join(text.stdout.split()).count("never found it a rank") == 2, text.stdout


@pytest.mark.slow
def test_a_fork_during_an_import_of_ctmons_thread_does_not_hang_the_child(tmp_path):
    out = subprocess.run(
        [sys.executable, workload("fork_during_import.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env_with(),
        cwd=ROOT,
        timeout=120,
    )
    assert out.stdout.strip() == "child ok", out.stdout + out.stderr[-2000:]


@pytest.mark.slow
def test_new_code_in_a_shared_cache_dir_is_told_not_warned(tmp_path):
    """Two different programs share one TORCHINDUCTOR_CACHE_DIR (a team's):
    the second one's first run finds the first one's entries and none of
    its own graphs. That is the normal case: info, never a warning."""
    shared = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "team-cache")}
    cache_runs = workload(os.path.join("findings", "cache_runs.py"))
    other = record(tmp_path / "other", [cache_runs], options=["-q"], extra_env=shared, torch_trace=False)
    assert other.returncode == 0, other.proc.stderr[-2000:]
    run = record(tmp_path / "new", [cache_runs, "--width", "17"], options=["-q"], extra_env=shared)
    assert run.returncode == 0, run.proc.stderr[-2000:]
    rep = run.report()
    trace = read_torch_trace(run.trace_dir)
    assert rep["cache"]["fx_graph"]["miss"] == trace.fx_miss >= 2 and trace.fx_hit == 0
    assert rep["cache"]["entries_at_start"]["fx_graph"] >= 2
    (f,) = [f for f in rep["findings"] if f["id"] == "cache:expected-hits"]
    assert f["severity"] == "info", f
    assert "first run of new code" in f["detail"]
    assert "cache missed" not in run.proc.stderr  # record's summary names warnings only
