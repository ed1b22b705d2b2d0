"""Ranks of other launchers: ``accelerate launch``, ``mp.spawn`` and a
Lightning-style re-exec of the script.

``accelerate launch`` sets RANK for each worker, as torchrun does (its
multi-process launcher runs torch's elastic agent in its own process); the
test runs it with ``--multi_gpu``, which on a machine without GPUs still
starts one process per rank, for gloo. ``mp.spawn`` and a re-exec set no
RANK in the environment: RANK in the environment: each process learns its rank when it
calls ``init_process_group``. The workload compiles a warm-up function on
each rank *before* that, and trains under DDP after it, with a spawned
DataLoader worker (a fresh interpreter like a rank, but never one). Each
rank's counts must equal its own TORCH_TRACE file, the compile from before
the rank was known included; the spawning process and the DataLoader workers
are no ranks; and the ranks, which compiled the same, do not diverge.
"""

from __future__ import annotations

import glob
import os
import types

import pytest
from helpers import read_torch_trace, record, workload
from test_whole_ranks import free_port

from ctmon.read.recording import read_recording

pytestmark = pytest.mark.slow  # ranks started by real launchers

SCRIPT = workload("spawn_ranks.py")
DDP_SCRIPT = workload("ddp_ranks.py")


def _run(tmp_path_factory, launch: str) -> types.SimpleNamespace:
    base = tmp_path_factory.mktemp(launch)
    env = {"MASTER_PORT": str(free_port()), "MASTER_ADDR": "127.0.0.1"}
    run = record(base, [SCRIPT, "--launch", launch], options=["-q"], extra_env=env, timeout=240)
    assert run.returncode == 0, run.proc.stderr[-3000:]
    hellos = [ev for ev in read_recording(run.recording) if type(ev).__name__ == "Process"]
    return types.SimpleNamespace(run=run, rep=run.report(), hellos=hellos)


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    return _run(tmp_path_factory, "spawn")


@pytest.fixture(scope="module")
def reexec(tmp_path_factory):
    return _run(tmp_path_factory, "reexec")


def test_accelerate_launch_ranks_count_what_their_trace_files_say(tmp_path):
    pytest.importorskip("accelerate")
    launcher = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    launcher += ["--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    env = {"HF_HOME": str(tmp_path / "hf")}  # accelerate reads (and may write) its config there
    run = record(tmp_path, ["--", *launcher, DDP_SCRIPT, "--diverge"], options=["-q"], extra_env=env, timeout=240)
    assert run.returncode == 0, run.proc.stderr[-3000:]
    rep = run.report()
    assert [r["rank"] for r in rep["ranks"]] == [0, 1] and rep["pid"] not in {r["pid"] for r in rep["ranks"]}
    for r in rep["ranks"]:
        trace = read_torch_trace(run.trace_dir, f"*_rank_{r['rank']}_*.log")
        got = r["compile"]
        assert (got["compiles"], got["recompiles"]) == (trace.compiles, trace.recompiles), (r, trace)
        assert r["steps"]["count"] == 6
    assert [r["compile"]["recompiles"] for r in rep["ranks"]] == [0, 1]
    (f,) = [f for f in rep["findings"] if f["rule"] == "rank-divergence"]
    assert f["severity"] == "critical" and "rank 1" in f["title"]


def _trace_of(trace_dir: str, pid: int) -> str:
    """The TORCH_TRACE file a process wrote: a trace started before the
    process group has no rank in its name, but each record's prefix carries
    the writer's pid (glog: level+date, time, pid, file:line)."""
    found = []
    for path in glob.glob(os.path.join(trace_dir, "*.log")):
        with open(path, encoding="utf-8", errors="replace") as f:
            if f.readline().split()[2:3] == [str(pid)]:
                found.append(os.path.basename(path))
    assert len(found) == 1, (pid, found, os.listdir(trace_dir))
    return found[0]


def _check_ranks_against_traces(job: types.SimpleNamespace) -> None:
    ranks = job.rep["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        trace = read_torch_trace(job.run.trace_dir, _trace_of(job.run.trace_dir, r["pid"]))
        got = r["compile"]
        # the warm-up compiled before init_process_group, then the model
        assert got["compiles"] == trace.compiles == 2, (r, trace)
        assert (got["recompiles"], got["graph_breaks"]) == (trace.recompiles, trace.graph_breaks)
        assert r["steps"]["count"] == 5 and r["world_size"] == 2
    total = read_torch_trace(job.run.trace_dir)
    assert job.rep["compile"]["compiles"] == total.compiles == 4
    assert not [f for f in job.rep["findings"] if f["rule"].startswith("rank-")], job.rep["findings"]


def test_spawned_ranks_count_what_their_trace_files_say(spawned):
    _check_ranks_against_traces(spawned)


def test_the_spawning_process_and_spawned_dataloader_workers_are_not_ranks(spawned):
    pids = {r["pid"] for r in spawned.rep["ranks"]}
    assert len(pids) == 2 and spawned.rep["pid"] not in pids
    # one hello each from the script's process and the two ranks: the
    # DataLoader workers (spawned, so they ran the start-up hook) sent nothing
    assert len(spawned.hellos) == 3, spawned.hellos
    assert sorted(h.rank for h in spawned.hellos if h.rank is not None) == [0, 1]
    assert {h.ppid for h in spawned.hellos if h.rank is not None} == {spawned.rep["pid"]}


def test_reexecuted_ranks_count_what_their_trace_files_say(reexec):
    _check_ranks_against_traces(reexec)


def test_the_process_that_reexecutes_the_script_is_rank_0_from_its_start(reexec):
    ranks = reexec.rep["ranks"]
    assert ranks[0]["pid"] == reexec.rep["pid"] and ranks[0]["primary"]
    assert ranks[1]["local_rank"] == 1
    # its hello at start-up (no rank yet), then again as rank 0; the child's
    assert [h.rank for h in reexec.hellos if h.pid == reexec.rep["pid"]] == [None, 0]
    assert len(reexec.hellos) == 3


def _site_probe():
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ctmon", "agent", "site")
    with open(os.path.join(path, "sitecustomize.py")) as f:
        src = f.read().replace("\n_main()\n", "\n")
    mod = types.ModuleType("ctmon_site_probe")
    mod.__file__ = os.path.join(path, "sitecustomize.py")
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


def test_which_quiet_children_may_still_become_ranks(monkeypatch):
    mod = _site_probe()
    for k in ("RANK", "WORLD_SIZE", "CTMON_AGENT_RANK"):
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    monkeypatch.setenv("CTMON_AGENT_SOCKET", "/x.sock")
    monkeypatch.setenv("CTMON_AGENT_PID", "1")
    monkeypatch.setattr(mod.sys, "orig_argv", ["python", "-c", "from multiprocessing.spawn import spawn_main"])
    assert not mod.monitored() and mod.may_become_rank()  # a spawned child of the job's process
    monkeypatch.setattr(mod.sys, "orig_argv", ["python", "/t/torch/_inductor/compile_worker/__main__.py"])
    assert not mod.may_become_rank()  # Inductor's compile workers never are
    monkeypatch.setattr(mod.sys, "orig_argv", ["python", "train.py"])
    monkeypatch.setenv("CTMON_AGENT_RANK", "3")
    assert not mod.may_become_rank()  # a child of a rank (its DataLoader worker) is not another
    monkeypatch.delenv("CTMON_AGENT_SOCKET")
    monkeypatch.delenv("CTMON_AGENT_RANK")
    assert not mod.may_become_rank()  # not under ctmon at all
