"""Calls of every compiled graph, and the host time each call takes.

Dynamo runs a compiled frame's graph through a function it installs in the
frame's module globals (``__compiled_fn_<n>_<uuid>``), which the frame's
new bytecode loads by name on every call. At the end of each compile --
on the compiling thread, before that bytecode first runs -- ctmon puts a
counting, timing function in the place of the names that bytecode loads,
calling the original.

Exact where sampling is not: a sample lands where the job's thread lets
the GIL go, so a small region made mostly of Python (AOTAutograd's
epilogue after its last kernel launch) reads low when sampled
(docs/PERFORMANCE.md). The cost is one Python call and two clock reads per
graph call: about 1 µs on an H200's host (benchmarks/graph_call_cost.py),
against the tens of µs a compiled graph's call costs on its own. On CUDA
this is host time: the launches, not what the GPU runs.

The function that wraps the graph is marked for Dynamo to skip (its code
would otherwise be a new frame for Dynamo to look at, on every call from a
compiled frame), and nothing else changes: Dynamo's guards never read these
names, and its clean-up deletes the name whatever it holds.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

PREFIX = "__compiled_fn"
_CONVERT_FRAME = "/torch/_dynamo/convert_frame.py"
MAX_DEPTH = 64  # the compile's frame sits ~10 frames above the trace handler
MAX_FRAMES = 500  # compiled frames tracked, as the sampler (a recompile storm makes many)

CodeKey = tuple[str, int, str]


def _timed(fn: Callable[..., Any], row: list[int]) -> Callable[..., Any]:
    clock = time.perf_counter_ns

    def ctmon_graph_call(*args: Any, **kwargs: Any) -> Any:
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            row[0] += 1
            row[1] += clock() - t0

    ctmon_graph_call.__wrapped__ = fn  # type: ignore[attr-defined]
    ctmon_graph_call.__ctmon_graph__ = row  # type: ignore[attr-defined]
    return ctmon_graph_call


class GraphCalls:
    """Per compiled frame (its code's file, first line and name, as the
    store names frames): ``[calls, host ns]`` of its graphs, cumulative."""

    def __init__(self) -> None:
        self.rows: dict[CodeKey, list[int]] = {}
        self.wrapped = 0  # graphs wrapped so far
        self.missed = 0  # compiles whose frame could not be found (a torch that moved its compiler)
        self.on: bool | None = None  # None: not yet known (Dynamo is imported by the first compile)

    def _can_wrap(self) -> bool:
        if self.on is None:
            # Without this Dynamo would take the wrapper, called from a
            # compiled frame, for a new frame to compile.
            skip_code = getattr(sys.modules.get("torch._dynamo.eval_frame"), "skip_code", None)
            try:
                skip_code(_timed(len, [0, 0]).__code__)  # type: ignore[misc]  # all wrappers share one code object
                self.on = True
            except Exception:
                self.on = False
        return self.on

    def on_compile_end(self) -> None:
        """On the compiling thread, from the handler of the compile's
        ``compilation_metrics`` record: wrap the graphs it installed."""
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
        fresh = [
            (name, fn)
            for name, fn in ((name, scope.get(name)) for name in _graph_names(local, scope))
            if fn is not None and getattr(fn, "__ctmon_graph__", None) is None
        ]
        if not fresh:
            return  # a compile that made no graph (a frame with nothing to compile, a failed compile)
        key = (frame_code.co_filename, frame_code.co_firstlineno, frame_code.co_name)
        row = self.rows.get(key)
        if row is None:
            if len(self.rows) >= MAX_FRAMES:
                return
            row = self.rows[key] = [0, 0]
        for name, fn in fresh:
            if callable(fn):
                scope[name] = _timed(fn, row)
                self.wrapped += 1


def _graph_names(local: dict[str, Any], scope: dict[str, Any]) -> list[str]:
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
