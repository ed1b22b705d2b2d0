"""Where step time goes per compiled region: the agent samples the main
thread (ctmon/agent/hotness.py); a real compiled loop whose forward breaks
its graph around eager work, recorded; the sampled share of that eager glue
beside the share the workload timed itself."""

from __future__ import annotations

import asyncio
import re

import pytest
from helpers import ctmon, record, workload

from ctmon.read.feeds import RecordingFeed
from ctmon.tui.app import CtmonApp
from ctmon.tui.capture import screen_text
from ctmon.tui.fmt import short_count
from ctmon.tui.testing import wait_loaded

pytestmark = pytest.mark.slow  # real compiled jobs, sampled for seconds


def _run(tmp_path, *args: str):  # type: ignore[no-untyped-def]
    run = record(tmp_path / "rec", [workload("hot_regions.py"), *args])
    assert run.returncode == 0, run.proc.stderr
    truth = float(re.search(r"GLUE_SHARE (\S+)", run.proc.stdout).group(1))  # type: ignore[union-attr]
    return run.report(), truth


def test_eager_glue_between_graphs_is_measured_and_named(tmp_path):
    # 25 s of steady loop: about 100 samples at 4 Hz, on any machine
    rep, truth = _run(tmp_path, "--glue", "300", "--seconds", "25")
    rt = rep["steps"]["runtime"]
    assert rt["clock"] == "host" and rt["samples"] >= 40
    assert abs(rt["graph_share"] + rt["glue_share"] + rt["other_share"] - 1) < 0.01
    assert rep["steps"]["compiled_share"] == rt["graph_share"] > 0
    fwd = next(f for f in rep["frames"] if f["name"] == "Net.forward")
    assert fwd["runtime"]["glue_share"] > 0.2
    # the sampled share beside the one the loop timed itself (about 100 samples at 4 Hz: a few points of noise)
    assert abs(fwd["runtime"]["glue_share"] - truth) < 0.15, (fwd["runtime"], truth)
    (f,) = [f for f in rep["findings"] if f["rule"] == "eager-glue"]
    assert f["severity"] == "warning" and f["title"].startswith("Eager code between graph breaks in Net.forward")
    assert any(re.search(r"graph break at .*hot_regions\.py:\d+", e) for e in f["evidence"])


def test_a_break_with_no_eager_work_costs_nothing_said(tmp_path):
    rep, truth = _run(tmp_path, "--glue", "0", "--seconds", "15")
    assert rep["steps"]["runtime"]["samples"] >= 40  # enough for the finding to be said, were there glue
    fwd = next(f for f in rep["frames"] if f["name"] == "Net.forward")
    assert truth < 0.05 and fwd["runtime"] is not None and fwd["runtime"]["glue_share"] < 0.1
    assert not [f for f in rep["findings"] if f["rule"] == "eager-glue"]


def test_sampling_keeps_no_finished_call_alive(tmp_path):
    """The sampler must never be what keeps a returned call's locals (tensors
    included) alive: with the cyclic GC off, every local dies with its call.
    (A cycle through the sampler's own frame once kept them until a GC pass,
    which broke CUDA graph recordings under mode="reduce-overhead".)"""
    run = record(tmp_path / "rec", [workload("frames_freed.py"), "8"])
    assert run.returncode == 0, run.proc.stderr
    calls, kept = map(int, re.search(r"CALLS (\d+) KEPT (\d+)", run.proc.stdout).groups())  # type: ignore[union-attr]
    assert calls > 100 and kept == 0, (calls, kept)
    assert run.report()["steps"]["runtime"]["samples"] >= 15  # the sampler did sample those calls (4 Hz)


def test_graph_calls_are_counted_and_timed(tmp_path):
    """Every call of a frame's compiled graphs is counted (both graphs of a
    recompiled frame, calls after the last step too), and its graphs' share
    of step time is timed: right where sampling is blind, for graphs that
    hold the GIL (ctmon/agent/graph_calls.py)."""
    run = record(tmp_path / "rec", [workload("graph_calls.py")])
    assert run.returncode == 0, run.proc.stderr
    m = re.search(r"STEPS (\d+) EXTRA (\d+) GRAPH_SHARE (\S+)", run.proc.stdout)
    assert m is not None, run.proc.stdout
    steps, extra, truth = int(m.group(1)), int(m.group(2)), float(m.group(3))
    rep = run.report()
    frames = [f for f in rep["frames"] if f["name"].startswith("step_fn")]
    assert len(frames) == 2 and all(f["compiles"] == 2 for f in frames), frames
    for f in frames:
        rt = f["runtime"]
        assert rt["timed"] is True and rt["calls"] == steps + extra, (f["name"], rt, steps, extra)
    share = sum(f["runtime"]["share"] for f in frames)
    assert 0.3 < truth < 0.7 and abs(share - truth) < 0.06, ([f["runtime"] for f in frames], truth)
    text = ctmon("report", run.recording)
    assert text.returncode == 0 and f"its graphs ran {steps + extra:,} times" in text.stdout, text.stdout
    # the Frames pane's calls column, on the replayed recording
    screen = asyncio.run(_frames_pane(run.recording))
    rows = [line for line in screen.splitlines() if line.startswith("│graph_calls.py:")]  # the Frames pane's
    assert len(rows) == 2 and all(f" {short_count(steps + extra)} " in r for r in rows), screen


async def _frames_pane(path: str) -> str:
    app = CtmonApp(RecordingFeed(path), replay=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_loaded(pilot)
        return screen_text(app)
