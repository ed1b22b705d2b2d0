"""CUDA-graph warm-ups, recordings and replays of ``mode="reduce-overhead"``,
from PyTorch's own CUDA-graph trees (torch/_inductor/cudagraph_trees.py).

Every graph Inductor hands to the trees (a forward, a backward, an
inference graph; for a graph with dynamic shapes, one per distinct set of
sizes: ``cudagraphify_impl`` keys them by the graph's int inputs) is a
*function* of a ``CUDAGraphTreeManager``, and each call of one takes one of
three paths in ``CUDAGraphTreeManager._run``:

* ``run_eager``: the function's first call runs it eagerly to warm it up
  (``function_id not in self.warmed_up_functions``); a warm function runs
  eagerly again while a warm-up path is still live ("eager");
* ``record_function``: its next call captures a CUDA graph (a new
  ``CUDAGraphNode``, timed by PyTorch as ``CUDAGraphNode.record``); a
  function recorded before is recorded again when its recorded invariants
  no longer hold;
* ``execute_node``: every later call replays the graph.

PyTorch keeps no counter of any of these (``counters["inductor"]`` counts
skips only), so ctmon wraps the three methods on the class, once, when the
job imports the module:

* ``run_eager`` and ``record_function`` in Python wrappers that read the
  function's compile id, kind and input sizes from the manager before the
  call and time it: they run once per graph and shape, each taking
  milliseconds to seconds, so the wrapper's microseconds are nothing;
* ``execute_node`` -- the replay, every call of the steady loop -- only in
  ``functools.lru_cache(maxsize=0)``, which CPython runs in C as "count a
  miss, call the function": no Python frame, so no traceback and no Dynamo
  ever sees it. On a method it costs about what a Python wrapper would
  (CPython makes a bound method for each call): +150-270 ns a replay on the
  2-core test machine, where the replay itself runs tens of µs of PyTorch's
  Python (on an H200, a tiny graph's replayed call took 63-84 µs of host
  time in rounds of 20,000, with and without the counter alike:
  benchmarks/gpu/cudagraph_check.py).

Nothing else changes: each wrapper calls PyTorch's method with the same
arguments and returns what it returns (its exceptions pass through), reads
attributes only, and keeps no tensor. The reading of the manager
(``warmup``/``recording``) takes duck-typed objects, so tests drive it on a
machine without a GPU with the records a GPU run captured
(benchmarks/gpu/cudagraph_check.py).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from ctmon.wire import protocol

TREES = "torch._inductor.cudagraph_trees"
MAX_INPUTS = 8  # input sizes kept per warm-up or recording
MAX_DIMS = 8
COUNTS_EVERY_S = 5.0  # cumulative counts are sent at most this often (and at exit)

Emit = Callable[[protocol.Event], None]


def _arg(args: tuple[Any, ...], kwargs: dict[str, object], i: int, name: str) -> Any:
    return args[i] if len(args) > i else kwargs.get(name)


def input_sizes(inputs: Iterable[object] | None, static: Iterable[int] | None) -> tuple[list[list[int]], list[int]]:
    """The sizes of a call's inputs that are not static (the data, not the
    parameters and buffers the graph keeps at fixed addresses): tensor
    shapes, and the int inputs a graph with dynamic shapes takes (its
    symbolic sizes' values, which ``cudagraphify_impl`` keys graphs by)."""
    shapes: list[list[int]] = []
    ints: list[int] = []
    fixed = set(static or ())
    for i, x in enumerate(inputs or ()):
        if i in fixed:
            continue
        if isinstance(x, int) and not isinstance(x, bool):
            if len(ints) < MAX_INPUTS:
                ints.append(int(x))
        elif len(shapes) < MAX_INPUTS:
            shape = getattr(x, "shape", None)
            if shape is not None:
                shapes.append([int(d) for d in tuple(shape)[:MAX_DIMS]])
        if len(shapes) >= MAX_INPUTS and len(ints) >= MAX_INPUTS:
            break
    return shapes, ints


def describe(manager: object, function_id: object, inputs: Iterable[object] | None) -> dict[str, object]:
    """What the manager knows of one of its functions, as event fields."""
    cid = getattr(manager, "id_to_compile_id", {}).get(function_id)  # torch >= 2.6
    mode = getattr(manager, "id_to_mode", {}).get(function_id)
    wrapped = getattr(manager, "ids_to_funcs", {}).get(function_id)
    shapes, ints = input_sizes(inputs, getattr(wrapped, "static_input_idxs", None))
    return {
        "compile_id": str(cid) if cid is not None else None,
        "graph": str(getattr(mode, "name", mode)).lower() if mode is not None else None,
        "function_id": getattr(function_id, "id", None),
        "device": getattr(manager, "device_index", None),
        "shapes": shapes,
        "ints": ints,
    }


class CudagraphObserver:
    """Turns the trees' warm-ups and recordings into ``cudagraph_tree``
    events, and keeps the counts the periodic event carries."""

    def __init__(self, emit: Emit, disabled: Callable[[], bool] = lambda: False) -> None:
        self.emit = emit
        self.disabled = disabled
        self.warmups = 0
        self.recordings = 0
        self.eager = 0  # warm functions run eagerly while a warm-up path was live
        self.replays: Callable[[], int] = lambda: 0
        self._sent: tuple[int, int, int, int] | None = None
        self._sent_at = 0.0

    # ---- on the job's thread, around PyTorch's methods ----

    def warmup(self, manager: object, function_id: object, inputs: Iterable[object] | None) -> dict[str, object] | None:
        """Before ``run_eager``: the fields of a first warm-up, or None for an
        eager run of a warm function (counted, not sent)."""
        if function_id in getattr(manager, "warmed_up_functions", ()):
            self.eager += 1
            return None
        return describe(manager, function_id, inputs)

    def recording(self, manager: object, function_id: object, inputs: Iterable[object] | None) -> dict[str, object]:
        """Before ``record_function``."""
        return describe(manager, function_id, inputs)

    def done(self, event: str, fields: dict[str, object], t: float, dur_s: float, manager: object = None) -> None:
        """After PyTorch's call returned (one that raised is not counted)."""
        if event == "record":
            self.recordings += 1
        else:
            self.warmups += 1
        ev: protocol.Event = {"kind": protocol.CUDAGRAPH_TREE, "t": t, "event": event, "dur_s": dur_s}
        ev.update(fields)
        if event == "record":
            # the node it just recorded: PyTorch's id of the graph (0, 1, ... per device)
            graph_id = getattr(getattr(getattr(manager, "current_node", None), "id", None), "id", None)
            if isinstance(graph_id, int):
                ev["graph_id"] = graph_id
        self.emit(ev)

    # ---- on the sender thread ----

    def counts(self) -> list[protocol.Event]:
        """The cumulative counts, at most every COUNTS_EVERY_S while they change."""
        if time.monotonic() - self._sent_at < COUNTS_EVERY_S:
            return []
        return self.final()

    def final(self) -> list[protocol.Event]:
        now = (self.replays(), self.eager, self.warmups, self.recordings)
        if now == self._sent or not any(now):
            return []
        self._sent, self._sent_at = now, time.monotonic()
        replays, eager, warmups, recordings = now
        return [
            {
                "kind": protocol.CUDAGRAPH_TREE,
                "t": time.time(),
                "event": "counts",
                "replays": replays,
                "eager": eager,
                "warmups": warmups,
                "recordings": recordings,
            }
        ]


def _observed(original: Callable[..., Any], obs: CudagraphObserver, event: str) -> Callable[..., Any]:
    """``original`` (a manager method taking ``new_inputs, function_id``),
    observed: the manager is read before the call (PyTorch empties the
    inputs list as it runs), the event sent after it returns."""
    before = obs.warmup if event == "warmup" else obs.recording

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        fields = None
        if not obs.disabled():
            try:
                fields = before(self, _arg(args, kwargs, 1, "function_id"), _arg(args, kwargs, 0, "new_inputs"))
            except Exception:  # a torch whose manager differs: PyTorch's call is made whatever happens here
                fields = None
        if fields is None:
            return original(self, *args, **kwargs)
        t, t0 = time.time(), time.perf_counter()
        out = original(self, *args, **kwargs)
        try:
            obs.done(event, fields, t, time.perf_counter() - t0, self)
        except Exception:
            pass
        return out

    wrapper.__ctmon_wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def _skip_for_dynamo(*fns: Callable[..., Any]) -> None:
    """Dynamo takes a Python frame it meets under a compiled frame for one to
    compile unless told to skip it: the wrappers' code is PyTorch's own."""
    skip_code = getattr(sys.modules.get("torch._dynamo.eval_frame"), "skip_code", None)
    if skip_code is None:
        return
    for fn in fns:
        try:
            skip_code(fn.__code__)
        except Exception:
            pass


def install(module: ModuleType, obs: CudagraphObserver) -> bool:
    """Observe the trees of ``module`` (torch._inductor.cudagraph_trees);
    False where its manager lacks a method this relies on (nothing wrapped)."""
    cls = getattr(module, "CUDAGraphTreeManager", None)
    names = ("run_eager", "record_function", "execute_node")
    if cls is None or not all(callable(getattr(cls, n, None)) for n in names):
        return False
    if getattr(cls.execute_node, "__ctmon_wrapped__", None) is not None:
        return True  # already observed (a second agent in the process would count twice)
    warm = _observed(cls.run_eager, obs, "warmup")
    record = _observed(cls.record_function, obs, "record")
    replay = functools.lru_cache(maxsize=0)(cls.execute_node)
    replay.__ctmon_wrapped__ = cls.execute_node  # type: ignore[attr-defined]
    _skip_for_dynamo(warm, record)
    cls.run_eager, cls.record_function, cls.execute_node = warm, record, replay
    obs.replays = lambda: replay.cache_info().misses
    return True
