"""One job on two nodes, each node recorded by its own ctmon: the recordings
merge into one report.

Two nodes are simulated on this machine: two torchrun launchers
(``--nnodes 2``, node ranks 0 and 1, one process each), each under its own
``ctmon record`` with its own TORCH_TRACE directory; the second recording's
host is then renamed, as a second machine would have written it. ``ctmon
report a.jsonl b.jsonl`` must give both ranks, their hosts, totals equal to
both trace directories together, and the divergence of the rank that
recompiled alone; ``ctmon replay a.jsonl b.jsonl`` shows both nodes' ranks
as one job. Recordings of different jobs are refused in one line, by both.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from helpers import ROOT, ctmon, env_with, one_line_containing, read_torch_trace, workload
from test_whole_ranks import free_port

pytestmark = pytest.mark.slow  # two torchrun nodes, recorded for real

SCRIPT = workload("ddp_ranks.py")


def _node(tmp: str, node: int, port: int) -> tuple[subprocess.Popen[str], str, str]:
    rec, trace = os.path.join(tmp, f"node{node}.jsonl"), os.path.join(tmp, f"trace{node}")
    launcher = ["torchrun", "--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", "1"]
    launcher += ["--master_addr", "127.0.0.1", "--master_port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctmon", "record", "-q", "-o", rec, "--", *launcher, SCRIPT, "--diverge"],
        cwd=ROOT,
        env=env_with(TORCH_TRACE=trace),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, rec, trace


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("nodes"))
    port = free_port()
    started = [_node(tmp, n, port) for n in (0, 1)]
    for proc, _, _ in started:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
    (_, a, ta), (_, b, tb) = started
    # the second node's recording, as a second machine would have written it
    with open(b) as f:
        lines = [json.loads(line) for line in f]
    for ev in lines:
        if ev.get("host"):
            ev["host"] = "node-b"
    with open(b, "w") as f:
        f.write("".join(json.dumps(ev) + "\n" for ev in lines))
    return a, b, ta, tb


def test_two_nodes_recordings_merge_into_one_report(nodes):
    a, b, ta, tb = nodes
    out = ctmon("report", a, b, "--json")
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    ranks = rep["ranks"]
    assert [(r["rank"], r["host"]) for r in ranks] == [(0, os.uname().nodename), (1, "node-b")]
    assert [n["recording"] for n in rep["nodes"]] == [a, b]
    assert [n["exit_code"] for n in rep["nodes"]] == [0, 0]
    for r, trace_dir in zip(ranks, (ta, tb), strict=True):
        trace = read_torch_trace(trace_dir, "*_rank_*.log")
        assert (r["compile"]["compiles"], r["compile"]["recompiles"]) == (trace.compiles, trace.recompiles)
    both = read_torch_trace(ta, "*_rank_*.log").compiles + read_torch_trace(tb, "*_rank_*.log").compiles
    assert rep["compile"]["compiles"] == both
    (f,) = [f for f in rep["findings"] if f["rule"] == "rank-divergence"]
    assert f["severity"] == "critical" and "2× on rank 1" in f["title"]
    text = ctmon("report", a, b)
    assert "rank 1 (node-b, pid" in text.stdout


def test_recordings_of_different_jobs_are_refused(nodes, tmp_path):
    a, _, _, _ = nodes
    other = tmp_path / "other.jsonl"
    with open(a) as f:
        lines = [json.loads(line) for line in f]
    for ev in lines:
        if ev.get("kind") == "process" and ev.get("job"):
            ev["job"] = "127.0.0.1:1/another"
    other.write_text("".join(json.dumps(ev) + "\n" for ev in lines))
    for cmd in ("report", "replay"):
        out = ctmon(cmd, a, str(other))
        line = one_line_containing(out, "not one job")
        assert os.path.basename(a) in line and "other.jsonl" in line
    out = ctmon("report", a, a)
    one_line_containing(out, "rank 0")


def test_two_nodes_recordings_replay_as_one_job(nodes):
    import asyncio

    from test_whole_ranks import _until

    from ctmon.read.feeds import NodesFeed
    from ctmon.tui.app import CtmonApp
    from ctmon.tui.testing import wait_loaded

    a, b, _, _ = nodes

    async def listed() -> str:
        app = CtmonApp(NodesFeed([a, b]), replay=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_loaded(pilot)
            await pilot.press("r")
            # the overlay's own line: "by rank: r0 … r1 …" in Compilation is on screen before it
            return await _until(pilot, app, "all ranks (the job", "node-b")

    shown = asyncio.run(listed())
    r1 = next((line for line in shown.splitlines() if "node-b" in line), "")
    assert "node-b" in r1 and "2 c 1 rc" in r1, shown
    # a rank's row in the overlay, not the "by rank: r0 …" line under it
    r0 = next((line for line in shown.splitlines() if re.search(r"│ [ *]r0 ", line)), "")
    assert os.uname().nodename[:12] in r0 and "1 c 0 rc" in r0, shown
    assert "2 ranks" in shown  # the header: one job of two ranks
