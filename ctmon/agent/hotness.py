"""Where step time goes, per compiled region: low-rate sampling of the job's
main thread.

Four times a second (a jittered 250 ms, so it cannot lock onto a periodic
loop; twice while the step clock counts a host-bound loop's steps,
ctmon/agent/channel.py) the agent's sender thread looks at the main
thread's Python stack and files the moment under one of:

* ``graph``: inside a compiled graph -- under a frame whose code Dynamo
  replaced (its bytecode loads a ``__compiled_fn``), in the code that runs a
  graph (AOTAutograd's runtime, Inductor's generated ``call``, FX's forward);
  also the compiled backward, where the main thread runs it (CPU) or waits
  for the autograd engine's thread that runs it (CUDA);
* ``glue``: in such a frame's own eager code -- what runs between its graphs,
  around a graph break (``print``, ``.item()``, an unsupported call);
* ``other``: anything else -- the optimizer, data loading, eager code;
* ``compiling``: inside Dynamo's compiler (left out of the shares).

A sample counts once the step it fell in has ended (the step counter moved
on): what the job does after its last step (saving, evaluation, a
profiler's post-processing) is not step time. Counts are sent every few
seconds (per compiled frame: its code's file, first line and name,
which is how the store names frames). The cost is one stack walk of a few
dozen frames per sample, under the GIL: tens of µs. What costs the job more
is the wake itself (the GIL changes hands) and the walk (the job's frames
made into objects that it frees as its calls return): on a host-bound step
each sample cost the job a few hundred µs (benchmarks/hook_cost.py;
docs/PERFORMANCE.md). So the sender thread takes the sample as its flush's
tick (ctmon/agent/channel.py), at the flush's own pace: with hotness on, one
thread wakes as often as without. Four samples a second make ~1,000 over a
few minutes: a region's share to about ±1.5 points. On CUDA this is host
time: where the CPU thread is, not what the GPU runs.

Where the compiled graphs' calls are counted and timed
(ctmon/agent/graph_calls.py), each tick also reads their running totals: a
frame's calls are sent as they come (a run's calls are all its calls), its
graphs' timed nanoseconds ride with the tick's sample and count as it does,
and so does the time since the tick before that the graphs were timed in
(``span``: the timing windows' part of it), the whole a timed share is
taken of, both weighed by the time the window they fell in stands for. A
compiling sample's span and graph time are left out, as the sample is.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from ctmon.agent.graph_calls import CodeKey, GraphCalls
from ctmon.wire import protocol

INTERVAL_S = 0.25  # = channel.FLUSH_INTERVAL_S: sampling adds no wakes
SEND_EVERY_S = 2.0
MAX_DEPTH = 160
MAX_FRAMES = 500  # compiled frames tracked (a recompile storm makes many resume functions)
MAX_PENDING = 20_000  # samples of one step (17 minutes): a job that stops stepping keeps no more

# Frames that run a compiled graph: AOTAutograd's runtime, Inductor's output
# code and generated modules, FX's generated forward. One of these on the
# stack means the moment is inside a graph (Dynamo's own eval_frame wrappers
# are not: they also wrap torch._dynamo.disable'd functions, which run eager).
_GRAPH_BODY = ("/torch/_functorch/_aot_autograd/", "/torch/_inductor/output_code.py", "/torch/fx/graph_module.py")
_COMPILER = ("/torch/_dynamo/convert_frame.py", "/torch/_dynamo/symbolic_convert.py")
_ENGINE = "/torch/autograd/graph.py"  # the main thread waiting for the autograd engine's threads


def _row(table: dict[CodeKey, list[int]], key: CodeKey) -> list[int]:
    row = table.get(key)
    if row is None:
        row = table[key] = [0, 0]
    return row


class HotnessSampler:
    def __init__(self, steps: Callable[[], int], graphs: GraphCalls | None = None) -> None:
        self._steps = steps  # the step counter: a sample counts once it moves on
        self._graphs = graphs  # the compiled graphs' calls, timed (graph_calls.py)
        self._graph_seen: dict[CodeKey, list[int]] = {}  # [calls, ns] as last read
        self._graph_out: dict[CodeKey, list[int]] = {}  # [calls, ns in ended steps] not yet sent
        self._span_ns = 0  # time the committed samples stand for (compiling left out): the shares' whole
        now = time.perf_counter_ns()
        self._last_mark = graphs.timed_span(now) if graphs is not None else now  # see _span
        self._main = threading.main_thread().ident
        self._lock = threading.Lock()
        self._counts = {"graph": 0, "glue": 0, "other": 0, "compiling": 0}
        self._frames: dict[tuple[str, int, str], list[int]] = {}  # code -> [graph, glue]
        # id(code) -> (kind, code): 1 compiled frame, 2 PyTorch's runtime, 3
        # compiler, 0 other. Keyed by id: a code object's hash is computed
        # anew each time from its fields (~0.5 µs for a large function's, a
        # few for each frame of a walk); the code is held, so its id is not
        # reused while it is here.
        self._kinds: dict[int, tuple[int, CodeType]] = {}
        # samples of the step under way: where, the compiled frame, the ns
        # since the tick before, each frame's graph ns in them
        self._pending: list[tuple[str, CodeKey | None, int, dict[CodeKey, int] | None]] = []
        self._at_step = 0
        self._last_sent = time.monotonic()
        self._rnd = random.Random()

    def tick(self) -> float:
        """One sample; returns the seconds until the next (the sender
        thread's schedule: ctmon/agent/channel.py)."""
        try:
            now = time.perf_counter_ns()
            span = self._span(now)
            graph_ns = self._read_graphs()
            weight = self._graphs.weight if self._graphs is not None else 1.0
            if weight != 1.0:  # the window these fell in stands for more than itself (graph_calls.py)
                span = int(span * weight)
                if graph_ns:
                    graph_ns = {k: int(ns * weight) for k, ns in graph_ns.items()}
            n = self._steps()
            if n != self._at_step:  # a step ended: what was sampled during it is step time
                self._at_step = n
                self._commit()
            if n:
                self.sample(span, graph_ns)
        except Exception:  # never let a sample disturb the job
            pass
        return INTERVAL_S * self._rnd.uniform(0.8, 1.2)

    def _span(self, now: int) -> int:
        """The ns since the tick before that the graphs were timed in (their
        timing windows', where they are timed: graph_calls.py)."""
        mark = self._graphs.timed_span(now) if self._graphs is not None else now
        span, self._last_mark = mark - self._last_mark, mark
        return max(0, span)

    def _kind(self, code: CodeType) -> int:
        known = self._kinds.get(id(code))
        if known is not None:
            return known[0]
        f = code.co_filename
        if any(n.startswith("__compiled_fn") for n in code.co_names):
            k = 1
        elif f.endswith(_COMPILER):
            k = 3
        elif any(p in f for p in _GRAPH_BODY) or "torchinductor" in f or f.startswith("<eval_with_key>"):
            k = 2
        else:
            k = 0
        if len(self._kinds) < 50_000:
            self._kinds[id(code)] = (k, code)
        return k

    def _read_graphs(self) -> dict[CodeKey, int] | None:
        """Each frame's graph calls since the last tick (counted now: calls
        are per run) and their ns (kept with the sample: they count as the
        sample does)."""
        graphs = self._graphs
        if graphs is None:
            return None
        out: dict[CodeKey, int] = {}
        seen = self._graph_seen
        with self._lock:
            for key, calls, ns in graphs.read():
                last = _row(seen, key)
                if calls > last[0]:
                    _row(self._graph_out, key)[0] += calls - last[0]
                    last[0] = calls
                if ns != last[1]:
                    out[key] = ns - last[1]
                    last[1] = ns
        return out or None

    def sample(self, span_ns: int = 0, graph_ns: dict[CodeKey, int] | None = None) -> None:
        frames = sys._current_frames()
        # Our own thread's entry is this very frame: kept in a local of it, the
        # dict would make a cycle (frame -> its locals -> dict -> frame) that
        # holds every sampled frame of the job -- and so the locals of calls
        # that have since returned, tensors included -- until the cyclic GC
        # runs, at a moment of its own. A tensor freed then, in the middle of
        # a CUDA graph recording, fails it ("an input tensor deallocate during
        # graph recording"). Without the cycle, the job's frames are ours
        # only while we hold the GIL, when none of them can return.
        frames.pop(threading.get_ident(), None)
        f: FrameType | None = frames.get(self._main) if self._main is not None else None
        if f is None:
            return
        innermost = f
        body = False  # a frame running a compiled graph, inner to where the walk is
        depth = 0
        where: str | None = None
        owner: CodeType | None = None
        while f is not None and depth < MAX_DEPTH:
            kind = self._kind(f.f_code)
            if kind == 3:
                where = "compiling"
                break
            if kind == 1:  # the compiled frame: in one of its graphs, or in its own eager code
                owner, where = f.f_code, "graph" if body else "glue"
                break
            if kind == 2:
                body = True
            f, depth = f.f_back, depth + 1
        if where is None:  # no compiled frame: a compiled backward, or the engine waiting for one
            where = "graph" if body or self._waits_for_compiled_backward(innermost, frames) else "other"
        key = (owner.co_filename, owner.co_firstlineno, owner.co_name) if owner is not None else None
        if len(self._pending) < MAX_PENDING:
            self._pending.append((where, key, span_ns, graph_ns))

    def _commit(self) -> None:
        pending, self._pending = self._pending, []
        with self._lock:
            for where, key, span_ns, graph_ns in pending:
                self._counts[where] += 1
                if where != "compiling":  # as with the samples, time spent compiling is no one's share
                    self._span_ns += span_ns
                    if graph_ns:
                        for k, ns in graph_ns.items():
                            _row(self._graph_out, k)[1] += ns
                if key is None:
                    continue
                row = self._frames.get(key)
                if row is None and len(self._frames) < MAX_FRAMES:
                    row = self._frames[key] = [0, 0]
                if row is not None:
                    row[0 if where == "graph" else 1] += 1

    def _waits_for_compiled_backward(self, innermost: FrameType, frames: dict[int, Any]) -> bool:
        """The main thread waits in the autograd engine while another thread
        (CUDA's device threads) runs a compiled backward graph."""
        if not innermost.f_code.co_filename.endswith(_ENGINE):
            return False
        for ident, f in frames.items():
            if ident == self._main:
                continue
            depth = 0
            while f is not None and depth < MAX_DEPTH:
                if self._kind(f.f_code) == 2:
                    return True
                f, depth = f.f_back, depth + 1
        return False

    def periodic(self) -> list[protocol.Event]:
        """Counts since the last send, every SEND_EVERY_S (the sender thread's hook)."""
        now = time.monotonic()
        if now - self._last_sent < SEND_EVERY_S:
            return []
        self._last_sent = now
        return self._send()

    def final(self) -> list[protocol.Event]:
        """At exit: the graphs' calls since the last send (a run's calls are
        all its calls; its unfinished step's samples are not step time)."""
        self._read_graphs()
        return self._send()

    def _send(self) -> list[protocol.Event]:
        with self._lock:
            counts, frames, graphs, span_ns = self._counts, self._frames, self._graph_out, self._span_ns
            if not any(counts.values()) and not graphs:
                return []
            self._counts = {k: 0 for k in counts}
            self._frames, self._graph_out, self._span_ns = {}, {}, 0
        ev: protocol.Event = {
            "kind": protocol.HOTNESS,
            "t": time.time(),
            "counts": counts,
            "frames": [[f, line, name, g, e] for (f, line, name), (g, e) in frames.items()],
            "interval_s": INTERVAL_S,
        }
        if self._graphs is not None and self._graphs.on:
            ev["span_ns"] = span_ns
            ev["graphs"] = [[f, line, name, c, ns] for (f, line, name), (c, ns) in graphs.items()]
        return [ev]
