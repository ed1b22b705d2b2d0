"""The agent's graph timing where it cannot find a compile's frame, and the
store where a recording has no timing: calls are unknown (null), never 0."""

from __future__ import annotations

import torch._dynamo.eval_frame  # noqa: F401 - skip_code, as a compile would have imported it

from ctmon.agent.graph_calls import GraphCalls, _timed
from ctmon.store.hotness import HotnessState
from ctmon.wire import events as E


def test_a_compiler_laid_out_otherwise_turns_the_timing_off() -> None:
    g = GraphCalls()
    g.on_compile_end()  # not inside torch's _compile: no frame to read
    assert g.on is False and g.missed == 1 and g.rows == {}


def test_the_wrapper_counts_times_and_passes_everything_through() -> None:
    row = [0, 0]
    f = _timed(lambda *a, **k: (a, k), row)
    assert f(1, 2, x=3) == ((1, 2), {"x": 3})
    assert row[0] == 1 and row[1] > 0 and f.__wrapped__ is not None  # type: ignore[attr-defined]


def test_calls_are_unknown_without_timing_and_counted_with_it() -> None:
    class Code:
        file, line, name = "m.py", 3, "f"

    class Frame:
        code = Code()

    untimed = HotnessState()
    untimed.on_hotness(E.Hotness(t=0.0, counts={"graph": 30, "other": 10}, frames=[("m.py", 3, "f", 30, 0)]))
    rt = untimed.frame_runtime(Frame())  # type: ignore[arg-type]
    assert rt is not None and rt["calls"] is None and rt["timed"] is False and rt["share"] == 0.75

    timed = HotnessState()
    timed.on_hotness(
        E.Hotness(
            t=0.0,
            counts={"graph": 30, "other": 10},
            frames=[("m.py", 3, "f", 30, 0)],
            graphs=[("m.py", 3, "f", 1234, 500_000_000)],
            span_ns=1_000_000_000,
        )
    )
    rt = timed.frame_runtime(Frame())  # type: ignore[arg-type]
    assert rt is not None and rt["calls"] == 1234 and rt["timed"] is True and rt["share"] == 0.5
    assert timed.share("graph") == 0.5 and timed.share("other") == 0.5
