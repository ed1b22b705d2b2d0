"""Runs ctmon never saw: ``ctmon report DIR`` on PyTorch's own TORCH_TRACE.

Each workload runs twice: plainly with TORCH_TRACE (no ctmon anywhere), and
under ``ctmon record``. The report of the trace directory must give the same
compile counts, frames, graph-break sites and cache results as the live
recording, and the same counts as an independent count over the trace files.
Two ranks under torchrun (gloo) become the per-rank view, divergence
included. Bad input: a directory without logs, a cut-off log, records of a
newer torch, a trace given with a recording.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from helpers import ctmon, env_with, one_line_containing, read_torch_trace, record, workload
from test_whole_ranks import free_port

pytestmark = pytest.mark.slow  # every test reads the trace of a real compiled job

BREAKS = workload("graph_breaks.py")
CACHE = workload("cache_model.py")


def _plain(tmp: Any, argv: list[str], **env: str) -> str:
    trace = str(tmp / "plain_trace")
    out = subprocess.run(
        [sys.executable, *argv], env=env_with(TORCH_TRACE=trace, **env), capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return trace


def _report(*paths: str) -> dict[str, Any]:
    out = ctmon("report", *paths, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _facts(rep: dict[str, Any]) -> dict[str, Any]:
    c = rep["compile"]
    return {
        "counts": (c["compiles"], c["recompiles"], c["graph_breaks"], c["limit_hits"], c["failures"]),
        "frames": sorted((f["file"], f["line"], f["compiles"]) for f in rep["frames"]),
        "breaks": sorted((b["file"], b["line"], b["count"]) for b in rep["graph_breaks"]),
        "fx": rep["cache"]["fx_graph"],
        "aot": rep["cache"]["aot_autograd"],
    }


@pytest.mark.parametrize("argv", [[BREAKS], [CACHE, "24"]], ids=["graph-breaks", "inductor-cache"])
def test_a_trace_reports_what_a_live_recording_of_the_same_program_does(tmp_path, argv, request):
    # each run its own empty Inductor cache: both miss, as the same program's first run does
    # (graph_breaks.py compiles with aot_eager, no Inductor cache: its plain trace is the session's)
    if argv == [BREAKS]:
        trace = request.getfixturevalue("graph_breaks_trace")
    else:
        trace = _plain(tmp_path, argv, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache-plain"))
    live = record(tmp_path / "live", argv, extra_env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache-live")})
    assert live.returncode == 0, live.proc.stderr[-3000:]
    got, want = _report(trace), live.report()
    assert _facts(got) == _facts(want)
    counted = read_torch_trace(trace)
    assert got["compile"]["compiles"] == counted.compiles and got["compile"]["graph_breaks"] == counted.graph_breaks
    assert got["cache"]["fx_graph"] == {"hit": counted.fx_hit, "miss": counted.fx_miss, "bypass": counted.fx_bypass}
    # what a trace cannot know is absent, not zero
    assert got["steps"]["count"] is None and got["input"] == "torch_trace"
    assert got["exit_code"] is None and got["ranks"] == []
    # the findings about the program itself are the live run's: each break finding at the same line
    sites = {(f["rule"], f["file"], f["line"]) for f in got["findings"]}
    for f in want["findings"]:
        if f["rule"] == "graph-breaks":
            assert (f["rule"], f["file"], f["line"]) in sites, (f, got["findings"])


def test_a_traced_job_of_two_ranks_is_reported_per_rank(tmp_path):
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    trace = _plain(tmp_path, [*launcher, "--master_port", str(free_port()), workload("ddp_ranks.py"), "--diverge"])
    rep = _report(trace)
    assert [r["rank"] for r in rep["ranks"]] == [0, 1]
    for r in rep["ranks"]:
        counted = read_torch_trace(trace, f"*_rank_{r['rank']}_*.log")
        assert (r["compile"]["compiles"], r["compile"]["recompiles"]) == (counted.compiles, counted.recompiles)
        assert r["steps"]["count"] is None and r["pid"] is not None
    assert [r["compile"]["recompiles"] for r in rep["ranks"]] == [0, 1]
    (f,) = [f for f in rep["findings"] if f["rule"] == "rank-divergence"]
    assert f["severity"] == "critical" and "rank 1" in f["title"]
    # one rank's file alone is that rank
    (one,) = [p for p in os.listdir(trace) if "_rank_1_" in p]
    alone = _report(os.path.join(trace, one))
    assert [r["rank"] for r in alone["ranks"]] == [1] and alone["compile"]["recompiles"] == 1


def test_bad_traces_get_one_line_and_what_is_readable_is_reported(tmp_path, graph_breaks_trace):
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_containing(ctmon("report", str(empty)), "no TORCH_TRACE *.log files in it")
    trace = graph_breaks_trace
    (log,) = [os.path.join(trace, n) for n in os.listdir(trace)]
    whole = _report(trace)["compile"]["compiles"]
    with open(log, encoding="utf-8") as f:
        text = f.read()
    # a newer torch's record of a kind no one knows, and a log cut off mid-record
    newer = 'V1125 10:00:00.000000 1 torch/x.py:1] {"a_record_of_2030": {"x": 1}}\n'
    cut = text[: len(text) * 2 // 3]
    cut = cut[: cut.rfind("] {") + 12]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "dedicated_log_torch_trace_x.log").write_text(newer + cut)
    out = ctmon("report", str(bad), "--json")
    assert out.returncode == 0 and "Traceback" not in out.stderr
    warn = [ln for ln in out.stderr.splitlines() if ln.startswith("ctmon:")]
    assert len(warn) == 1 and "not records ctmon could read" in warn[0], out.stderr
    assert 1 <= json.loads(out.stdout)["compile"]["compiles"] <= whole
    rec = record(tmp_path / "rec", [BREAKS], torch_trace=False)
    one_line_containing(ctmon("report", trace, rec.recording), "cannot be reported together")


def test_a_trace_replays_on_the_screen(tmp_path, graph_breaks_trace):
    import asyncio

    from test_whole_ranks import _until

    from ctmon.read.feeds import ListFeed
    from ctmon.read.torch_trace import trace_events
    from ctmon.read.trace_lines import TraceStats
    from ctmon.tui.app import CtmonApp
    from ctmon.tui.testing import wait_loaded

    trace = graph_breaks_trace

    async def shown() -> str:
        app = CtmonApp(ListFeed(list(trace_events([trace], TraceStats()))), replay=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_loaded(pilot)
            return await _until(pilot, app, "graph_breaks.py:13")

    screen = asyncio.run(shown())
    assert "graph_breaks.py:13" in screen and "graph_breaks.py:14" in screen, screen
    # the command line refuses what it cannot read in one line, before it needs a terminal
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_containing(ctmon("replay", str(empty)), "no TORCH_TRACE *.log files in it")


def test_a_large_trace_streams_and_says_how_far_it_is(tmp_path, graph_breaks_trace):
    trace = graph_breaks_trace
    (log,) = [os.path.join(trace, n) for n in os.listdir(trace)]
    with open(log, "rb") as f:
        chunk = f.read()
    copies = (70 << 20) // len(chunk) + 1  # past the size below which nothing is said
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "dedicated_log_torch_trace_big.log", "wb") as f:
        for _ in range(copies):
            f.write(chunk)
    one = _report(trace)["compile"]["compiles"]
    out = ctmon("report", str(big), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["compile"]["compiles"] == one * copies
    said = [ln for ln in out.stderr.splitlines() if ln.startswith("ctmon: reading ")]
    assert 2 <= len(said) <= 4 and all("% (" in ln and " MB)" in ln for ln in said), out.stderr


def test_a_size_specialised_to_one_value_is_named_at_the_users_line(tmp_path):
    script = workload("specialize.py")
    trace = _plain(tmp_path, [script])
    live = record(tmp_path / "live", [script])
    assert live.returncode == 0, live.proc.stderr
    with open(script) as f:
        line = next(i for i, text in enumerate(f, 1) if "SPECIALISED" in text and "if " in text)
    for rep in (_report(trace), live.report()):
        (x,) = rep["specializations"]
        assert (x["file"], x["line"], x["value"]) == (script, line, "5"), x
        assert x["sources"] == ["L['x'].size()[0]"] and x["code"] == "if x.shape[0] == 5:  # SPECIALISED"
    text = ctmon("report", trace).stdout
    assert "L['x'].size()[0] = 5 at " in text and f"specialize.py:{line}" in text
