"""The screen with ``--baseline BASE`` (``ctmon replay``/``attach``): each
finding new since BASE is tagged NEW in the Findings pane, and its detail
says what is new ("new since BASE: ..."), updated as the findings change;
without a baseline, nothing of it shows.

A real pair (tests/workloads/diff_job.py, eager): BASE with ``--new-shape``,
NEW with ``--graph-break --new-shape``; NEW's break is new since BASE, its
shape recompile is not."""

from __future__ import annotations

import asyncio
import functools
import json
import shutil
import subprocess
import sys
import time
from typing import Any

import pytest
from helpers import ctmon, workload

from ctmon.cli.diff import read_baseline
from ctmon.cli.replay import replay_app
from ctmon.read.feeds import RecordingFeed
from ctmon.tui.app import CtmonApp
from ctmon.tui.capture import screen_text
from ctmon.tui.panels.alerting import AlertsPanel
from ctmon.tui.testing import QueueFeed, wait_applied, wait_loaded, wait_until

JOB = workload("diff_job.py")
WIDE = (160, 48)
FINDINGS_WAIT_S = 30.0  # live, the rules run every 2 s at most (ctmon/findings/current.py); a busy machine is slower


def run_async(fn):  # type: ignore[no-untyped-def]
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """BASE recorded; NEW run by ``attach --baseline BASE`` without a
    terminal, which is ``record --baseline`` (its closing lines kept)."""
    tmp = tmp_path_factory.mktemp("since_tui")
    base, new = str(tmp / "shape.jsonl"), str(tmp / "pr.jsonl")
    run = ctmon("record", "-q", "-o", base, JOB, "--new-shape")
    assert run.returncode == 0, run.stderr[-2000:]
    run = ctmon("attach", "-o", new, "--baseline", base, JOB, "--graph-break", "--new-shape")
    assert run.returncode == 0, run.stderr[-2000:]
    return {"base": base, "new": new, "attach": run.stderr}


def _findings_lines(app: CtmonApp) -> list[str]:
    """The Findings pane's lines (the Alerts panel), as drawn."""
    pane = app.screen.query_one(AlertsPanel)
    return pane.render_text().plain.splitlines()


def _break_line(lines: list[str]) -> str:
    return next(ln for ln in lines if "Graph breaks" in ln)


@pytest.mark.slow
@run_async
async def test_replay_with_a_baseline_tags_the_new_finding_and_says_why(pair: dict[str, str]) -> None:
    base = read_baseline("replay", pair["base"], [])
    app = replay_app(RecordingFeed(pair["new"]), base)
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        lines = _findings_lines(app)
        assert _break_line(lines).startswith("warn NEW Graph breaks"), lines
        others = [ln for ln in lines if "Graph breaks" not in ln]
        assert others and not any("NEW" in ln for ln in others), lines  # BASE had the shape recompile
        assert "NEW Graph breaks" in screen_text(app)
        await pilot.press("a")
        shown = await wait_until(pilot, lambda: "new since shape.jsonl: new graph break at" in screen_text(app))
        assert shown, screen_text(app)
        detail = screen_text(app)
        assert detail.count("new since shape.jsonl:") == 1, detail


@pytest.mark.slow
def test_attach_without_a_terminal_passes_its_baseline_on(pair: dict[str, str]) -> None:
    said = [ln for ln in pair["attach"].splitlines() if ln.startswith("ctmon: WARNING:")]
    marked = [ln for ln in said if "new since" in ln]
    assert len(marked) == 1 and "Graph breaks" in marked[0] and "[new since shape.jsonl]" in marked[0], said
    assert "ctmon: regression since shape.jsonl: new graph break at" in pair["attach"]


@pytest.mark.slow
@run_async
async def test_replay_without_a_baseline_tags_nothing(pair: dict[str, str]) -> None:
    app = replay_app(RecordingFeed(pair["new"]))
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        lines = _findings_lines(app)
        assert _break_line(lines).startswith("warn Graph breaks"), lines
        await pilot.press("a")
        await wait_until(pilot, lambda: "Findings ·" in screen_text(app))
        assert "new since" not in screen_text(app)


@pytest.mark.slow
@run_async
async def test_a_live_finding_is_tagged_once_its_place_turns_new(pair: dict[str, str]) -> None:
    """Live: before the break, nothing is new; once the job reaches it, its
    finding is tagged, without a key pressed."""
    with open(pair["new"]) as f:
        events = [json.loads(line) for line in f if line.strip()]
    cut = next(i for i, e in enumerate(events) if e["kind"] == "graph_break")
    feed = QueueFeed()
    app = CtmonApp(feed)
    app.ctx.since = _since(pair["base"])
    async with app.run_test(size=WIDE) as pilot:
        feed.push(events[:cut])
        await wait_applied(pilot, cut)
        assert not any("NEW" in ln for ln in _findings_lines(app)), _findings_lines(app)
        feed.push(events[cut:])
        await wait_applied(pilot, len(events))
        tagged = await wait_until(pilot, lambda: "NEW Graph breaks" in screen_text(app), timeout=FINDINGS_WAIT_S)
        assert tagged, screen_text(app)
        feed.end()


def _since(path: str) -> Any:
    from ctmon.cli.diff import since_base

    base = read_baseline("attach", path, [])
    assert base is not None
    return since_base(base)


def test_watch_any_job_needs_a_baseline() -> None:
    done = ctmon("watch", "--any-job")
    assert done.returncode == 2 and done.stderr == "ctmon: watch: --any-job goes with --baseline BASE\n", done.stderr
    assert "--baseline BASE [--any-job]" in ctmon("watch", "--help").stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_watch_with_a_baseline_tags_a_live_jobs_new_finding(pair: dict[str, str], tmp_path: Any) -> None:
    """``ctmon watch PID --baseline BASE`` in a real terminal, on a job that
    still runs: its graph break, new since BASE, is tagged NEW; ``q``
    detaches and the job ends as it would have."""
    from test_tui_e2e import PROMPT, Tmux

    hold = tmp_path / "hold"
    rec = tmp_path / "live.jsonl"
    job = subprocess.Popen(
        [sys.executable, "-m", "ctmon", "record", "-q", "-o", str(rec), JOB, "--graph-break", "--new-shape"]
        + ["--hold", str(hold)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    tm = Tmux(str(tmp_path))
    try:
        deadline = time.monotonic() + 120
        while '"kind":"graph_break"' not in (rec.read_text() if rec.exists() else ""):
            assert time.monotonic() < deadline and job.poll() is None, "the live job's graph break"
            time.sleep(0.1)
        pid = next(json.loads(ln)["pid"] for ln in rec.read_text().splitlines() if '"kind":"process"' in ln)
        tm.start_shell(*WIDE)
        tm("send-keys", "-t", "e2e", f"{sys.executable} -m ctmon watch {pid} --baseline {pair['base']}", "Enter")
        screen = tm.wait_for(
            lambda s: any("NEW" in ln and "Graph breaks" in ln for ln in s.splitlines()), 90, "the NEW tag"
        )
        tagged = [ln for ln in screen.splitlines() if "NEW" in ln]
        assert len(tagged) == 1, screen  # the shape recompile BASE had too is not tagged
        tm("send-keys", "-t", "e2e", "q")
        tm.wait_for(lambda s: "detached; the job keeps running" in s and PROMPT.strip() in s, 60, "the detach")
        assert job.poll() is None
    finally:
        hold.touch()
        tm.kill()
        try:
            job.wait(timeout=120)
        finally:
            if job.poll() is None:
                job.kill()
    assert job.returncode == 0, job.stderr.read() if job.stderr else ""
