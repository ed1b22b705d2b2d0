"""SVG snapshots of the TUI (pytest-textual-snapshot), from the fixed
recordings in tests/fixtures/recordings, at 80x24 and 160x48; the screens of
issue 38 (warnings, two ranks, failed jobs) also at 100x30.

Replays show the recording's own clock, so nothing here depends on the wall
clock. After a deliberate change of the screen:
``pytest tests/test_tui_snapshots.py --snapshot-update``, then look at the
new SVGs before committing them.
"""

from __future__ import annotations

import json
import os

import pytest

from ctmon.read.feeds import ListFeed, RecordingFeed
from ctmon.tui.app import CtmonApp
from ctmon.tui.testing import wait_loaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "recordings")
WORKLOADS = os.path.join(ROOT, "tests", "workloads")
SIZES = {"80x24": (80, 24), "160x48": (160, 48)}
CASES = {
    "healthy": "a healthy training run (Inductor, warm caches, one GPU)",
    "no_gpu": "no GPU: the labelled state",
    "crashed": "the job exited with an error",
    "many_breaks": "many graph breaks and recompiles",
    "multi_gpu": "four GPUs, and a recompile-limit alert",
}


# the screen a user really has (tests/test_tui_screen.py says what each must show)
USER_SIZES = {"80x24": (80, 24), "100x30": (100, 30), "160x48": (160, 48)}
USER_CASES = {
    "warnings": "three graph-break warnings: the warnings, and the key to their fixes, on the main screen",
    "two_ranks": "a 2-rank torchrun job: each pane names whose figures it shows; totals of every rank",
    "failed_syntax": "a syntax error: the traceback first",
    "failed_early": "an exception in the first step, inside the compiled model: the traceback first",
}


def replay(name: str) -> CtmonApp:
    return CtmonApp(RecordingFeed(os.path.join(FIXTURES, f"{name}.jsonl")), replay=True)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("case", list(CASES))
def test_main_screen(snap_compare, case: str, size: str) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(replay(case), terminal_size=SIZES[size], run_before=wait_loaded)


@pytest.mark.parametrize("size", list(USER_SIZES))
@pytest.mark.parametrize("case", list(USER_CASES))
def test_screen_a_user_has(snap_compare, case: str, size: str) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(replay(case), terminal_size=USER_SIZES[size], run_before=wait_loaded)


def test_frame_detail(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def open_top_frame(pilot) -> None:  # type: ignore[no-untyped-def]
        await wait_loaded(pilot)
        await pilot.press("enter")

    assert snap_compare(replay("many_breaks"), terminal_size=SIZES["80x24"], run_before=open_top_frame)


def test_graph_break_detail_with_source(snap_compare) -> None:  # type: ignore[no-untyped-def]
    with open(os.path.join(FIXTURES, "no_gpu.jsonl")) as f:
        text = f.read()
    text = text.replace("/home/alice/proj/graph_breaks.py", os.path.join(WORKLOADS, "graph_breaks.py"))
    text = text.replace('"/home/alice/proj"', json.dumps(WORKLOADS))
    events = [json.loads(line) for line in text.splitlines() if line.strip()]

    async def open_break(pilot) -> None:  # type: ignore[no-untyped-def]
        await wait_loaded(pilot)
        await pilot.press("tab", "down", "enter")

    assert snap_compare(CtmonApp(ListFeed(events)), terminal_size=SIZES["80x24"], run_before=open_break)


def test_help(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def open_help(pilot) -> None:  # type: ignore[no-untyped-def]
        await wait_loaded(pilot)
        await pilot.press("question_mark")

    assert snap_compare(replay("healthy"), terminal_size=SIZES["80x24"], run_before=open_help)
