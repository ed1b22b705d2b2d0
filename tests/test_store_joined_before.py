"""What Dynamo had done before ctmon joined (``--pid``): the ``joined``
event's ``before`` folded by the store, reported as that and never as
compiles; what the event lacks is unknown, not zero."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctmon.report.build import build_report
from ctmon.report.text import full_text
from ctmon.store import Session
from ctmon.store.joined import from_report, joined_before

BEFORE: dict[str, Any] = {
    "frames": {
        "count": 7,
        "list": [
            {"file": "/job/train.py", "line": 12, "name": "step", "entries": 3},
            {
                "file": "/venv/torch/_dynamo/external_utils.py",
                "line": 67,
                "name": "inner",
                "entries": 1,
                "modules": ["cmodel = GPT"],
            },
        ],
    },
    "counters": {
        "stats": {"unique_graphs": 5, "calls_captured": 40},
        "graph_break": {"print": 2, "Tensor.item": 1},
        "inductor": {"fxgraph_cache_hit": 2, "fxgraph_cache_miss": 3},
        "aot_autograd": {"autograd_cache_hit": 1},
    },
    "config": {"recompile_limit": 8},
    "compile_times": {"_compile.compile_inner": 12.5},
}


def _session(before: dict[str, Any], left: bool) -> Session:
    s = Session()
    s.apply({"kind": "session", "t": 1.0, "id": "j", "command": ["python", "train.py"], "cwd": "/job"})
    s.apply({"kind": "joined", "t": 2.0, "pid": 4242, "torch": "2.13.0", "dynamo": True, "before": before})
    if left:
        s.apply(
            {
                "kind": "note",
                "t": 3.0,
                "level": "info",
                "source": "join",
                "message": "ctmon was asked to stop: leaving process 4242",
            }
        )
    s.apply({"kind": "exit", "t": 4.0, "code": None})
    return s


def test_the_figures_are_pytorchs_own_and_not_compiles() -> None:
    report = build_report(_session(BEFORE, left=True))
    j = report["joined"]
    assert (j["pid"], j["frame_count"], j["versions"], j["unique_graphs"]) == (4242, 7, 4, 5)
    assert (j["graph_breaks"], j["recompile_limit"], j["compile_s"]) == (3, 8, 12.5)
    assert j["fx_graph_cache"] == {"hit": 2, "miss": 3} and j["aot_autograd_cache"] == {"hit": 1, "miss": 0}
    assert j["left_running"] is True
    assert report["compile"]["compiles"] == 0  # ctmon saw none of them happen


def test_the_text_says_before_the_join_and_that_ctmon_left_it_running() -> None:
    text = " ".join(full_text(build_report(_session(BEFORE, left=True))).split())  # lines wrapped at 100
    assert "Was joined with --pid and left running" in text
    assert "Before ctmon joined (read from PyTorch's own state; not counted below)" in text
    assert "7 frame(s) held compiled code (4 version(s)), 5 unique graph(s), 3 graph break(s)" in text
    assert "train.py:12 step: 3 compiled version(s)" in text
    assert "external_utils.py:67 inner (torch.compile of cmodel = GPT): 1 compiled version(s)" in text
    assert "and 5 more" in text


def test_a_job_that_ended_while_joined_is_not_said_to_be_left_running() -> None:
    text = full_text(build_report(_session(BEFORE, left=False)))
    assert "Ended while ctmon was joined" in text and "left running" not in text


def test_what_the_event_lacks_is_unknown_not_zero() -> None:
    said = joined_before(1, {"frames": {"count": 0, "list": []}})
    assert (said.unique_graphs, said.graph_breaks, said.recompile_limit, said.compile_s) == (None, None, None, None)
    assert said.summary() == "before ctmon joined: 0 frame(s) held compiled code (0 version(s))"


def test_a_launched_job_has_no_joined_section() -> None:
    s = Session()
    s.apply({"kind": "session", "t": 1.0, "id": "j", "command": ["python", "t.py"]})
    report = build_report(s)
    assert report["joined"] is None and "Before ctmon joined" not in full_text(report)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["frames", "counters", "config", "compile_times", "errors"]), _JSON))
def test_any_before_folds_reports_and_round_trips(before: dict[str, Any]) -> None:
    said = joined_before(None, before)
    again = from_report(said.as_dict())
    assert again.as_dict() == said.as_dict()
    said.summary()
    said.frame_lines()


def test_the_screen_says_what_came_before_the_join() -> None:
    import asyncio

    from ctmon.read.feeds import ListFeed
    from ctmon.tui.app import CtmonApp
    from ctmon.tui.capture import screen_text
    from ctmon.tui.testing import wait_loaded

    events = [
        {"kind": "session", "t": 1.0, "id": "j", "command": ["python", "train.py"], "cwd": "/job"},
        {"kind": "joined", "t": 2.0, "pid": 4242, "torch": "2.13.0", "dynamo": True, "before": BEFORE},
        {"kind": "exit", "t": 4.0, "code": None},
    ]

    async def run() -> str:
        app = CtmonApp(ListFeed(events), replay=True)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_loaded(pilot)
            await pilot.pause()
            return screen_text(app)

    shown = asyncio.run(run())
    assert "before ctmon joined: 7 frame(s) held compiled code (4 version(s))" in shown, shown
    assert "0 compiles" in shown  # the counts are from the join on
