"""Folding in bulk is folding one by one.

``Session.apply_all`` takes the kinds a long run is made of together: step
batches are packed by numpy, output chunks of both streams are split into
lines in one pass, and neither waits on the compiles and notes between them.
Whatever the mix and wherever the slices fall, the store must be the one
``apply`` builds event by event: the same lines in the same order, the same
step arrays, clocks and revision counters."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctmon.store import Session
from ctmon.store.output import MAX_LINE_CHARS
from ctmon.wire import events as E

TEXT = st.text(alphabet="ab\n\r", max_size=12)
LONG = st.integers(1, 3).map(lambda k: "z" * (MAX_LINE_CHARS + k) + "\n")


@st.composite
def runs(draw: Any) -> list[Any]:
    """A session start, then a mix of output, step batches (mostly in order,
    sometimes a gap, a repeat or an empty one), device windows, notes, and
    perhaps an exit."""
    t = 1000.0
    evs: list[Any] = [E.SessionStart(t=t)]
    next_i = 0
    for _ in range(draw(st.integers(0, 60))):
        t += draw(st.sampled_from([0.001, 0.5, -0.2]))  # clocks are not always kind
        what = draw(st.sampled_from(["out", "out", "line", "steps", "steps", "device", "note", "gap"]))
        if what == "out":
            data = draw(st.one_of(TEXT, LONG))
            evs.append(E.Output(t=t, stream=draw(st.sampled_from(["stdout", "stderr"])), data=data))
        elif what == "line":  # the usual chunk: whole lines
            lines = draw(st.lists(st.text(alphabet="ab", max_size=5), min_size=1, max_size=3))
            stream = draw(st.sampled_from(["stdout", "stderr"]))
            evs.append(E.Output(t=t, stream=stream, data="".join(x + "\n" for x in lines)))
        elif what in ("steps", "gap"):
            deltas = draw(st.lists(st.integers(0, 3_000_000_000), max_size=8))
            i0 = next_i if what == "steps" else draw(st.sampled_from([next_i + 3, max(0, next_i - 2)]))
            evs.append(E.Steps(t=t, src="optimizer", i0=i0, ns=deltas))
            next_i = max(next_i, i0 + len(deltas))
        elif what == "device" and next_i > 1:
            i1 = draw(st.integers(1, next_i))
            evs.append(E.DeviceTime(t=t, src="optimizer", i0=i1 - 1, i1=i1, ms=draw(st.floats(0.1, 50.0))))
        elif what == "note":
            evs.append(E.Note(t=t, message="a note"))
    if draw(st.booleans()):
        evs.append(E.Exit(t=t + 1, code=0))
        evs.append(E.Output(t=t + 1, stream="stdout", data="after the exit\n"))
    return evs


def _state(s: Session) -> dict[str, Any]:
    series = {
        src: (
            x.ns.tolist(),
            x.starts.tolist(),
            x.t0s.tolist(),
            x.maxes.tolist(),
            None if x.eff_ms is None else [None if math.isnan(v) else v for v in x.eff_ms],  # nan != nan
            None if math.isnan(x._last_t) else x._last_t,
        )
        for src, x in s.steps.series.items()
    }
    out = s.output
    return {
        "lines": list(out.lines),
        "totals": (out.total_lines, out.total_chars),
        "partial": {k: v for k, v in out._partial.items() if v},
        "series": series,
        "clock": (s.events, s.first_t, s.last_t, s.bad_events),
        "rev": dict(s.rev),
        "exit": s.exit,
    }


@settings(max_examples=300, deadline=None)
@given(runs(), st.lists(st.integers(1, 40), min_size=1, max_size=8))
@pytest.mark.slow
def test_apply_all_in_any_slices_is_apply_one_by_one(events: list[Any], cuts: list[int]) -> None:
    one = Session()
    for ev in events:
        one.apply(ev)
    bulk = Session()
    i = k = 0
    while i < len(events):
        size = cuts[k % len(cuts)]
        bulk.apply_all(events[i : i + size])
        i, k = i + size, k + 1
    assert _state(bulk) == _state(one)


def test_a_storm_of_both_streams_between_compiles_keeps_its_order() -> None:
    """The case the bulk path exists for, spelled out: lines of stdout and
    stderr, multi-line chunks, with compiles between them."""
    evs: list[Any] = [E.SessionStart(t=1.0)]
    for k in range(50):
        evs.append(E.Output(t=2.0 + k, stream="stderr" if k % 3 else "stdout", data=f"w{k}\nx{k}\n"))
        evs.append(E.Note(t=2.0 + k, message=f"n{k}"))
    s = Session().apply_all(evs)
    got = [(ln.stream, ln.text) for ln in s.output.lines]
    want = [(("stderr" if k % 3 else "stdout"), f"{c}{k}") for k in range(50) for c in "wx"]
    assert got == want
