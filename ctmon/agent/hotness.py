"""Where step time goes, per compiled region: low-rate sampling of the job's
main thread.

Four times a second (a jittered 250 ms, so it cannot lock onto a periodic
loop) the agent's sender thread looks at the main thread's Python stack and
files the moment under one of:

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
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

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


class Hotness:
    def __init__(self, steps: Callable[[], int]) -> None:
        self._steps = steps  # the step counter: a sample counts once it moves on
        self._main = threading.main_thread().ident
        self._lock = threading.Lock()
        self._counts = {"graph": 0, "glue": 0, "other": 0, "compiling": 0}
        self._frames: dict[tuple[str, int, str], list[int]] = {}  # code -> [graph, glue]
        self._kinds: dict[CodeType, int] = {}  # 1: compiled frame, 2: PyTorch's runtime, 3: compiler, 0: other
        self._pending: list[tuple[str, tuple[str, int, str] | None]] = []  # samples of the step under way
        self._at_step = 0
        self._last_sent = time.monotonic()
        self._rnd = random.Random()

    def tick(self) -> float:
        """One sample; returns the seconds until the next (the sender
        thread's schedule: ctmon/agent/channel.py)."""
        try:
            n = self._steps()
            if n != self._at_step:  # a step ended: what was sampled during it is step time
                self._at_step = n
                self._commit()
            if n:
                self.sample()
        except Exception:  # never let a sample disturb the job
            pass
        return INTERVAL_S * self._rnd.uniform(0.8, 1.2)

    def _kind(self, code: CodeType) -> int:
        k = self._kinds.get(code)
        if k is None:
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
                self._kinds[code] = k
        return k

    def sample(self) -> None:
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
            self._pending.append((where, key))

    def _commit(self) -> None:
        pending, self._pending = self._pending, []
        with self._lock:
            for where, key in pending:
                self._counts[where] += 1
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
        with self._lock:
            counts, frames = self._counts, self._frames
            if not any(counts.values()):
                return []
            self._counts = {k: 0 for k in counts}
            self._frames = {}
        return [
            {
                "kind": protocol.HOTNESS,
                "t": time.time(),
                "counts": counts,
                "frames": [[f, line, name, g, e] for (f, line, name), (g, e) in frames.items()],
                "interval_s": INTERVAL_S,
            }
        ]
