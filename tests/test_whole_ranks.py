"""A job of many ranks: every rank seen, counted on its own, compared.

End to end, ``ctmon record -m torch.distributed.run --nproc_per_node 2`` of a
data-parallel training (gloo on the CPU, the model compiled on every rank,
DataLoader workers on every rank): each rank's counts equal that rank's own
TORCH_TRACE file and the job's totals their sum; the launcher and the
DataLoader workers are not ranks; a recompile on rank 1 alone is a critical
finding naming it. The store's routing is also driven directly with events
of two ranks whose compile ids collide, as real ranks' do.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import types
from typing import Any

import pytest
from helpers import ctmon, read_torch_trace, record, workload

from ctmon.findings.current import findings_of
from ctmon.read.recording import read_recording
from ctmon.store import Session

SCRIPT = workload("ddp_ranks.py")
COMPILE_KEYS = ("compiles", "recompiles", "graph_breaks", "limit_hits")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    base = tmp_path_factory.mktemp("ranks")
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    run = record(base, [*launcher, "--master_port", str(free_port()), SCRIPT, "--diverge"], options=["-q"], timeout=240)
    assert run.returncode == 0, run.proc.stderr[-3000:]
    return types.SimpleNamespace(run=run, rep=run.report())


@pytest.mark.slow
def test_every_rank_counts_what_its_own_trace_file_says(job):
    ranks = job.rep["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        trace = read_torch_trace(job.run.trace_dir, f"*_rank_{r['rank']}_*.log")
        assert trace.files == 1 and trace.compiles >= 1
        got = r["compile"]
        assert (got["compiles"], got["recompiles"], got["graph_breaks"], got["limit_hits"]) == (
            trace.compiles,
            trace.recompiles,
            trace.graph_breaks,
            trace.limit_hits,
        ), (r, trace)
        assert r["cache"]["fx_graph"] == {"hit": trace.fx_hit, "miss": trace.fx_miss, "bypass": trace.fx_bypass}
        assert r["world_size"] == 2 and r["local_rank"] == r["rank"] and r["host"] == socket.gethostname()
        assert r["steps"]["count"] == 6 and r["steps"]["source"] == "optimizer"
    # the job's totals are the ranks' sums, and equal every trace file together
    total = read_torch_trace(job.run.trace_dir)
    assert job.rep["compile"]["compiles"] == total.compiles == sum(r["compile"]["compiles"] for r in ranks)
    assert job.rep["compile"]["recompiles"] == total.recompiles == 1
    assert (ranks[0]["compile"]["recompiles"], ranks[1]["compile"]["recompiles"]) == (0, 1)
    assert job.rep["exit_code"] == 0  # the launcher's


@pytest.mark.slow
def test_the_same_runs_torch_trace_reads_as_its_recording_per_rank(job):
    """PyTorch's own trace of this very run, read by ``ctmon report DIR``
    (tests/test_read_torch_trace_input.py): per rank, what the live recording says."""
    out = ctmon("report", job.run.trace_dir, "--json")
    assert out.returncode == 0, out.stderr
    traced = json.loads(out.stdout)

    def facts(r: dict) -> tuple:
        return (r["rank"], *(r["compile"][k] for k in COMPILE_KEYS), r["cache"]["fx_graph"])

    assert [facts(r) for r in traced["ranks"]] == [facts(r) for r in job.rep["ranks"]]
    assert {(b["file"], b["line"]) for b in traced["graph_breaks"]} == {
        (b["file"], b["line"]) for b in job.rep["graph_breaks"]
    }
    assert [f["rule"] for f in traced["findings"] if f["rule"] == "rank-divergence"] == ["rank-divergence"]


@pytest.mark.slow
def test_the_launcher_and_dataloader_workers_are_not_ranks(job):
    ranks = job.rep["ranks"]
    pids = {r["pid"] for r in ranks}
    assert len(pids) == 2 and job.rep["pid"] not in pids  # the job's pid is the launcher's
    assert ranks[0]["primary"] and not ranks[1]["primary"]
    # one hello per process that ran the agent: the launcher and the two ranks,
    # not the DataLoader worker of each rank
    hellos = [ev for ev in read_recording(job.run.recording) if type(ev).__name__ == "Process"]
    assert len(hellos) == 3, hellos
    assert sorted(h.rank for h in hellos if h.rank is not None) == [0, 1]


@pytest.mark.slow
def test_a_recompile_on_one_rank_is_a_critical_finding_naming_it(job):
    (f,) = [f for f in job.rep["findings"] if f["rule"] == "rank-divergence"]
    assert f["severity"] == "critical" and job.rep["findings"][0] == f
    assert f["title"] == "Ranks compiled Sequential differently: 2× on rank 1; 1× on rank 0"
    assert f["file"] == SCRIPT
    # the loop's 0-based `step == 3` is the optimizer's 4th step: steps are numbered as the optimizer counts them
    assert f["evidence"][0].startswith("rank 1: 2 compile(s), 1 recompile(s) — 0/1 at step 4: ")
    assert "expected 8, actual 5" in f["evidence"][0]
    assert f["evidence"][1] == "rank 0: 1 compile(s), 0 recompile(s)"
    assert "drop_last=True" in f["fix"] and "collective" in f["detail"]


async def _until(pilot: Any, app: Any, *texts: str, tries: int = 300) -> str:
    """The screen once it shows every one of ``texts`` (or as it is after ``tries`` pauses)."""
    from ctmon.tui.capture import screen_text

    shown = ""
    for _ in range(tries):
        await pilot.pause(0.05)
        shown = screen_text(app)
        if all(t in shown for t in texts):
            break
    return shown


@pytest.mark.slow
def test_the_screen_lists_the_ranks_and_shows_one_when_chosen(job):
    import asyncio

    from ctmon.read.feeds import RecordingFeed
    from ctmon.tui.app import CtmonApp
    from ctmon.tui.capture import screen_text
    from ctmon.tui.testing import wait_loaded

    async def screens() -> tuple[str, str, str]:
        app = CtmonApp(RecordingFeed(job.run.recording), replay=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_loaded(pilot)
            before = screen_text(app)
            await pilot.press("r")
            listed = await _until(pilot, app, "all ranks (the job", "r0 ", "r1 ")
            await pilot.press("down", "down", "enter")  # all ranks -> rank 0 -> rank 1
            return before, listed, await _until(pilot, app, "Frames · 1 · rank 1", "showing rank 1 (r)")

    before, listed, chosen = asyncio.run(screens())
    assert "2 ranks" in before and "showing" not in before
    assert "all ranks (the job" in listed
    # '*r0' when that rank is the slowest: which one is depends on this machine's timing
    lines = {m.group(1): line for line in listed.splitlines() if (m := re.search(r"[ *]r(\d+) ", line))}
    assert {"0", "1"} <= set(lines), listed
    r0, r1 = lines["0"], lines["1"]
    assert "ended" in r0 and "6 st" in r0 and "1 c 0 rc 0 b" in r0, r0
    assert "2 c 1 rc 0 b" in r1, r1
    assert "showing rank 1 (r)" in chosen
    assert "Frames · 1 · rank 1" in chosen and "Compilation · rank 1" in chosen
    assert "2 compiles" in chosen or "2 compile" in chosen, chosen


# ------------------------------------------------------------ the store, directly


def _hello(rank: int, local: int, pid: int) -> dict:
    return {"kind": "process", "t": 1.0, "pid": pid, "rank": rank, "local_rank": local, "world_size": 2, "host": "h"}


def _compile(rank: int | None, cid: str, reason: str | None = None, t: float = 2.0) -> list[dict]:
    start = {"kind": "compile_start", "t": t, "compile_id": cid, "frame_id": 0, "name": "f", "file": "/t.py", "line": 3}
    end = {
        "kind": "compile",
        "t": t + 0.1,
        "compile_id": cid,
        "frame_id": 0,
        "co_name": "f",
        "co_filename": "/t.py",
        "co_firstlineno": 3,
        "entire_frame_compile_time_s": 0.1,
        "has_guarded_code": True,
    }
    if reason:
        end["recompile_reason"] = reason
    if rank is not None:
        start["rank"] = end["rank"] = rank
    return [start, end]


def test_ranks_with_the_same_compile_ids_keep_stores_of_their_own():
    from ctmon.report.build import build_report

    s = Session()
    s.apply({"kind": "process", "t": 0.5, "pid": 10})  # the launcher
    for ev in [_hello(1, 1, 12), _hello(0, 0, 11)]:  # rank 1 says hello first
        s.apply(ev)
    for ev in _compile(1, "0/0") + _compile(0, "0/0") + _compile(1, "0/1", "tensor 'x' size mismatch", t=3.0):
        s.apply(ev)
    assert s.primary_rank == 0 and s.meta.pid == 10
    assert [len(s.ranks[r].session.compile.compiles) for r in (0, 1)] == [1, 2]
    assert len(s.compile.compiles) == 1  # the job's own view is rank 0's
    rep = build_report(s)
    assert rep["compile"]["compiles"] == 3 and rep["compile"]["recompiles"] == 1 and rep["compile"]["frames"] == 1
    assert [r["pid"] for r in rep["ranks"]] == [11, 12]
    (f,) = [f for f in rep["findings"] if f["rule"] == "rank-divergence"]
    assert f["title"] == "Ranks compiled f differently: 2× on rank 1; 1× on rank 0"
    # the same events through the bulk path give the same store
    bulk = Session().apply_all(
        [{"kind": "process", "t": 0.5, "pid": 10}, _hello(1, 1, 12), _hello(0, 0, 11)]
        + _compile(1, "0/0")
        + _compile(0, "0/0")
        + _compile(1, "0/1", "tensor 'x' size mismatch", t=3.0)
    )
    assert build_report(bulk)["ranks"] == rep["ranks"]


def test_a_rank_no_process_declared_is_the_jobs_own_and_one_process_job_has_no_ranks():
    from ctmon.report.build import build_report

    s = Session()
    s.apply({"kind": "process", "t": 0.5, "pid": 10})
    for ev in _compile(0, "0/0"):  # PyTorch's trace says rank 0 in a one-process group
        s.apply(ev)
    assert s.ranks == {} and len(s.compile.compiles) == 1
    assert build_report(s)["ranks"] == []


def test_a_cache_hit_on_one_rank_and_a_miss_on_another_is_critical():
    s = Session()
    for ev in [_hello(0, 0, 11), _hello(1, 1, 12)]:
        s.apply(ev)
    for rank, result in ((0, "hit"), (1, "miss")):
        s.apply({"kind": "cache", "t": 2.0, "cache": "fx_graph", "result": result, "rank": rank, "key": "k"})
    (f,) = [f for f in findings_of(s) if f.id == "rank-divergence:cache:fx_graph"]
    assert f.severity == "critical" and f.title == "FX graph cache hit on rank 0 and missed on rank 1"


def test_a_recompile_one_rank_is_still_compiling_is_critical_before_it_ends():
    """The other ranks wait in a collective; if the job is killed mid-compile
    (NCCL's watchdog), the open recompile is the only trace of the cause."""
    s = Session()
    for ev in [_hello(0, 0, 11), _hello(1, 1, 12), *_compile(0, "0/0"), *_compile(1, "0/0")]:
        s.apply(ev)
    reasons = {"kind": "recompile_reasons", "t": 10.0, "compile_id": "0/1", "frame_id": 0, "rank": 1}
    s.apply({**reasons, "reasons": ["tensor 'x' size mismatch at index 0. expected 64, actual 48"]})
    s.apply({**_compile(1, "0/1", t=10.0)[0]})  # started, not ended
    tick = {"kind": "sample", "t": 12.0}
    s.apply(tick)  # two seconds in: ranks a moment apart are not divergent yet
    assert not [f for f in findings_of(s) if f.rule == "rank-divergence"]
    s.apply({**tick, "t": 16.0})
    (f,) = [f for f in findings_of(s) if f.rule == "rank-divergence"]
    assert f.severity == "critical"
    assert f.title == "Ranks compiled f differently: 2× on rank 1; 1× on rank 0 (rank 1 still compiling)"
    assert f.evidence[0] == (
        "rank 1: 2 compile(s), 1 recompile(s) (1 still compiling) — 0/1: still compiling after 6 s — "
        "tensor 'x' size mismatch at index 0. expected 64, actual 48"
    )
    # the same recompile on both ranks, a moment apart, is no divergence
    s.apply({**_compile(0, "0/1", t=13.0)[0]})
    assert not [f for f in findings_of(s) if f.rule == "rank-divergence"]


def test_a_rank_still_on_its_first_compile_has_not_compiled_less():
    """Ranks finish their first compiles a minute apart under max-autotune:
    the one still compiling is not a divergence (seen on two GPUs)."""
    s = Session()
    for ev in [_hello(0, 0, 11), _hello(1, 1, 12), *_compile(1, "0/0")]:
        s.apply(ev)
    s.apply({**_compile(0, "0/0", t=2.0)[0]})  # rank 0's first compile runs on
    s.apply({"kind": "sample", "t": 70.0})
    assert not [f for f in findings_of(s) if f.rule == "rank-divergence"]


def test_a_rank_of_a_launcher_claims_itself_and_its_children_stay_quiet(monkeypatch):
    # the hook's module without its start-up call (it would claim this test process)
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ctmon", "agent", "site")
    with open(os.path.join(path, "sitecustomize.py")) as f:
        src = f.read().replace("\n_main()\n", "\n")
    mod = types.ModuleType("ctmon_site_probe")
    mod.__file__ = os.path.join(path, "sitecustomize.py")
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    env = {"CTMON_AGENT_SOCKET": "/x.sock", "CTMON_AGENT_PID": "1"}  # the launcher (pid 1) claimed the job
    for k in ("RANK", "WORLD_SIZE", "CTMON_AGENT_RANK"):
        # set, then removed: so the test's end restores it (monitored() writes os.environ itself)
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert not mod.monitored()  # a child of the launcher that is no rank
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert mod.monitored()  # a rank the launcher started
    assert os.environ["CTMON_AGENT_PID"] == str(os.getpid()) and os.environ["CTMON_AGENT_RANK"] == "1"
    monkeypatch.setenv("CTMON_AGENT_PID", "999999")  # as its DataLoader worker sees it
    assert not mod.monitored()


def _steps(rank: int, t: float, n: int, ms: float = 10.0) -> dict:
    return {"kind": "steps", "t": t, "src": "optimizer", "i0": 0, "ns": [0] + [int(ms * 1e6)] * (n - 1), "rank": rank}


def test_each_rank_is_said_to_step_compile_wait_or_stall():
    from ctmon.store.rank_status import rank_statuses

    s = Session()
    s.apply({"kind": "process", "t": 0.5, "pid": 10})
    for ev in [_hello(0, 0, 11), _hello(1, 1, 12), _hello(2, 2, 13)]:
        s.apply(ev)
    for r in (0, 1, 2):
        s.apply(_steps(r, 10.0, 20))  # steps end at 10.19 s
    start = {"kind": "compile_start", "t": 10.3, "compile_id": "0/1", "frame_id": 0, "name": "forward", "rank": 1}
    s.apply(start)
    by = {x.rank: x for x in rank_statuses(s, now=10.5)}
    assert (by[0].state, by[1].state) == ("stepping", "compiling")
    assert by[1].detail == "forward for 0 s"
    by = {x.rank: x for x in rank_statuses(s, now=22.3)}  # 12 s later: rank 1 still compiling
    assert by[1].detail == "forward for 12 s"
    assert by[0].state == "waiting" and by[0].detail == "12 s, for rank 1 (compiling forward)"
    # the header's cheaper reading (no median step) tells the same states
    quick = rank_statuses(s, now=22.3, figures=False)
    assert [x.state for x in quick] == [by[r].state for r in (0, 1, 2)] and quick[0].p50_ms is None
    # the compile ends; rank 1 steps on, rank 2 never does: stuck with nothing compiling
    end = {"kind": "compile", "t": 30.0, "compile_id": "0/1", "frame_id": 0, "rank": 1, "has_guarded_code": True}
    s.apply(end)
    s.apply({**_steps(1, 30.1, 2), "i0": 20})
    s.apply({**_steps(0, 30.1, 2), "i0": 20})
    by = {x.rank: x for x in rank_statuses(s, now=31.0)}
    assert (by[0].state, by[1].state, by[2].state) == ("stepping", "stepping", "stalled")
    assert by[2].detail == "no step for 21 s, nothing compiling"
    assert [x.steps for x in by.values()] == [22, 22, 20]
    # rank 2's process goes; the job runs on
    s.apply({"kind": "process_end", "t": 32.0, "pid": 13, "rank": 2})
    by = {x.rank: x for x in rank_statuses(s, now=35.0)}
    assert (by[2].state, by[2].detail) == ("exited", "3 s ago")
    s.apply(_hello(2, 2, 13))  # the same pid says hello again: it exec'd, it lives
    assert {x.rank: x.state for x in rank_statuses(s, now=35.0)}[2] != "exited"


def test_a_rank_compiling_its_backward_graph_is_compiling_not_stalled():
    """The backward graph compiles lazily at the first backward, after the
    frame's compile has ended: PyTorch's timer for it says it is under way."""
    from ctmon.store.rank_status import rank_statuses

    s = Session()
    for ev in [_hello(0, 0, 11), _hello(1, 1, 12), *_compile(0, "0/0"), *_compile(1, "0/0")]:
        s.apply(ev)
    for r in (0, 1):
        s.apply(_steps(r, 3.0, 5))
    phase = {"kind": "compile_phase", "compile_id": "0/0", "frame_id": 0, "phase": "backward", "rank": 1}
    s.apply({**phase, "t": 3.1, "ph": "B"})
    by = {x.rank: x for x in rank_statuses(s, now=20.0)}
    assert (by[1].state, by[1].detail) == ("compiling", "backward of f for 17 s")
    assert (by[0].state, by[0].detail) == ("waiting", "17 s, for rank 1 (compiling backward of f)")
    s.apply({**phase, "t": 21.0, "ph": "E"})
    s.apply({"kind": "bwd_compile", "t": 21.0, "compile_id": "0/0", "rank": 1, "duration_us": 17.9e6})
    assert {x.rank: x.state for x in rank_statuses(s, now=21.5)}[1] != "compiling"
    (rep,) = [rs for r, rs in s.ranks.items() if r == 1]
    assert rep.session.compile.phases.seconds == {"backward": pytest.approx(17.9)}


@pytest.mark.slow
def test_sixty_four_ranks_fit_an_80_by_24_terminal():
    import asyncio

    from ctmon.read.feeds import RecordingFeed
    from ctmon.tui.app import CtmonApp
    from ctmon.tui.testing import wait_loaded

    events = [{"kind": "session", "t": 1.0, "v": 1, "command": ["torchrun", "train.py"]}]
    events += [{**_hello(r, r % 8, 100 + r), "t": 1.0} for r in range(64)]
    events += [_steps(r, 2.0, 10, ms=10.0 + (30.0 if r == 37 else 0.0)) for r in range(64)]
    events += [{"kind": "exit", "t": 9.0, "code": 0}]

    async def screens(path: str) -> tuple[str, str]:
        app = CtmonApp(RecordingFeed(path), replay=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_loaded(pilot)
            await pilot.press("r")
            first = await _until(pilot, app, " r0 ")
            await pilot.press(*["down"] * 38)
            return first, await _until(pilot, app, "*r37 ")

    import json
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("".join(json.dumps(e) + "\n" for e in events))
    try:
        first, moved = asyncio.run(screens(f.name))
    finally:
        os.unlink(f.name)
    lines = first.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    assert " r0 " in first and " r63 " not in first  # a window of the 64, around the cursor
    assert "*r37 " in moved and " r63 " not in moved  # the slowest rank, marked; the window follows
    assert "Ranks · 64" in first


def test_each_ranks_gpu_memory_is_its_own_processes():
    from ctmon.report.build import build_report

    s = Session()
    for ev in [_hello(0, 0, 11), _hello(1, 1, 12)]:
        s.apply(ev)
    for t, mem0, mem1 in ((2.0, 1 << 30, 3 << 30), (3.0, 2 << 30, 1 << 30)):
        gpus = [
            {"index": 0, "pid_mem": {11: mem0, 12: mem1, 99: 5 << 30}},
            {"index": 1, "pid_mem": {12: 1 << 20}},  # rank 1 also touches a second GPU
        ]
        s.apply({"kind": "sample", "t": t, "gpus": gpus})
    rep = build_report(s)
    assert [r["gpu_mem_peak_bytes"] for r in rep["ranks"]] == [2 << 30, (3 << 30) + (1 << 20)]


@pytest.mark.slow
def test_a_killed_rank_is_named_with_its_signal_and_the_launchers_exit_is_ctmons(tmp_path):
    launcher = ["--", "torchrun", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    run = record(tmp_path, [*launcher, "--master_port", str(free_port()), SCRIPT, "--die"], torch_trace=False)
    assert run.returncode == 1  # torchrun's own exit code, passed through
    rep = run.report()
    assert rep["exit_code"] == 1
    by = {r["rank"]: r for r in rep["ranks"]}
    assert (by[1]["exit_code"], by[1]["exit_signal"]) == (-9, "SIGKILL")
    assert (by[0]["exit_code"], by[0]["exit_signal"]) == (-15, "SIGTERM")  # torchrun stopped it
    f = rep["findings"][0]
    assert f["id"] == "rank-failed" and f["severity"] == "critical"
    assert f["title"].startswith("Rank 1 was killed by SIGKILL (pid ")
    assert "out-of-memory killer" in f["detail"] and "stopped rank 0" in f["detail"]
    assert not [x for x in rep["findings"] if x["rule"] == "job-failed"]  # not torchrun's ChildFailedError
    # the supervisor saw rank 1's process go before the launcher gave up
    ends = [ev for ev in read_recording(run.recording) if type(ev).__name__ == "ProcessEnd"]
    assert ends and ends[0].rank == 1 and ends[0].pid == by[1]["pid"]


def test_the_launchers_failure_summary_is_read():
    from ctmon.store.launcher_failures import rank_failures

    text = """Failures:
[1]:
  time      : 2026-11-25_13:37:33
  host      : node-a
  rank      : 2 (local_rank: 0)
  exitcode  : 1 (pid: 41)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_13:37:33
  host      : node-b
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 42)  (SIGKILL)
"""
    first, other = rank_failures(text.splitlines())
    assert (first.rank, first.local_rank, first.exit_code, first.pid, first.signal, first.host, first.first) == (
        3,
        1,
        -9,
        42,
        "SIGKILL",
        "node-b",
        True,
    )
    assert (other.rank, other.exit_code, other.signal, other.first) == (2, 1, None, False)
    assert rank_failures(["rank      : 1 (local_rank: 1)", "a line"]) == []


def test_a_rank_aborted_by_nccls_watchdog_is_named_with_the_collective_it_waited_in():
    """torch 2.11's torchrun names the signal only on the traceback line; the
    watchdog's own line says which collective timed out, and after how long
    (the text of a real run on two GPUs)."""
    from ctmon.store.launcher_failures import rank_failures

    watchdog = (
        "[rank0]:[E1125 17:42:35.161893480 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=26, OpType=ALLREDUCE, NumelIn=16777216, NumelOut=16777216, Timeout(ms)=10000) "
        "ran for 10075 milliseconds before timing out."
    )
    summary = """Failures:
[1]:
  time      : 2026-11-25_17:43:36
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 905)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 905
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_17:43:36
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 904)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 904
"""
    first, other = rank_failures(summary.splitlines())
    assert (first.rank, first.signal, other.signal) == (0, "SIGABRT", "SIGTERM")
    s = Session()
    for ev in [_hello(0, 0, 904), _hello(1, 1, 905)]:
        s.apply(ev)
    for text in [watchdog, *summary.splitlines()]:
        s.apply({"kind": "output", "t": 5.0, "stream": "stderr", "data": text + "\n"})
    s.apply({"kind": "exit", "t": 6.0, "code": 1})
    (f,) = [f for f in findings_of(s) if f.rule == "rank-failed"]
    assert f.title == (
        "Rank 0 was aborted by NCCL's watchdog: its ALLREDUCE waited past the 10 s timeout (pid 904, localhost); "
        "the launcher then stopped the job"
    )
    assert "never reached the collective" in f.fix


@pytest.mark.slow
def test_a_launcher_that_runs_no_python_says_nothing_could_be_seen(tmp_path):
    run = record(tmp_path, ["--", "bash", "-c", "echo started; exit 3"], torch_trace=False)
    assert run.returncode == 3 and "started" in run.proc.stdout
    (f,) = [f for f in run.report()["findings"] if f["rule"] == "no-process-reported"]
    assert f["severity"] == "warning" and "bash -c echo started; exit 3" in f["detail"]
    # a Python program ctmon reaches reports, and the finding stays away
    ok = record(tmp_path / "py", ["--", sys.executable, "-c", "print('hi')"], torch_trace=False)
    assert ok.returncode == 0
    assert not [f for f in ok.report()["findings"] if f["rule"] == "no-process-reported"]


FAULTS = workload("rank_faults.py")


def _faulty_job(tmp_path: Any, flag: str) -> Any:
    launcher = ["--", "torchrun", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    return record(tmp_path, [*launcher, "--master_port", str(free_port()), FAULTS, flag], torch_trace=False)


@pytest.mark.slow
def test_a_rank_that_dies_at_import_is_named_with_its_exception_and_line(tmp_path):
    run = _faulty_job(tmp_path, "--import-error")
    assert run.returncode == 1
    rep = run.report()
    f = rep["findings"][0]
    assert f["id"] == "rank-failed" and f["severity"] == "critical"
    line = _marked_line(FAULTS, "RANK1-IMPORT")
    assert f["title"] == (
        "Rank 1 raised ModuleNotFoundError: No module named 'a_module_this_rank_lacks' "
        f"at {FAULTS}:{line}; the launcher then stopped the job"
    )
    assert (f["file"], f["line"]) == (FAULTS, line)
    # the end-of-run summary is that one line, not the launcher's traceback
    assert f"ctmon: CRITICAL: {f['title']}" in run.proc.stderr
    assert {r["rank"]: r["exit_code"] for r in rep["ranks"]}[1] == 1


@pytest.mark.slow
def test_a_rank_that_execs_a_program_that_is_not_python_gets_a_note(tmp_path):
    run = _faulty_job(tmp_path, "--exec")
    assert run.returncode == 0 and "rank 1 now a shell" in run.proc.stdout
    rep = run.report()
    by = {r["rank"]: r for r in rep["ranks"]}
    assert by[0]["compile"]["compiles"] == by[1]["compile"]["compiles"] == 1  # what it did before is kept
    (note,) = [n for n in rep["notes"] if n["level"] == "warning"]
    assert note["message"].startswith(f"rank 1 (pid {by[1]['pid']}) replaced itself with a program ctmon cannot follow")
    assert "/bin/sh -c sleep 2" in note["message"]
    assert "ctmon: WARNING: rank 1 (pid" in run.proc.stderr  # said at the end of the run
    assert "Notes\n  warning: rank 1" in ctmon("report", run.recording).stdout


def _marked_line(path: str, mark: str) -> int:
    with open(path) as f:
        return next(i for i, text in enumerate(f, 1) if mark in text)
