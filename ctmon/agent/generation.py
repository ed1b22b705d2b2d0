"""Which compiled calls are the tokens of a ``generate()`` call.

A Hugging Face ``generate()`` runs the model's forward once per token: a
prefill over the prompt, then one decode call per new token. Where that
forward is compiled, each top-level call is a step boundary
(step_hooks.call_hook), so the step series mixes prompts, first tokens
and decode tokens. This module tells, per compiled call, whether it runs
inside a ``generate()`` and inside its prefill, and sends one ``generation``
event per ``generate()`` call: how many calls were prefill and decode, the
step indices of the decode calls (the store reads the token latencies from
the step series, device-timed where CUDA events resolved them), and the time
to the first token where the start of the call is known.

Nothing wraps ``generate()`` (the program stays the same, and no ctmon frame
is on its stack):

* at a compiled call, the stack is walked for ``GenerationMixin.generate``'s
  and ``_prefill``'s code objects. One ``generate()`` call is told from the
  next by a weak reference to the ``GenerationConfig`` copy each call makes
  for itself: it dies when the call returns, which also ends the generation.
  Only inference loops pay for the walk (a training loop's clock is the
  optimizer, and call_hook returns before calling here), and once a decode
  call has been seen, later calls of the same ``generate()`` skip it;
* on Python 3.12+, ``sys.monitoring`` reports the start of every
  ``generate()`` call (a local event on that one code object: no cost
  elsewhere), which gives the time to the first token. Python 3.11 has no
  such event without a wrapper or a profiler, so there ``ttft_ms`` is absent.

A ``generate()`` that runs no compiled code at all -- ``torch.compile(model)``
for training, then ``model.generate()`` or ``compiled.generate()``, which
calls the original module -- makes no compiled call to start from. Where
the job has compiled graphs, the sender thread looks at the main thread's
stack at each flush (``poll``, four times a second: a walk of a few dozen
frames, only while a generate() could be running eagerly, nothing for a job
that never imports transformers' generation utilities or never compiles). A
``generate()`` call seen at two looks or more, none of them inside compiled
code or Dynamo's compiler, during which no compiled graph was called
(ctmon/agent/graph_calls.py's counters did not move from the first look to
its end), is sent as a ``generation`` event with ``eager`` set: its decode
steps ran the original, uncompiled forward. A shorter call is not told (it
cost less than two looks' time).
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence, Sized
from types import CodeType, FrameType, ModuleType
from typing import Any, Protocol

from ctmon.agent.channel import Channel
from ctmon.agent.generation_frames import MAX_DEPTH, function_code, is_compiled_code, monitor_starts, user_line
from ctmon.wire import protocol

CONFIG_LOCAL = "generation_config"  # generate()'s own copy of its settings
MAX_KINDS = 50_000  # code objects whose kind is kept (as the sampler's, ctmon/agent/hotness.py)
MIN_LOOKS = 2  # looks at one generate() call before it is told to run eager

_now = time.perf_counter_ns


class CallCounts(Protocol):
    """The compiled graphs' call counters (graph_calls.GraphCalls): (key, calls, ns) per graph."""

    @property
    def on(self) -> bool | None: ...

    @property
    def frames(self) -> Sized: ...

    def read(self) -> Sequence[tuple[object, int, int]]: ...


class _Open:
    """One generate() call in progress."""

    __slots__ = ("start_ns", "prefill", "decode", "i0", "i1", "first_decode_ns", "ref", "depth", "done", "__weakref__")

    def __init__(self, start_ns: int | None) -> None:
        self.start_ns = start_ns
        self.prefill = 0  # compiled calls made inside _prefill()
        self.decode = 0
        self.i0 = -1  # step index of the first decode call
        self.i1 = -1
        self.first_decode_ns: int | None = None
        self.ref: Any = None  # a weak reference to its GenerationConfig (None until begun)
        self.depth = -1  # frames from a decode call's caller up to this generate() frame
        self.done = False  # its event was sent (when the next call began, or its config died)


class _Eager:
    """One generate() call seen on the main thread by ``poll``, not yet known to run compiled code."""

    __slots__ = ("first_ns", "start_ns", "calls", "looks", "compiled", "ref", "done", "site", "model", "name")

    def __init__(self, first_ns: int, start_ns: int | None, calls: int) -> None:
        self.first_ns = first_ns  # the first look that saw it
        self.start_ns = start_ns  # its start, where sys.monitoring told it (3.12+)
        self.calls = calls  # compiled graph calls, all frames, at the first look
        self.looks = 1
        self.compiled = False  # a look landed in compiled code or Dynamo's compiler
        self.ref: Any = None  # a weak reference to its GenerationConfig (None until begun)
        self.done = False
        self.site: dict[str, object] = {}  # the user's line that called generate()
        self.model = ""
        self.name: str | None = None  # the user's name of the original module, where the calling frame has one


class GenerationWatch:
    def __init__(self, channel: Channel, src: str = protocol.STEP_SOURCES[0]) -> None:
        self._ch = channel
        self._src = src
        self._generate: CodeType | None = None
        self._prefill: CodeType | None = None
        self._open: _Open | None = None
        self._started_ns: int | None = None  # the last generate() start sys.monitoring saw
        self.armed = False
        # The compiled graphs' call counters (graph_calls.GraphCalls), set
        # where torch is hooked; None (CTMON_HOTNESS=0): an eager generate() is not told.
        self.graphs: CallCounts | None = None
        self._eager: _Eager | None = None
        self._kinds: dict[int, tuple[bool, CodeType]] = {}  # id(code) -> (compiled code?, code)

    # ---- set-up (the import of transformers' generation utilities) ----

    def arm(self, module: ModuleType) -> bool:
        mixin = getattr(module, "GenerationMixin", None)
        generate = function_code(getattr(mixin, "generate", None))
        if generate is None:
            return False
        self._generate = generate
        self._prefill = function_code(getattr(mixin, "_prefill", None))
        self.armed = True
        monitor_starts(generate, self._on_start)
        return True

    def _on_start(self, code: CodeType, offset: int) -> object:
        if self._open is None:  # a nested generate() (assisted decoding's) is part of the outer one
            self._started_ns = _now()
        return None

    # ---- the hot path: a top-level compiled call (idx: its step index, or -1) ----

    def on_call(self, idx: int, t_ns: int) -> None:
        cur = self._open
        if cur is not None and cur.decode and self._same_call(cur):
            self._decode(cur, idx, t_ns)  # generate() still runs: its config is alive
            return
        frame, in_prefill, depth = self._find(sys._getframe(2))
        if frame is None:
            return
        if cur is not None and frame.f_locals.get(CONFIG_LOCAL) is not cur.ref():
            # A new generate() while the last one's config still lives (its
            # frame kept a moment longer by something holding a frame object):
            # the last one ended when this one began.
            self._finish(cur, t_ns)
            cur = None
        if cur is None:
            cur = self._begin(frame)
            if cur is None:
                return
        if in_prefill:
            cur.prefill += 1
        else:
            cur.depth = depth
            self._decode(cur, idx, t_ns)

    def _same_call(self, cur: _Open) -> bool:
        """The generate() frame at the depth of the last decode call is still
        the one of ``cur``: a few frame hops and one look at its config."""
        if cur.depth < 0:
            return False
        try:
            frame = sys._getframe(3 + cur.depth)  # on_call's caller's caller is where _find starts
        except ValueError:
            return False
        return frame.f_code is self._generate and frame.f_locals.get(CONFIG_LOCAL) is cur.ref()

    def _find(self, frame: FrameType | None) -> tuple[FrameType | None, bool, int]:
        """The outermost generate() frame above a call, whether _prefill() is
        between, and how many frames up from ``frame`` it is."""
        generate, prefill = self._generate, self._prefill
        found: FrameType | None = None
        found_at = -1
        in_prefill = False
        depth = 0
        while frame is not None and depth < MAX_DEPTH:
            code = frame.f_code
            if code is generate:
                found, found_at = frame, depth
            elif code is prefill and found is None:
                in_prefill = True
            frame = frame.f_back
            depth += 1
        return found, in_prefill, found_at

    def _begin(self, frame: FrameType) -> _Open | None:
        config = frame.f_locals.get(CONFIG_LOCAL)
        started = self._started_ns
        self._started_ns = None
        cur = _Open(started)
        try:
            cur.ref = weakref.ref(config, self._ended(cur))
        except TypeError:
            return None  # no per-call object to tell one generate() call from the next
        self._open = cur
        return cur

    @staticmethod
    def _decode(cur: _Open, idx: int, t_ns: int) -> None:
        if cur.decode == 0:
            cur.first_decode_ns = t_ns
            cur.i0 = idx
        elif idx < 0 or cur.i1 < 0 or idx != cur.i1 + 1:
            cur.i0 = -1  # not one unbroken run of boundaries: latencies unknown
        cur.i1 = idx
        cur.decode += 1

    def _ended(self, cur: _Open) -> Callable[[object], None]:
        # Runs where the GenerationConfig is freed -- generate() returning, on
        # the job's thread: one clock read and one append, never raises.
        def ended(_ref: object) -> None:
            try:
                self._finish(cur, _now())
            except Exception:
                pass

        return ended

    def _finish(self, cur: _Open, end_ns: int) -> None:
        if cur.done:  # ended when the next generate() began; its config died only now
            return
        cur.done = True
        if self._open is cur:
            self._open = None
        if cur.decode == 0 and cur.prefill == 0:
            return
        self._ch.put(("event", self.event(cur, end_ns)), True)

    def flush(self) -> None:
        """At exit: a generate() still open (the job ended inside it)."""
        cur = self._open
        if cur is not None:
            self._finish(cur, _now())
        eager = self._eager
        if eager is not None:
            self._eager_finish(eager, _now())

    # ---- generate() calls that run no compiled code (the sender thread's flush) ----

    def poll(self) -> list[protocol.Event]:
        """A periodic hook of the agent: look once at the main thread's stack
        for a generate() call; what it finds is sent when the call ends."""
        graphs = self.graphs
        if not self.armed or self._generate is None or graphs is None or not graphs.on or not graphs.frames:
            return []
        try:
            self._look(graphs)
        except Exception:
            pass  # a look must never disturb the job
        return []

    def _look(self, graphs: CallCounts) -> None:
        frame = sys._current_frames().get(threading.main_thread().ident or -1)
        found, compiled = self._find_eager(frame)
        del frame
        if found is None:
            return
        config = found.f_locals.get(CONFIG_LOCAL)
        cur = self._eager
        if cur is not None and not cur.done and config is not None and cur.ref() is config:
            cur.looks += 1
            cur.compiled = cur.compiled or compiled
            return
        if cur is not None:
            self._eager_finish(cur, _now())  # the last one ended when this one began
        if config is None:
            return
        started, self._started_ns = self._started_ns, None
        new = _Eager(_now(), started, _total_calls(graphs))
        new.compiled = compiled
        model = found.f_locals.get("self")
        new.model = protocol.clip(type(model).__name__, 200) or "?"
        new.site, new.name = user_line(found.f_back, model)
        del model
        try:
            new.ref = weakref.ref(config, self._eager_ended(new))
        except TypeError:
            return  # no per-call object to tell one generate() call from the next
        self._eager = new

    def _find_eager(self, frame: FrameType | None) -> tuple[FrameType | None, bool]:
        """The outermost generate() frame on the stack, and whether anything
        compiled (or Dynamo compiling) is above it."""
        generate = self._generate
        found: FrameType | None = None
        compiled = False
        depth = 0
        while frame is not None and depth < MAX_DEPTH:
            code = frame.f_code
            if code is generate:
                found = frame
            elif found is None and not compiled:
                compiled = self._is_compiled(code)
            frame = frame.f_back
            depth += 1
        return found, compiled

    def _is_compiled(self, code: CodeType) -> bool:
        # Keyed by id (a code object's hash is computed anew from its
        # fields); the code is held, so its id is not reused while here.
        known = self._kinds.get(id(code))
        if known is not None:
            return known[0]
        kind = is_compiled_code(code)
        if len(self._kinds) < MAX_KINDS:
            self._kinds[id(code)] = (kind, code)
        return kind

    def _eager_ended(self, cur: _Eager) -> Callable[[object], None]:
        # Runs where generate()'s GenerationConfig is freed (as _ended does):
        # on whichever thread drops it last, so it only appends a record.
        def ended(_ref: object) -> None:
            try:
                self._eager_finish(cur, _now())
            except Exception:
                pass

        return ended

    def _eager_finish(self, cur: _Eager, end_ns: int) -> None:
        if cur.done:
            return
        cur.done = True
        if self._eager is cur:
            self._eager = None
        graphs = self.graphs
        if cur.looks < MIN_LOOKS or cur.compiled or graphs is None or _total_calls(graphs) != cur.calls:
            return
        self._ch.put(("event", self.eager_event(cur, end_ns)), True)

    def eager_event(self, cur: _Eager, end_ns: int) -> protocol.Event:
        ev: protocol.Event = {
            "kind": protocol.GENERATION,
            "t": time.time(),
            "src": self._src,
            "prefill_calls": 0,
            "decode_calls": 0,
            "eager": True,
            "seen_ms": (end_ns - cur.first_ns) / 1e6,
            "looks": cur.looks,
            "model": cur.model,
        }
        if cur.name is not None:
            ev["model_name"] = cur.name
        if cur.start_ns is not None:
            ev["ms"] = (end_ns - cur.start_ns) / 1e6
        ev.update(cur.site)
        return ev

    def event(self, cur: _Open, end_ns: int) -> protocol.Event:
        ttft: float | None = None
        if cur.start_ns is not None:
            first = cur.first_decode_ns if cur.first_decode_ns is not None else end_ns
            ttft = (first - cur.start_ns) / 1e6
        ok = cur.i0 >= 0 and cur.i1 - cur.i0 + 1 == cur.decode
        return {
            "kind": protocol.GENERATION,
            "t": time.time(),
            "src": self._src,
            "prefill_calls": cur.prefill,
            "decode_calls": cur.decode,
            "i0": cur.i0 if ok else -1,
            "i1": cur.i1 if ok else -1,
            "ttft_ms": ttft,
            "ms": (end_ns - cur.start_ns) / 1e6 if cur.start_ns is not None else None,
        }


def _total_calls(graphs: CallCounts) -> int:
    return sum(calls for _key, calls, _ns in graphs.read())
