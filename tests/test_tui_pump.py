"""The viewer's pump: the one path events take into the store, and its
repaint decisions (ctmon/tui/pump.py)."""

from __future__ import annotations

from time import perf_counter
from typing import Any

from ctmon.store import Session
from ctmon.tui.pump import BACKLOG_EVENTS, SLICE_EVENTS, Pump
from ctmon.tui.timeline import Timeline
from ctmon.wire.events import Note


def _notes(n: int, t0: float = 0.0) -> list[Any]:
    return [Note(t=t0 + i, level="info", message=f"note {i}") for i in range(n)]


def _pump(timeline: Timeline | None = None) -> tuple[Pump, list[int]]:
    wakes: list[int] = []
    return Pump(Session(), timeline, lambda: wakes.append(1)), wakes


def test_a_slice_out_of_time_carries_the_rest_of_its_batch() -> None:
    tl = Timeline()
    pump, _ = _pump(tl)
    total = 2 * SLICE_EVENTS + 36  # a batch of three slices, the last short
    pump.handoff.put(_notes(total))
    n, out_of_time = pump.fold(perf_counter() - 1)  # the deadline has passed: one slice
    assert (n, out_of_time) == (SLICE_EVENTS, True)
    assert pump.backlog and not pump.empty and pump.handoff.pending == 0
    while not pump.empty:
        pump.fold(perf_counter() - 1)
    assert pump.applied == total and pump.store.events == total
    assert len(tl) == total  # each batch reached the timeline once, carried or not


def test_folding_before_a_repaint_leaves_the_wakeup_in_flight() -> None:
    pump, wakes = _pump()
    pump.handoff.put(_notes(10))
    assert wakes == [1]
    n, wake = pump.before_refresh()
    assert n == 10 and not wake and pump.applied == 10
    # the Ingest message posted for that batch is still on its way: no second one
    pump.handoff.put(_notes(5, 10.0))
    assert wakes == [1]
    # the budgeted path, answering it, folds the rest and re-arms the wake-up
    assert pump.fold(perf_counter() + 5) == (5, False)
    pump.handoff.put(_notes(1, 20.0))
    assert wakes == [1, 1]


def test_a_backlog_is_left_to_the_budgeted_path() -> None:
    pump, _ = _pump()
    pump.handoff.hold = True
    pump.handoff.put(_notes(BACKLOG_EVENTS + 1))
    n, wake = pump.before_refresh()
    assert n == 0 and pump.applied == 0
    assert not pump.handoff.hold and not wake  # the backlog already woke the UI


def test_compiles_repaint_soon_the_steady_stream_calmly() -> None:
    pump, _ = _pump()
    pump.refreshing(force=False)  # a repaint just happened
    pump.store.apply({"kind": "compile_start", "t": 1.0, "id": "0/0", "name": "f", "file": "/a.py", "line": 1})
    assert pump.refresh_delay() <= pump.refresh_min_s and not pump.handoff.hold
    pump.store.apply({"kind": "steps", "t": 2.0, "src": "optimizer", "i0": 0, "ns": [1_000_000] * 4})
    delay = pump.refresh_delay()
    assert pump.refresh_min_s < delay <= pump.steady_refresh_s and pump.handoff.hold
    # a replay repaints everything at the quick cadence
    assert pump.refresh_delay(always_urgent=True) <= pump.refresh_min_s and not pump.handoff.hold
