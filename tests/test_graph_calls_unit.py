"""The agent's graph timing where it cannot find a compile's frame or missed
a compile, and the store where a recording has no timing: calls are unknown
(null), never 0."""

from __future__ import annotations

import logging
import types

import torch
import torch._dynamo.eval_frame  # noqa: F401 - skip_code, as a compile would have imported it

from ctmon.agent.graph_calls import GraphCalls, _graph_names, _timed
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


class _CompileEnd(logging.Handler):
    """Calls ``on_compile_end`` where the agent's trace handler does: on a
    compile's ``compilation_metrics`` record, unless ``seen`` is off (the
    job had switched PyTorch's trace logger off)."""

    def __init__(self, graphs: GraphCalls) -> None:
        super().__init__(logging.DEBUG)
        self.graphs, self.seen = graphs, True

    def handle(self, record: logging.LogRecord) -> bool:
        md = getattr(record, "metadata", None)
        if self.seen and isinstance(md, dict) and "compilation_metrics" in md:
            self.graphs.on_compile_end()
        return True


def test_a_graph_whose_compile_went_unseen_is_not_counted_under_the_next(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    trace_log = logging.getLogger("torch.__trace")
    g = GraphCalls()
    end = _CompileEnd(g)
    monkeypatch.setattr(trace_log, "level", logging.DEBUG)
    monkeypatch.setattr(trace_log, "propagate", False)
    monkeypatch.setattr(trace_log, "handlers", [end])
    job = types.ModuleType("job_module")
    exec("def double(x):\n    return x * 2\n\n\ndef inc(x):\n    return x + 1\n", job.__dict__)
    double = torch.compile(job.double, backend="eager")
    inc = torch.compile(job.inc, backend="eager")
    end.seen = False
    double(torch.ones(3))  # its graph is installed unseen
    end.seen = True
    inc(torch.ones(3))
    inc(torch.ones(3))
    double(torch.ones(3))
    assert g.rows == {("<string>", 5, "inc"): [2, g.rows[("<string>", 5, "inc")][1]]}
    assert g.wrapped == 1


def test_without_the_compiles_result_the_newest_graph_is_its_own() -> None:
    scope = {"__compiled_fn_3_ab_cd": len, "__compiled_fn_12_ef": len, "__compiled_fn_x": len, "other": 1}
    assert _graph_names({}, scope) == ["__compiled_fn_12_ef"]
    assert _graph_names({"guarded_code": None}, scope) == []  # a failed compile installed nothing


def test_the_graphs_a_compiles_code_loads_nested_code_included() -> None:
    class Guarded:
        code = compile(
            "def outer():\n    def inner():\n        return __compiled_fn_3_b()\n    return __compiled_fn_2_a(), len\n",
            "<out>",
            "exec",
        )

    assert sorted(_graph_names({"guarded_code": Guarded()}, {})) == ["__compiled_fn_2_a", "__compiled_fn_3_b"]
