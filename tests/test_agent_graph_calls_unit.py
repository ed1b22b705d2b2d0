"""The agent's graph counting and timing: its windows, the graphs it lets go,
where it cannot find a compile's frame or missed a compile; and the store
where a recording has no timing: calls are unknown (null), never 0."""

from __future__ import annotations

import gc
import logging
import threading
import types
import weakref

import pytest
import torch
import torch._dynamo.eval_frame  # noqa: F401 - skip_code, as a compile would have imported it

from ctmon.agent import graph_calls
from ctmon.agent.graph_calls import GraphCalls, _counted, _graph_names, _timed
from ctmon.agent.hotness import HotnessSampler
from ctmon.store.hotness import HotnessState
from ctmon.wire import events as E
from ctmon.wire import protocol
from ctmon.wire.decode import from_dict


def test_a_compiler_laid_out_otherwise_turns_the_timing_off() -> None:
    g = GraphCalls()
    g.on_compile_end()  # not inside torch's _compile: no frame to read
    assert g.on is False and g.missed == 1 and g.frames == {}


def test_the_counter_and_the_timer_pass_everything_through() -> None:
    counted = _counted(lambda *a, **k: (a, k))
    ns = [0]
    timed = _timed(counted, ns)
    assert counted(1, x=2) == ((1,), {"x": 2}) and timed(1, 2, x=3) == ((1, 2), {"x": 3})
    assert counted.cache_info().misses == 2 and ns[0] > 0 and timed.__wrapped__ is counted  # type: ignore[attr-defined]


SECOND = 1_000_000_000
T0 = 10 * SECOND  # when timing began (the clock is the test's)
KEY = ("m.py", 3, "f")


def _installed(n: int = 1) -> tuple[GraphCalls, dict[str, object]]:
    g = GraphCalls()
    g.on, g.span = True, (0, T0)
    scope: dict[str, object] = {f"__compiled_fn_{i}_x": (lambda *a: None) for i in range(n)}
    g.install(scope, list(scope), KEY)
    return g, scope


def test_graphs_called_fast_are_timed_one_second_in_so_many() -> None:
    g, scope = _installed()
    name = "__compiled_fn_0_x"
    every = graph_calls.WINDOW_EVERY
    assert g.timing and scope[name] is g.graphs[0].timed  # timed from the start
    g.on_second(T0)  # the first check only notes where the calls stand
    timed_seconds = []
    for s in range(1, 3 * every + 1):
        for _ in range(300):  # 300 calls a second: fast
            scope[name]()  # type: ignore[operator]
        g.on_second(T0 + s * SECOND)
        timed_seconds.append(g.timing)
        assert scope[name] is (g.graphs[0].timed if g.timing else g.graphs[0].counted)
    assert timed_seconds == ([False] * (every - 1) + [True]) * 3
    assert g.read() == [(KEY, 3 * every * 300, g.frames[KEY].ns[0])]  # every call counted, timed or not
    # open: the first second, then the second after each window's check, and from the last one on
    end = T0 + 3 * every * SECOND
    assert g.timed_span(end) == 3 * SECOND and g.timed_span(end + SECOND) == 4 * SECOND


def test_windows_keep_to_their_share_of_the_time_where_checks_come_unevenly() -> None:
    """In a loop whose steps the clock counts, its checks come a second
    apart, then three (a counting stretch has none): the windows are still
    open a WINDOW_EVERY-th of the time, not one check in so many (which,
    opening at the stretches, was 3 s in 8 with a check in four)."""
    g, scope = _installed()
    name = "__compiled_fn_0_x"
    g.on_second(T0)
    now = T0
    for gap in [SECOND, 3 * SECOND] * 20:  # 80 s
        for _ in range(gap // SECOND * 300):
            scope[name]()  # type: ignore[operator]
        now += gap
        g.on_second(now)
    share = (g.timed_span(now) - SECOND) / (now - T0 - SECOND)  # less the first second, timed before any check
    assert abs(share - 1 / graph_calls.WINDOW_EVERY) <= 0.05, share


def test_each_window_weighs_the_time_it_stands_for() -> None:
    """A window's weight is the time from the last window's opening to its
    own over the last window's length: 1 from the start, then the ratio of
    the windows' pace (a fourth of the time: 4; the clock's quarter-seconds
    in every ~3.5: 14)."""
    g, scope = _installed()
    name = "__compiled_fn_0_x"
    at = [T0]

    def run(seconds: float, counting: bool = False, per_s: int = 300) -> None:
        for _ in range(int(per_s * seconds)):
            scope[name]()  # type: ignore[operator]
        at[0] += int(seconds * SECOND)
        g.on_second(at[0], counting)

    assert g.weight == 1.0
    g.on_second(T0)
    run(1)  # the first window closes after 1 s: a fourth of the time from here
    assert not g.timing and g.weight == 1.0
    for _ in range(3):
        run(1)
    assert g.timing and g.weight == 4.0  # opened 4 s after the last one, which was open 1 s
    run(1, counting=True)  # the clock counts its steps: closed while it does
    run(3)  # and times a quarter of a second: open
    run(0.25, counting=True)
    run(3.25)
    assert g.timing and g.weight == 14.0  # 3.5 s from the last opening, which was open 0.25 s
    run(0.25, counting=True)
    run(600)  # no steps for 10 minutes, the graphs still called (an evaluation), then timed steps again
    assert g.timing and g.weight == graph_calls.MAX_WEIGHT  # the pause is not step time
    run(1, per_s=50)  # the calls slow down: timed whole, each ns for itself
    assert g.timing and g.weight == 1.0


def test_the_sampler_weighs_each_window_by_the_time_it_stands_for() -> None:
    """The run's first second timed whole at 10 % in graphs, then a
    quarter-second window at 50 % standing for 3.5 s: the share is the
    time-weighted one (1.85 s of 4.5), not the windows' plain sum (18 %)."""

    class Windows:  # what the sampler reads of GraphCalls
        on, weight, ns, span = True, 1.0, 0, 0

        def read(self) -> list[tuple[tuple[str, int, str], int, int]]:
            return [(KEY, 10, self.ns)]

        def timed_span(self, now: int) -> int:
            return self.span

    windows = Windows()
    steps = [1]
    sampler = HotnessSampler(lambda: steps[0], windows)  # type: ignore[arg-type]

    def tick() -> None:  # from a thread of its own, as the sender's: the main thread is the job's
        t = threading.Thread(target=sampler.tick)
        t.start()
        t.join()
        steps[0] += 1  # each sample's step ends, so it counts

    tick()
    windows.ns, windows.span = SECOND // 10, SECOND
    tick()
    windows.weight, windows.ns, windows.span = 14.0, windows.ns + SECOND // 8, windows.span + SECOND // 4
    tick()
    tick()
    state = HotnessState()
    for ev in sampler._send():
        state.on_hotness(from_dict(protocol.decode(protocol.encode(ev))))  # type: ignore[arg-type]
    # the frame's share, as the store takes it once there are samples enough
    assert state.graphs[KEY][1] / state.span_ns == pytest.approx(1.85 / 4.5, abs=1e-3)


def test_graphs_called_slowly_stay_timed() -> None:
    g, scope = _installed()
    name = "__compiled_fn_0_x"
    for s in range(6):
        for _ in range(50):
            scope[name]()  # type: ignore[operator]
        g.on_second(T0 + (s + 1) * SECOND)
    assert g.timing and scope[name] is g.graphs[0].timed
    assert g.timed_span(T0 + 7 * SECOND) == 7 * SECOND


def test_a_graph_dynamo_deletes_is_let_go_its_calls_kept() -> None:
    g, scope = _installed(2)
    graph = scope["__compiled_fn_0_x"]
    for _ in range(5):
        scope["__compiled_fn_0_x"]()  # type: ignore[operator]
    gone = weakref.ref(g.graphs[0].counted)
    del scope["__compiled_fn_0_x"], graph  # Dynamo's clean-up
    g.on_second(T0 + SECOND)
    gc.collect()
    assert gone() is None  # nothing of ctmon's keeps the graph alive
    assert [gr.name for gr in g.graphs] == ["__compiled_fn_1_x"] and g.read() == [(KEY, 5, g.frames[KEY].ns[0])]


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
    assert [(key, calls) for key, calls, _ in g.read()] == [(("<string>", 5, "inc"), 2)]
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
