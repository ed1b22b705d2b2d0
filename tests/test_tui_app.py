"""The TUI, driven headless with Textual's pilot: every key, every detail
screen, pause, replay, and the stop-the-job flow, on fixed recordings."""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import os
import subprocess
import sys

import pytest

from ctmon.read.feeds import ListFeed, RecordingFeed
from ctmon.store import Session
from ctmon.tui.app import CtmonApp
from ctmon.tui.capture import screen_text
from ctmon.tui.compile_panes import BreaksPane, FramesPane
from ctmon.tui.ingest import Handoff
from ctmon.tui.main_screen import MainScreen, TabStrip
from ctmon.tui.panels import GpuPanel, HeaderBar, StepsPanel
from ctmon.tui.screens import ConfirmStop, DetailScreen, FilterScreen, HelpScreen
from ctmon.tui.stream_panes import EventsPane, OutputPane
from ctmon.tui.testing import QueueFeed, wait_applied, wait_loaded, wait_until
from ctmon.tui.timeline import Timeline
from ctmon.wire.decode import typed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "recordings")
WORKLOADS = os.path.join(ROOT, "tests", "workloads")
WIDE = (160, 48)
SMALL = (80, 24)


def run_async(fn):  # type: ignore[no-untyped-def]
    """Run an async test in its own event loop (no asyncio plugin needed)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


def fixture(name: str) -> str:
    return os.path.join(FIXTURES, f"{name}.jsonl")


def events_of(name: str) -> list[dict]:
    with open(fixture(name)) as f:
        return [json.loads(line) for line in f if line.strip()]


def replay_app(name: str) -> CtmonApp:
    return CtmonApp(RecordingFeed(fixture(name)), replay=True)


def graph_breaks_here() -> list[dict]:
    """The no-GPU recording, with its paths pointing at this checkout's
    workload, so the graph-break details can read the source."""
    text = json.dumps(events_of("no_gpu"))
    text = text.replace("/home/alice/proj/graph_breaks.py", os.path.join(WORKLOADS, "graph_breaks.py"))
    text = text.replace('"/home/alice/proj"', json.dumps(WORKLOADS))
    return json.loads(text)


def main_of(app: CtmonApp) -> MainScreen:
    assert app.main is not None
    return app.main


# ------------------------------------------------------------------ import


def test_tui_never_imports_torch() -> None:
    code = "import ctmon.tui.app, ctmon.cli.attach, ctmon.cli.replay, sys; assert 'torch' not in sys.modules, 'torch imported'"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------ main screen


@run_async
async def test_replay_opens_at_the_end_state() -> None:
    app = replay_app("healthy")
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        text = screen_text(app)
        assert "■ exited 0" in text
        assert "Steps · 240 (optimizer)" in text  # the step count: once, in the Steps pane's title
        assert "replay 100% (47/47)" in text
        assert "FX graph 2 hit / 0 miss" in text and "AOTAutograd 1 hit / 0 miss" in text
        assert "p50 23.2 ms" in text  # step times in ms
        assert "H100 80GB HBM3" in text and "37.1/80.0 GiB" in text
        assert app.ctx.replay is not None and app.ctx.replay.at_end


@run_async
async def test_no_gpu_is_a_labelled_state() -> None:
    app = replay_app("no_gpu")
    async with app.run_test(size=SMALL) as pilot:
        await wait_loaded(pilot)
        text = screen_text(app)
        assert "no GPU: no NVIDIA driver (NVML not" in text
        last = [e for e in events_of("no_gpu") if e["kind"] == "sample"][-1]
        assert f"CPU {last['cpu_percent']:.0f}% of {last['cpus']}" in text


@run_async
async def test_gpu_panel_numbers() -> None:
    app = replay_app("multi_gpu")
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        rows = main_of(app).query_one(GpuPanel).gpu_rows()
        assert [r["index"] for r in rows] == [0, 1, 2, 3]
        assert rows[0]["util"] == 97 and rows[3]["util"] == 0
        text = screen_text(app)
        assert "4× NVIDIA H100 80GB HBM3" in text
        assert " 97% 34/80G" in text
        alerts = main_of(app).query_one("#alerts").render_text().plain
        assert alerts.startswith("CRIT pool hit the recompile limit (3) and now runs eager · pool.py:7")


@run_async
async def test_compact_and_wide_layouts() -> None:
    app = replay_app("many_breaks")
    async with app.run_test(size=SMALL) as pilot:
        await wait_loaded(pilot)
        main = main_of(app)
        assert main.has_class("-compact")
        assert main.pane("frames").display and not main.pane("events").display
        await pilot.resize_terminal(*WIDE)
        await pilot.pause()
        assert not main.has_class("-compact")
        assert all(main.pane(n).display for n in ("frames", "breaks", "events", "output"))


@run_async
async def test_tab_and_shift_tab_move_between_panes() -> None:
    app = replay_app("many_breaks")
    async with app.run_test(size=SMALL) as pilot:
        await wait_loaded(pilot)
        main = main_of(app)
        assert isinstance(app.focused, FramesPane)
        seen = []
        for _ in range(4):
            await pilot.press("tab")
            seen.append(type(app.focused))
            assert main.pane(main.current_pane).display  # the current pane is the one shown
        assert seen == [BreaksPane, EventsPane, OutputPane, FramesPane]
        await pilot.press("shift+tab")
        assert isinstance(app.focused, OutputPane)
        assert main.query_one(TabStrip).current == "output"  # the tab strip marks it


@run_async
async def test_list_keys_move_the_cursor() -> None:
    app = replay_app("many_breaks")
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        frames = main_of(app).pane("frames")
        n = len(frames.items)
        assert n > 10
        assert frames.cursor == 0
        await pilot.press("down", "down", "j")
        assert frames.cursor == 3
        await pilot.press("up", "k")
        assert frames.cursor == 1
        await pilot.press("end")
        assert frames.cursor == n - 1
        await pilot.press("home")
        assert frames.cursor == 0
        await pilot.press("pagedown")
        assert frames.cursor > 5
        await pilot.press("pageup")
        assert frames.cursor == 0
        await pilot.press("G")
        assert frames.cursor == n - 1
        await pilot.press("g")
        assert frames.cursor == 0


# ---------------------------------------------------------------- details


@run_async
async def test_enter_on_a_frame_shows_its_compiles() -> None:
    app = replay_app("many_breaks")
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        frames = main_of(app).pane("frames")
        top = frames.items[0]
        assert len(top.compiles) >= 2
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen) and app.screen.name == "frame-detail"
        text = screen_text(app)
        assert f"Frame {top.title}" in text
        for rec in top.compiles:
            assert rec.compile_id in text
        # a recompile names the cached version whose guard failed apart from its own id
        assert "reason (a guard of the cached version " in text and "size mismatch" in text
        assert "budget" in text
        await pilot.press("escape")
        assert app.screen is app.main


@run_async
async def test_enter_on_a_graph_break_shows_source_and_stack() -> None:
    app = CtmonApp(ListFeed(graph_breaks_here()))
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        await pilot.press("tab")
        assert isinstance(app.focused, BreaksPane)
        site = app.focused.current()
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen) and app.screen.name == "break-detail"
        body = app.screen.body.plain
        assert f"graph_breaks.py:{site.line}" in body
        marked = [ln for ln in body.splitlines() if ln.startswith(" ▶ ")]
        assert len(marked) == 1 and f"{site.line} │" in marked[0]
        with open(os.path.join(WORKLOADS, "graph_breaks.py")) as f:
            source_line = f.read().splitlines()[site.line - 1].strip()
        assert source_line in marked[0]
        assert "User stack (most recent call last)" in body
        assert "Explanation" in body and "Hints" in body
        assert site.reason in body
        await pilot.press("q")  # q closes a detail screen, it does not quit
        assert app.screen is app.main


@run_async
async def test_break_detail_without_the_source_says_so() -> None:
    app = replay_app("no_gpu")  # paths of another machine
    async with app.run_test(size=SMALL) as pilot:
        await wait_loaded(pilot)
        await pilot.press("tab", "enter")
        assert "source not available" in app.screen.body.plain  # type: ignore[attr-defined]
        await pilot.press("backspace")
        assert app.screen is app.main


@run_async
async def test_enter_on_events() -> None:
    app = replay_app("many_breaks")
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        events = main_of(app).pane("events")
        events.focus()
        await pilot.pause()
        kinds = [e.kind for e in events.items]
        for kind, screen_name in (
            ("recompile", "frame-detail"),
            ("graph_break", "break-detail"),
            ("exit", "event-detail"),
        ):
            events._move_to(kinds.index(kind))
            await pilot.press("enter")
            assert isinstance(app.screen, DetailScreen) and app.screen.name == screen_name, kind
            await pilot.press("escape")
            assert app.screen is app.main


@run_async
async def test_enter_on_output() -> None:
    app = replay_app("crashed")
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        out = main_of(app).pane("output")
        out.focus()
        await pilot.press("end", "enter")
        assert isinstance(app.screen, DetailScreen)
        assert "RuntimeError: simulated failure at step 5" in app.screen.body.plain


@run_async
async def test_detail_screen_scrolls() -> None:
    app = replay_app("many_breaks")
    async with app.run_test(size=SMALL) as pilot:
        await wait_loaded(pilot)
        await pilot.press("enter")
        body = app.screen.query_one("#detail-body")
        assert body.max_scroll_y > 0
        await pilot.press("j", "j", "down")
        assert body.scroll_y == 3
        await pilot.press("k")
        assert body.scroll_y == 2
        await pilot.press("enter")
        assert app.screen is app.main


# -------------------------------------------------------- help and filter


def test_help_lists_the_input_key_where_a_job_runs() -> None:
    from textual.app import App

    class _Host(App[None]):
        pass

    async def run(replay: bool) -> str:
        app = _Host()
        async with app.run_test(size=SMALL) as pilot:
            await app.push_screen(HelpScreen(replay=replay))
            await pilot.pause()
            return screen_text(app)

    import asyncio

    assert "stdin" in asyncio.run(run(False))
    assert "stdin" not in asyncio.run(run(True))


@run_async
async def test_help_key() -> None:
    app = replay_app("healthy")
    async with app.run_test(size=SMALL) as pilot:
        await wait_loaded(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        assert "Ctrl-C" in text and "Tab / Shift-Tab" in text
        assert "stdin" not in text  # a replay has no job to type into
        await pilot.press("question_mark")
        assert app.screen is app.main
        await pilot.press("question_mark", "escape")
        assert app.screen is app.main


@run_async
async def test_filter_frames_by_text_and_escape_clears() -> None:
    app = replay_app("many_breaks")
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        frames = main_of(app).pane("frames")
        total = len(frames.items)
        await pilot.press("slash")
        assert isinstance(app.screen, FilterScreen)
        await pilot.press(*"helper_b")
        await pilot.press("enter")
        assert app.screen is app.main
        assert 0 < len(frames.items) < total
        assert all("helper_b" in f.title for f in frames.items)
        assert "[/helper_b]" in frames.title_plain
        await pilot.press("escape")
        assert len(frames.items) == total


@run_async
async def test_filter_can_be_cancelled() -> None:
    app = replay_app("many_breaks")
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        frames = main_of(app).pane("frames")
        total = len(frames.items)
        await pilot.press("slash", "x", "escape")
        assert app.screen is app.main and len(frames.items) == total


@run_async
async def test_filter_events_by_kind() -> None:
    app = replay_app("many_breaks")
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        main = main_of(app)
        events = main.pane("events")
        events.focus()
        await pilot.pause()
        await pilot.press("slash")
        screen = app.screen
        assert isinstance(screen, FilterScreen) and screen.kinds is not None
        sel = screen.query_one("#filter-kinds")
        sel.deselect_all()
        sel.select("recompile")
        await pilot.press("enter")
        assert events.items and {e.kind for e in events.items} == {"recompile"}
        await pilot.press("escape")
        assert {"compile", "graph_break", "exit"} <= {e.kind for e in events.items}


@run_async
async def test_f_cycles_event_kinds() -> None:
    app = replay_app("many_breaks")
    async with app.run_test(size=SMALL) as pilot:
        await wait_loaded(pilot)
        main = main_of(app)
        events = main.pane("events")
        everything = len(events.items)
        await pilot.press("f")  # compiles
        assert main.current_pane == "events"
        assert {e.kind for e in events.items} <= {"compile", "recompile", "limit", "error"}
        await pilot.press("f")  # recompiles
        assert {e.kind for e in events.items} == {"recompile"}
        await pilot.press("f")  # graph breaks
        assert {e.kind for e in events.items} == {"graph_break"}
        assert "[graph breaks]" in events.title_plain
        await pilot.press("f", "f", "f")  # cache, alerts, all
        assert len(events.items) == everything


@run_async
async def test_frames_pane_shows_graph_calls_that_come_after_the_compiles() -> None:
    """The calls and shares of a frame come in hotness events, the last at
    the job's exit, after its compiles: the pane must redraw for them."""
    evs = events_of("many_breaks")
    feed = QueueFeed()
    app = CtmonApp(feed)
    async with app.run_test(size=WIDE) as pilot:
        feed.push(evs)
        await wait_applied(pilot, len(evs))
        frame = app.full.compile.frames_sorted()[0]
        code = frame.code
        graphs = [[code.file, code.line, code.name, 4321, 0]]
        feed.push([{"kind": "hotness", "t": evs[-1]["t"], "counts": {}, "graphs": graphs, "span_ns": 0}])
        await wait_applied(pilot, len(evs) + 1)
        frames = main_of(app).pane("frames")
        shown = await wait_until(pilot, lambda: " 4.3k " in screen_text(app))
        assert shown, screen_text(app)
        assert frames.items[0] is frame


# ------------------------------------------------------------------ pause


@run_async
async def test_space_pauses_the_view_but_not_the_collection() -> None:
    evs = events_of("many_breaks")
    cut = next(i for i, e in enumerate(evs) if e["kind"] == "compile") + 1
    feed = QueueFeed()
    app = CtmonApp(feed)
    async with app.run_test(size=WIDE) as pilot:
        feed.push(evs[:cut])
        await wait_applied(pilot, cut)
        frames = main_of(app).pane("frames")
        header = main_of(app).query_one(HeaderBar)
        assert len(frames.items) == 1
        await pilot.press("space")
        assert app.ctx.paused and "PAUSED" in screen_text(app)
        updates = frames.updates
        feed.push(evs[cut:])
        await wait_applied(pilot, len(evs))
        await pilot.pause(0.2)
        assert app.full.compile.compile_count > 1  # collected...
        assert len(frames.items) == 1 and frames.updates == updates  # ...not shown
        assert "PAUSED" in screen_text(app)
        await pilot.press("space")
        assert not app.ctx.paused
        assert len(frames.items) == len(app.full.compile.frames)
        assert header.updates > 0 and "PAUSED" not in screen_text(app)


# -------------------------------------------------------------- job control


def _running(pid: int = 777) -> list[dict]:
    evs = [e for e in events_of("many_breaks") if e["kind"] != "exit"]
    for i, e in enumerate(evs):
        if e["kind"] == "session":
            evs[i] = dict(e, job_pid=pid)
        elif e["kind"] == "process":
            evs[i] = dict(e, pid=pid)
    return evs


@run_async
async def test_q_while_the_job_runs_asks_and_can_cancel_or_leave_it_running() -> None:
    feed = QueueFeed()
    feed.push(_running())
    app = CtmonApp(feed, launched=True)
    async with app.run_test(size=SMALL) as pilot:
        await wait_applied(pilot, len(_running()))
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmStop)
        assert "pid 777" in screen_text(app)
        await pilot.press("n")
        assert app.screen is app.main and app.is_running
        await pilot.press("q", "d")
        await pilot.pause()
    assert app.return_value is not None and app.return_value.how == "detached"
    assert feed.controls == [] and feed.closed


@run_async
async def test_q_then_stop_terminates_the_job_and_waits_for_its_exit() -> None:
    feed = QueueFeed()
    feed.push(_running())
    app = CtmonApp(feed, launched=True)
    async with app.run_test(size=SMALL) as pilot:
        await wait_applied(pilot, len(_running()))
        await pilot.press("q")
        await pilot.press("y")
        assert feed.controls == ["stop"] and feed.graces == [30.0]  # the supervisor escalates after 30 s
        assert "stopping" in screen_text(app)
        assert app.is_running  # waits for the exit
        feed.push([{"kind": "exit", "t": 1700000009.0, "code": None, "signal": "SIGTERM"}])
        await wait_until(pilot, lambda: not app.is_running, 5)
    result = app.return_value
    assert result is not None and result.how == "stopped"
    assert result.exit is not None and result.exit.status == 128 + 15


@run_async
async def test_stop_dialog_says_when_sigkill_follows() -> None:
    """The dialog names the grace (--stop-grace / CTMON_STOP_GRACE); the
    supervisor, not the viewer, sends SIGKILL once it has passed."""
    for grace, said in (
        (30.0, "Stop sends SIGTERM now, SIGKILL after 30 s"),
        (2.5, "SIGKILL after 2.5 s"),
        (0.0, "Stop sends SIGTERM only; no SIGKILL follows"),
    ):
        feed = QueueFeed()
        feed.push(_running())
        app = CtmonApp(feed, launched=True, stop_grace=grace)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_applied(pilot, len(_running()))
            await pilot.press("q")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmStop)
            assert said in " ".join(screen_text(app).split()), screen_text(app)
            await pilot.press("y")
            assert feed.controls == ["stop"] and feed.graces == [grace]
            await pilot.press("q", "d")
            await pilot.pause()
        assert app.return_value is not None and app.return_value.how == "detached"


@run_async
async def test_q_does_not_ask_when_ctmon_did_not_start_the_job() -> None:
    feed = QueueFeed()
    feed.push(_running())
    app = CtmonApp(feed, launched=False)
    async with app.run_test(size=SMALL) as pilot:
        await wait_applied(pilot, len(_running()))
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value is not None and app.return_value.how == "detached"
    assert feed.controls == []


@run_async
async def test_ctrl_c_interrupts_then_kills_and_the_tui_stays_after_the_exit() -> None:
    feed = QueueFeed()
    feed.push(_running())
    app = CtmonApp(feed, launched=True)
    async with app.run_test(size=SMALL) as pilot:
        await wait_applied(pilot, len(_running()))
        await pilot.press("ctrl+c")
        assert feed.controls == ["interrupt"]
        await pilot.press("ctrl+c")
        assert feed.controls == ["interrupt", "kill"]
        feed.push([{"kind": "exit", "t": 1700000009.0, "code": None, "signal": "SIGKILL"}])
        await wait_until(pilot, lambda: app.full.exit is not None)
        await pilot.pause(0.2)
        assert app.is_running  # the exit status stays on screen
        assert "■ exited (SIGKILL)" in screen_text(app)
        await pilot.press("q")  # no question once the job is gone
        await pilot.pause()
    assert app.return_value is not None and app.return_value.how == "quit"
    assert app.return_value.exit is not None and app.return_value.exit.status == 137


@run_async
async def test_q_and_ctrl_c_quit_a_replay() -> None:
    for key in ("q", "ctrl+c", "ctrl+q"):
        app = replay_app("crashed")
        async with app.run_test(size=SMALL) as pilot:
            await wait_loaded(pilot)
            await pilot.press(key)
            await pilot.pause()
        assert app.return_value is not None and app.return_value.how == "quit", key
        assert app.return_value.exit is not None and app.return_value.exit.status == 1


# ----------------------------------------------------------------- replay


@run_async
async def test_replay_step_jump_play_and_speed_keys() -> None:
    app = replay_app("many_breaks")
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        r = app.ctx.replay
        assert r is not None and r.at_end
        total = r.total
        await pilot.press("left_square_bracket")  # back to the exit event
        assert r.position == total and app.ctx.session is app.full or r.position < total
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert r.position < total
        assert app.ctx.session is not app.full
        shown = app.ctx.session.compile.compile_count
        assert shown < app.full.compile.compile_count or app.ctx.session.exit is None
        pos = r.position
        await pilot.press("right_square_bracket")
        assert r.position > pos
        await pilot.press("left_curly_bracket")
        back = r.position
        assert back < pos + 10
        await pilot.press("right_curly_bracket")
        assert r.position > back
        text = screen_text(app)
        assert "replay" in text and "%" in text
        # p at the end plays from the start
        app.replay_goto(total)
        await pilot.press("p")
        assert r.playing and r.position < total
        speed = r.speed
        await pilot.press("plus")
        assert r.speed == speed * 2
        await pilot.press("minus", "minus")
        assert r.speed == speed / 2
        await pilot.press("p")
        assert not r.playing
        await pilot.press("plus", "plus", "plus", "plus", "plus", "plus", "plus", "plus", "p")
        await wait_until(pilot, lambda: r.at_end and not r.playing, 10)
        assert app.ctx.session is app.full


@run_async
async def test_replay_state_matches_a_fresh_store_at_every_mark() -> None:
    evs = events_of("many_breaks")
    app = replay_app("many_breaks")
    async with app.run_test(size=SMALL) as pilot:
        await wait_loaded(pilot)
        assert app.timeline is not None
        for _ in range(8):
            await pilot.press("left_square_bracket")
            pos = app.ctx.replay.position  # type: ignore[union-attr]
            fresh = Session().apply_all(evs[:pos])
            shown = app.ctx.session
            assert shown.compile.compile_count == fresh.compile.compile_count
            assert shown.compile.graph_break_count == fresh.compile.graph_break_count
            assert shown.steps.count == fresh.steps.count
            assert len(shown.log) == len(fresh.log)


# ------------------------------------------------------------ the pieces


def test_timeline_checkpoints_rebuild_the_same_store() -> None:
    evs = [typed(e) for e in events_of("many_breaks")]
    tl = Timeline(checkpoint_every=20)
    full = Session()
    for i in range(0, len(evs), 7):
        batch = evs[i : i + 7]
        tl.extend(batch)
        full.apply_all(batch)
        tl.offer_checkpoint(min(i + 7, len(evs)), full)
    assert len(tl._checkpoints) >= 5
    for pos in (0, 1, 19, 20, 21, 77, 150, len(evs) - 1, len(evs)):
        built = tl.build(pos)
        fresh = Session().apply_all(evs[:pos])
        assert built.events == fresh.events
        assert built.compile.compile_count == fresh.compile.compile_count
        assert [f.entries for f in built.compile.frames_sorted()] == [f.entries for f in fresh.compile.frames_sorted()]
    # a built store is a copy: folding into it leaves the checkpoints alone
    snap = copy.deepcopy(tl._checkpoints[0][1].events)
    s = tl.build(30)
    s.apply_all(evs[30:])
    assert tl._checkpoints[0][1].events == snap
    # forward in place
    s = tl.build(10)
    same = tl.build(40, s, 10)
    assert same is s and same.events == 40
    assert tl.next_mark(0) > 0 and tl.prev_mark(tl.next_mark(0)) == 0


def test_handoff_keeps_one_wakeup_in_flight() -> None:
    wakes = []
    h = Handoff(lambda: wakes.append(1), max_pending=10_000)
    for i in range(100):
        h.put([{"kind": "note", "t": float(i)}])
    assert len(wakes) == 1 and h.pending == 100
    taken = 0
    while h.take() is not None:
        taken += 1
    assert taken == 100 and h.pending == 0
    h.put([{"kind": "note", "t": 0.0}])
    assert len(wakes) == 2  # re-armed by the empty take


@run_async
async def test_idle_screen_repaints_nothing() -> None:
    app = replay_app("many_breaks")
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        main = main_of(app)
        before = [v.updates for v in main.views()]
        refreshes = app.view_refreshes
        await pilot.pause(1.0)
        assert [v.updates for v in main.views()] == before
        assert app.view_refreshes == refreshes


@run_async
async def test_live_clock_repaints_only_the_header() -> None:
    feed = QueueFeed()
    feed.push(_running())
    now = [1700000010.0]
    app = CtmonApp(feed, launched=True, clock=lambda: now[0])
    async with app.run_test(size=WIDE) as pilot:
        await wait_applied(pilot, len(_running()))
        main = main_of(app)
        header = main.query_one(HeaderBar)
        others = [v for v in main.views() if v is not header]
        before = [v.updates for v in others]
        h0 = header.updates
        assert "00:00:10" in screen_text(app)
        now[0] += 5
        await pilot.pause(1.3)
        assert header.updates > h0 and "00:00:15" in screen_text(app)
        assert [v.updates for v in others] == before


@run_async
async def test_steps_mark_compile_paying_steps() -> None:
    app = replay_app("multi_gpu")
    async with app.run_test(size=WIDE) as pilot:
        await wait_loaded(pilot)
        steps = main_of(app).query_one(StepsPanel)
        plain = steps.render_text().plain
        assert "!" in plain.splitlines()[-2]
        assert "last" in plain and "p50" in plain and "p90" in plain and "max" in plain and " ms" in plain


@run_async
async def test_no_color_keeps_every_text_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = []
    for env in (None, "1"):
        if env:
            monkeypatch.setenv("NO_COLOR", env)
        app = replay_app("multi_gpu")
        async with app.run_test(size=SMALL) as pilot:
            await wait_loaded(pilot)
            texts.append(screen_text(app))
            if env:
                assert app.no_color
                svg = app.export_screenshot()
                assert "#ff00ff" not in svg.lower()  # no magenta for compile steps
    assert texts[0] == texts[1]
    assert "!" in texts[1] and "CRIT" in texts[1]


# ------------------------------------------------------------------- cli


def _ctmon(*args: str, cwd: str = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "ctmon", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_replay_cli_errors_are_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = _ctmon("replay", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
    usage = _ctmon("replay")
    assert usage.returncode == 2 and "replay: a recording is required" in usage.stderr
    no_tty = _ctmon("replay", fixture("healthy"))
    assert no_tty.returncode == 2 and "needs a terminal" in no_tty.stderr
    assert "[ and ]" in _ctmon("replay", "--help").stdout


@pytest.mark.slow
def test_attach_without_a_terminal_runs_headless(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rec = tmp_path / "rec.jsonl"
    proc = _ctmon("attach", "-o", str(rec), os.path.join(WORKLOADS, "crash.py"), "exit")
    assert proc.returncode == 3, proc.stderr
    assert "ctmon: recording:" in proc.stderr and rec.exists()
    proc = _ctmon("attach", "--no-tui", "-o", str(rec), os.path.join(WORKLOADS, "crash.py"), "sysexit")
    assert proc.returncode == 4, proc.stderr


@pytest.mark.slow
@run_async
async def test_a_firehose_does_not_starve_the_screen(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """While a large backlog is folded, the screen keeps being drawn (the
    benchmark measures the rate; this only guards against starvation)."""
    import importlib.util
    import time

    spec = importlib.util.spec_from_file_location(
        "recordings", os.path.join(ROOT, "benchmarks", "jobs", "recordings.py")
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    events = bench.storm_events(150_000)  # enough to take a few seconds to fold
    path = str(tmp_path / "firehose.jsonl")
    bench.write(events, path)
    app = CtmonApp(RecordingFeed(path))
    paints: list[float] = []
    real_display = app._display

    def counting_display(screen, renderable):  # type: ignore[no-untyped-def]
        if renderable is not None and not app._batch_count:
            paints.append(time.perf_counter())
        return real_display(screen, renderable)

    app._display = counting_display  # type: ignore[method-assign]
    folds: list[float] = []
    real_fold = app.pump.fold

    def timed_fold(deadline):  # type: ignore[no-untyped-def]
        out = real_fold(deadline)
        if out[0]:
            folds.append(time.perf_counter())
        return out

    app.pump.fold = timed_fold  # type: ignore[method-assign]
    async with app.run_test(size=WIDE) as pilot:
        # the window is the folding, from its first slice to its last; the
        # findings then run once over the whole history, a separate cost
        assert await wait_until(pilot, lambda: app.applied == len(events), 120)
        await wait_loaded(pilot, timeout=120)
        start, end = folds[0], folds[-1]
        during = [p for p in paints if start <= p <= end]
        # a starved screen paints once or not at all however long the fold
        assert len(during) >= max(2, int((end - start) * 3)), (len(during), end - start)
