"""Calls of every compiled graph, counted, and the host time they take,
timed in windows.

Dynamo runs a compiled frame's graph through a function it installs in the
frame's module globals (``__compiled_fn_<n>_<uuid>``), which the frame's
new bytecode loads by name on every call. At the end of each compile -- on
the compiling thread, before that bytecode first runs -- ctmon puts its own
function in the place of the names that bytecode loads, calling the original:

* always a counter: ``functools.lru_cache(maxsize=0)`` around the graph,
  which CPython runs in C as "count a miss, call the function". It adds no
  Python frame: ~45 ns a call warm, where a Python wrapper costs ~185 ns warm
  and 1-1.4 µs on the caches a host-bound step leaves (benchmarks/hook_calls.py cold);
* while a timing window is open, a timing wrapper around that counter: one
  Python call and two clock reads.

Calls are exact. Host time is timed for the whole run where graphs are
called fewer than FAST_CALLS_PER_S times a second (the wrapper then costs
the job well under 0.1 %), else a WINDOW_EVERY-th of the time -- and where
the step clock counts its steps (a host-bound loop, ctmon/agent/steps.py),
in the quarter-seconds it times them, with them: a fourteenth of the time,
spread through the run, where the wrapper's µs are the job's. A
region's share is its graphs' timed nanoseconds over the time the windows
were open (``timed_span``), a sample of the run as the sampler's is
(ctmon/agent/hotness.py), each window weighed by the time it stands for
(``weight``): the first, open from the start and timing the run's slower
first steps whole, would otherwise count for as much as a minute of
quarter-second windows after it (their shares read 7 % low on the CPU box,
benchmarks/region_shares.py windows). Timing is exact where sampling is not: a sample
lands where the job's thread lets the GIL go, so a small region made mostly
of Python (AOTAutograd's epilogue after its last kernel launch) reads low
when sampled (docs/PERFORMANCE.md). On CUDA this is host time: the
launches, not what the GPU runs.

Windows open and close on the job's own thread (``on_second``, from the step
clock's once-a-second check), so a name is never written back after
Dynamo's clean-up, on that thread, has deleted it. A graph whose name is
gone is let go at the next check (its calls kept): no compiled graph -- nor
the memory its CUDA graphs hold -- outlives Dynamo's use of it here.

The timing wrapper is marked for Dynamo to skip (its code would otherwise
be a new frame for Dynamo to look at, on every call from a compiled frame),
and nothing else changes: Dynamo's guards never read these names, and its
clean-up deletes the name whatever it holds.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

PREFIX = "__compiled_fn"
_CONVERT_FRAME = "/torch/_dynamo/convert_frame.py"
MAX_DEPTH = 64  # the compile's frame sits ~10 frames above the trace handler
MAX_FRAMES = 500  # compiled frames tracked, as the sampler (a recompile storm makes many)
FAST_CALLS_PER_S = 200  # graph calls a second above which time is timed in windows
WINDOW_EVERY = 4  # then a fourth of the time
MAX_OWED_NS = 8_000_000_000  # how much of its past the windows' share remembers
# A window's weight at most: a quarter-second window stands for ~3.5 s (14);
# one after a long pause in the steps (an evaluation) would otherwise stand
# for the pause too, which is not step time.
MAX_WEIGHT = 16.0

CodeKey = tuple[str, int, str]


def _counted(fn: Callable[..., Any]) -> Any:
    """``fn``, its calls counted in C (``cache_info().misses``): an
    lru_cache of size 0 keeps nothing and calls ``fn`` every time."""
    return functools.lru_cache(maxsize=0)(fn)


def _timed(fn: Callable[..., Any], ns: list[int]) -> Callable[..., Any]:
    clock = time.perf_counter_ns

    def ctmon_graph_call(*args: Any, **kwargs: Any) -> Any:
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            ns[0] += clock() - t0

    ctmon_graph_call.__wrapped__ = fn  # type: ignore[attr-defined]
    return ctmon_graph_call


class _Frame:
    """One compiled frame's graphs: the calls of those already let go and
    the counters of those in place (one tuple, replaced whole: the sender
    thread reads it as the job's thread changes it), and their timed host
    ns (one cell, that all the frame's timing wrappers add to)."""

    __slots__ = ("graphs", "ns")

    def __init__(self) -> None:
        self.graphs: tuple[int, tuple[Any, ...]] = (0, ())
        self.ns = [0]

    def calls(self) -> int:
        gone, counters = self.graphs
        return gone + sum(c.cache_info().misses for c in counters)

    def add(self, counter: Any) -> None:
        gone, counters = self.graphs
        self.graphs = (gone, (*counters, counter))

    def let_go(self, counter: Any) -> None:
        gone, counters = self.graphs
        self.graphs = (gone + counter.cache_info().misses, tuple(c for c in counters if c is not counter))


class _Graph:
    """One graph's place: the module globals and name Dynamo installed it
    under, and what ctmon puts there, counting and timing."""

    __slots__ = ("scope", "name", "counted", "timed", "frame")

    def __init__(self, scope: dict[str, Any], name: str, counted: Any, timed: Any, frame: _Frame) -> None:
        self.scope, self.name, self.counted, self.timed, self.frame = scope, name, counted, timed, frame


class GraphCalls:
    """Per compiled frame (its code's file, first line and name, as the
    store names frames): its graphs' calls and timed host ns, cumulative,
    and the time the timing windows were open."""

    def __init__(self) -> None:
        self.frames: dict[CodeKey, _Frame] = {}
        self.graphs: list[_Graph] = []  # the graphs in place, on the job's thread
        self.wrapped = 0  # graphs wrapped so far
        self.missed = 0  # compiles whose frame could not be found (a torch that moved its compiler)
        self.on: bool | None = None  # None: not yet known (Dynamo is imported by the first compile)
        self.timing = True  # a window is open: timing wrappers in place
        # (ns the closed windows were open, when the open one opened or 0):
        # one tuple, so the sender thread reads both at once
        self.span: tuple[int, int] = (0, time.perf_counter_ns())
        self._lock = threading.Lock()  # a compile on another thread than the job's
        # ns of window the fast calls are owed: what keeps the windows open a
        # WINDOW_EVERY-th of the time where the checks come unevenly
        self._owed = 0
        self._last: tuple[int, int] | None = None  # (ns, calls) at the last check
        self._paced = False  # the step clock counted since the last check
        # What an ns timed in the open window stands for: the time from the
        # last window's opening to this one's over the last window's length
        # (1 from the start, and while the window stays open); the sampler
        # weighs what it reads by it. The last window: (opened, closed) or None.
        self.weight = 1.0
        self._window: tuple[int, int] | None = None

    def read(self) -> list[tuple[CodeKey, int, int]]:
        """Per frame: (key, calls, timed ns); from any thread."""
        return [(key, frame.calls(), frame.ns[0]) for key, frame in list(self.frames.items())]

    def timed_span(self, now: int) -> int:
        """The ns the timing windows have been open, up to ``now``."""
        closed, since = self.span
        return closed + (now - since if since else 0)

    def _can_wrap(self) -> bool:
        if self.on is None:
            # Without this Dynamo would take the wrapper, called from a
            # compiled frame, for a new frame to compile.
            skip_code = getattr(sys.modules.get("torch._dynamo.eval_frame"), "skip_code", None)
            try:
                skip_code(_timed(len, [0]).__code__)  # type: ignore[misc]  # all wrappers share one code object
                self.on = True
            except Exception:
                self.on = False
        return self.on

    def on_compile_end(self) -> None:
        """On the compiling thread, from the handler of the compile's
        ``compilation_metrics`` record: count (and time) the graphs it installed."""
        if not self._can_wrap():
            return
        f: FrameType | None = sys._getframe(1)
        for _ in range(MAX_DEPTH):
            if f is None:
                break
            code = f.f_code
            if code.co_name == "_compile" and code.co_filename.endswith(_CONVERT_FRAME):
                break
            f = f.f_back
        else:
            f = None
        local = f.f_locals if f is not None else {}
        scope, frame_code = local.get("globals"), local.get("code")
        if not isinstance(scope, dict) or frame_code is None:
            # A torch whose compiler this does not know: say nothing rather
            # than 0 calls (off, unless some graphs were already wrapped).
            self.missed += 1
            if not self.wrapped:
                self.on = False
            return
        key = (frame_code.co_filename, frame_code.co_firstlineno, frame_code.co_name)
        self.install(scope, _graph_names(local, scope), key)

    def install(self, scope: dict[str, Any], names: list[str], key: CodeKey) -> None:
        """Count (and, in a window, time) the graphs ``names`` of ``scope``,
        under the compiled frame ``key``."""
        with self._lock:
            fresh = [
                (name, fn)
                for name, fn in ((name, scope.get(name)) for name in names)
                if callable(fn) and not any(g.scope is scope and g.name == name for g in self.graphs)
            ]
            if not fresh:
                return  # a compile that made no graph (a frame with nothing to compile, a failed compile)
            frame = self.frames.get(key)
            if frame is None:
                if len(self.frames) >= MAX_FRAMES:
                    return
                frame = self.frames[key] = _Frame()
            for name, fn in fresh:
                counted = _counted(fn)
                graph = _Graph(scope, name, counted, _timed(counted, frame.ns), frame)
                frame.add(counted)
                self.graphs.append(graph)
                scope[name] = graph.timed if self.timing else counted
                self.wrapped += 1

    def on_second(self, now: int, counting: bool = False) -> None:
        """On the job's thread, about once a second (the step clock's
        check): let go of graphs Dynamo has, and open or close the window.
        ``counting``: the clock counts its steps from here on, untimed."""
        calls = 0
        with self._lock:
            kept = []
            for g in self.graphs:
                held = g.scope.get(g.name)
                if held is g.timed or held is g.counted:
                    kept.append(g)
                    calls += g.counted.cache_info().misses
                else:  # Dynamo deleted (or replaced) the name: the graph is no longer its
                    g.frame.let_go(g.counted)
            self.graphs = kept
            last, self._last = self._last, (now, calls)
            paced, self._paced = self._paced, counting
            if last is None or now <= last[0]:
                return
            dt = now - last[0]
            if (calls - last[1]) * 1e9 / dt <= FAST_CALLS_PER_S:
                self._owed = 0
                self._set(True, now)
                self.weight, self._window = 1.0, None  # timed whole from here on
                return
            if counting or paced:
                # The clock counts a host-bound loop's steps for a few
                # seconds, then times a quarter of one (steps.py): the graphs
                # are timed in that quarter, closed while it counts.
                self._owed = 0
                self._set(not counting, now)
                return
            # The checks do not come once a second in a loop whose steps the
            # clock counts (ctmon/agent/steps.py: a quarter of a second timed,
            # then three counted with no check), so a window is a share of the
            # time, not of the checks: open while the windows so far are
            # short of it.
            owed = self._owed + dt // WINDOW_EVERY - (dt if self.timing else 0)
            self._owed = max(-MAX_OWED_NS, min(MAX_OWED_NS, owed))
            self._set(self._owed >= 0, now)

    def _set(self, timing: bool, now: int) -> None:
        """Open or close the window (the lock held)."""
        if timing == self.timing:
            return
        for g in self.graphs:
            g.scope[g.name] = g.timed if timing else g.counted
        closed, since = self.span
        if timing:
            last = self._window
            if last is not None and last[1] > last[0]:
                self.weight = min(MAX_WEIGHT, (now - last[0]) / (last[1] - last[0]))
        else:
            self._window = (since, now)
        self.span = (closed, now) if timing else (closed + now - since, 0)
        self.timing = timing


def _graph_names(local: dict[str, object], scope: dict[str, object]) -> list[str]:
    """The graph names this compile installed: those its new bytecode loads.

    Not every unwrapped name in the module: a graph whose compile ended
    unseen (the job had switched the trace logger off) would be counted
    under this compile's frame. ``_compile``'s ``guarded_code`` is the
    compile's result (a GuardedCode, wrapped in a ConvertFrameReturn on
    newer torch); without it, the newest name (Dynamo numbers them in
    order) is this compile's."""
    if "guarded_code" in local:
        result = local["guarded_code"]
        out_code = getattr(getattr(result, "guarded_code", result), "code", None)
        if not isinstance(out_code, CodeType):
            return []  # a failed compile, or one with nothing to run: no graph
        return _loaded(out_code)
    numbered = [(_number(name), name) for name in scope if type(name) is str and name.startswith(PREFIX)]
    return [max(numbered)[1]] if numbered else []


def _loaded(code: CodeType, depth: int = 0) -> list[str]:
    """The graph names ``code`` loads, its nested code objects' included."""
    names = [name for name in code.co_names if name.startswith(PREFIX)]
    if depth < 8:
        for const in code.co_consts:
            if isinstance(const, CodeType):
                names += _loaded(const, depth + 1)
    return names


def _number(name: str) -> int:
    parts = name[len(PREFIX) :].split("_")  # "__compiled_fn_<n>_<uuid>"
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1
