"""Replay's timeline: the store at any position, rebuilt from a snapshot and
the recording read again, is the store folded from the start; snapshots keep
step series by reference, not by copy."""

from __future__ import annotations

import os

import pytest
from golden import recordings

from ctmon.read.feeds import FileBatch, RecordingFeed
from ctmon.report.build import build_report
from ctmon.store import Session
from ctmon.store.snapshots import restored, snapshot
from ctmon.tui.timeline import Timeline
from ctmon.wire.events import Steps

# the GPU ones have device windows (retimed steps), the tour every kind of event
CHOSEN = [
    r
    for r in recordings()
    if os.path.basename(r)
    in ("tour.jsonl", "h100_reduce_overhead.jsonl", "h100_inference_buckets.jsonl", "graph_break_zoo.jsonl")
]


def loaded(path: str, every: int) -> tuple[Timeline, Session, list]:
    """A timeline and the fully loaded store, as the viewer makes them."""
    tl = Timeline(checkpoint_every=every, path=path)
    full = Session()
    events: list = []
    for batch in RecordingFeed(path).batches():
        tl.extend(batch, batch.end if isinstance(batch, FileBatch) else None)
        full.apply_all(batch)
        events.extend(batch)
        tl.offer_checkpoint(len(events), full)
    return tl, full, events


@pytest.mark.parametrize("path", CHOSEN, ids=os.path.basename)
def test_every_position_rebuilds_to_the_store_folded_from_the_start(path: str) -> None:
    tl, full, events = loaded(path, every=7)
    assert len(tl) == len(events) and len(tl._checkpoints) >= 1
    assert not tl._kept  # a recording's events are read again from the file, not kept
    positions = sorted(
        {0, 1, 5, len(events) // 3, len(events) // 2, len(events) - 1, len(events)}
        | {p for p, _ in tl._checkpoints}
        | {p + 1 for p, _ in tl._checkpoints if p < len(events)}
    )
    for pos in positions:
        built = tl.build(pos)
        fresh = Session().apply_all(events[:pos])
        assert build_report(built) == build_report(fresh), pos
        assert built.events == fresh.events
    # and going forward in place from one position to a later one
    current, at = tl.build(2), 2
    for pos in (3, len(events) // 2, len(events)):
        current, at = tl.build(pos, current, at), pos
    assert build_report(current) == build_report(full)


def test_snapshots_keep_step_series_by_reference() -> None:
    full = Session()
    for b in range(200):
        full.apply(Steps(t=1.0 + b, src="optimizer", i0=12 * b, ns=[1_000_000] * 12))
    snap = snapshot(full)
    for b in range(200, 400):
        full.apply(Steps(t=1.0 + b, src="optimizer", i0=12 * b, ns=[2_000_000] * 12))
    mark = snap.steps.current
    assert mark is not None and not hasattr(mark, "ns")  # a mark: lengths, not copies
    back = restored(snap)
    assert back.steps.count == 2400 and full.steps.count == 4800
    st = back.steps.current.stats() if back.steps.current else None
    assert st is not None and st.max_ms == 1.0
    back.apply(Steps(t=500.0, src="optimizer", i0=2400, ns=[3_000_000]))  # a restored store folds on
    assert back.steps.count == 2401 and full.steps.count == 4800
