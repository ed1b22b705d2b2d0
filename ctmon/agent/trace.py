"""PyTorch's structured trace (the ``torch.__trace`` logger) -> ctmon events.

``trace_structured()`` emits only when that logger has a handler, so adding
ours turns it on in-process, exactly as TORCH_TRACE does (PyTorch computes the
payloads before any handler sees them, so the cost is TORCH_TRACE's minus its
file writes). The handler runs on the compiling thread: it keeps only the
records ctmon uses and queues them; parsing happens on the sender thread.

Facts relied on (torch 2.5 .. 2.13): each record carries ``record.metadata``,
a dict whose first key is the event name, plus ``frame_id``,
``frame_compile_id``, ``attempt`` and sometimes ``rank``; ``record.payload``
is a str or None. Filenames in ``dynamo_start`` stacks are interned through
earlier ``str`` records.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from types import FrameType

from ctmon.agent.channel import Channel
from ctmon.agent.config_reads import read_config_in_force, read_dynamo_config, read_settings_in_force
from ctmon.agent.phases import phase_of
from ctmon.wire import protocol

KEEP_EVENTS = frozenset(
    {"dynamo_start", "compilation_metrics", "bwd_compilation_metrics", "str", "symbolic_shape_specialization"}
)
CACHE_ARTIFACTS = {
    "fx_graph_cache_hit": ("fx_graph", "hit"),
    "fx_graph_bundled_cache_hit": ("fx_graph", "hit"),
    "fx_graph_cache_miss": ("fx_graph", "miss"),
    "fx_graph_cache_bypass": ("fx_graph", "bypass"),
    "aotautograd_cache_hit": ("aot_autograd", "hit"),
    "aotautograd_cache_miss": ("aot_autograd", "miss"),
    "aotautograd_cache_bypass": ("aot_autograd", "bypass"),
}
KEEP_ARTIFACTS = frozenset(
    {"dynamo_graph_break_reason", "recompile_reasons", "triton_kernel_info", "dynamo_error"} | set(CACHE_ARTIFACTS)
)

# compilation_metrics fields worth keeping (the record also carries ~60 KB of
# config dumps that must not be copied per compile).
METRIC_FIELDS = (
    "co_name",
    "co_filename",
    "co_firstlineno",
    "cache_size",
    "accumulated_cache_size",
    "guard_count",
    "shape_env_guard_count",
    "graph_op_count",
    "graph_node_count",
    "graph_input_count",
    "entire_frame_compile_time_s",
    "backend_compile_time_s",
    "inductor_compile_time_s",
    "code_gen_time_s",
    "dynamo_time_before_restart_s",
    "fail_type",
    "fail_reason",
    "fail_user_frame_filename",
    "fail_user_frame_lineno",
    "recompile_reason",
    "restart_reasons",
    "non_compliant_ops",
    "compliant_custom_ops",
    "has_guarded_code",
    "cudagraph_skip_reason",
    "inductor_fx_local_cache_hit_count",
    "inductor_fx_local_cache_miss_count",
    "inductor_fx_remote_cache_hit_count",
    "inductor_fx_remote_cache_miss_count",
    "aotautograd_local_cache_hit_count",
    "aotautograd_local_cache_miss_count",
    "remote_cache_time_saved_s",
    "structured_logging_overhead_s",
    "triton_compile_time_us",
    "start_time",
    "is_forward",
    "param_count",
    "param_numel",
    "guard_latency_us",
)
BWD_FIELDS = (
    "inductor_compile_time_s",
    "duration_us",
    "code_gen_time_s",
    "fail_type",
    "fail_reason",
    "cudagraph_skip_reason",
    "inductor_fx_local_cache_hit_count",
    "inductor_fx_local_cache_miss_count",
    "structured_logging_overhead_s",
    "start_time",
)


class TraceHandler(logging.Handler):
    """Queues the structured-trace records ctmon needs. O(1) per record."""

    def __init__(
        self,
        channel: Channel,
        attribute: Callable[[], dict[str, object] | None],
        on_compile_end: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(logging.DEBUG)
        self._ch = channel
        self._attribute = attribute
        self._on_compile_end = on_compile_end  # on the compiling thread, in the compile (graph_calls.py)

    def handle(self, record: logging.LogRecord) -> bool:  # skip filters and locks
        ch = self._ch
        if ch.disabled:
            return False
        try:
            md = getattr(record, "metadata", None)
            if not isinstance(md, dict) or not md:
                return False
            name = next(iter(md))
            if name == "artifact":
                art = md.get("artifact")
                aname = art.get("name") if isinstance(art, dict) else None
                if aname not in KEEP_ARTIFACTS:
                    return False
                extra = getattr(record, "payload", None)
                if aname in CACHE_ARTIFACTS:
                    # on the compiling thread, inside torch.compile's config.patch:
                    # the settings the record's key was made from
                    extra = (extra, read_settings_in_force())
                ch.put(("trace", aname, record.created, md, extra), True)
            elif name in KEEP_EVENTS:
                extra = None
                if name == "dynamo_start":
                    # Runs on the compiling thread, so the live stack still
                    # holds the nn.Module being compiled (see attribution),
                    # and config reads see the user's overrides, which
                    # torch keeps thread-local.
                    extra = {"attr": self._attribute(), "cfg": read_dynamo_config(), "config": read_config_in_force()}
                elif name == "compilation_metrics":
                    extra = {"cfg": read_dynamo_config()}
                    if self._on_compile_end is not None:
                        try:
                            self._on_compile_end()
                        except Exception:  # the compile's record is sent whatever happens here
                            pass
                ch.put(("trace", name, record.created, md, extra), name != "str")
            elif name == "chromium_event":
                payload = getattr(record, "payload", None)
                if isinstance(payload, str) and phase_of(payload) is not None:
                    ch.put(("trace", name, record.created, md, payload), True)
        except Exception:
            ch.event_drops += 1
        return True

    def emit(self, record: logging.LogRecord) -> None:  # pragma: no cover - handle() is used
        self.handle(record)


# A note from this source means compile events may be missing: the CI gate
# (ctmon/report/gate.py) keys on it.
CAPTURE_SOURCE = "capture"
NOTES_MAX = 10


def compiles_started() -> int | None:
    """How many compile ids Dynamo has handed out (every compile, recompiles
    included, gets one before its ``dynamo_start``), or None when unknown."""
    cf = sys.modules.get("torch._dynamo.convert_frame")
    counter = getattr(cf, "FRAME_COMPILE_COUNTER", None)
    if not isinstance(counter, dict):
        return None
    try:
        return sum(v for v in counter.values() if isinstance(v, int))
    except (RuntimeError, TypeError):  # resized by a compiling thread mid-sum
        return None


class TraceWatch:
    """Keeps ctmon's handler on ``torch.__trace`` working, and says when it was not.

    The job's own logging set-up can turn the logger off after ctmon hooked
    it: ``logging.config.dictConfig`` (``disable_existing_loggers=True`` by
    default) sets ``disabled``; configuring the ``torch`` logger resets its
    children (handlers cleared, ``propagate`` on); code can clear
    ``handlers`` by hand. Any of these stops every compile event.

    Called on the sender thread at each flush (every ~250 ms): four attribute
    reads when all is well. When something is off it puts the logger back as
    PyTorch itself sets it up (DEBUG, not propagating, ctmon's handler first)
    and returns a note. Restoring does not change what the job's program
    does: records of this logger never propagate, and without TORCH_TRACE
    ctmon's handler is the only one, so nothing of the user's sees them.
    With TORCH_TRACE set, PyTorch's own trace file resumes too, which is what
    TORCH_TRACE asks for.
    """

    def __init__(self, logger: logging.Logger, handler: logging.Handler) -> None:
        self._logger = logger
        self._handler = handler
        self._ok_at = time.time()
        self._compiles = compiles_started()
        self.notes = 0

    def __call__(self) -> list[protocol.Event]:
        lg, h = self._logger, self._handler
        if not lg.disabled and not lg.propagate and lg.level <= logging.DEBUG and h in lg.handlers:
            self._ok_at = time.time()
            self._compiles = compiles_started()
            return []
        what = self._repair()
        now = time.time()
        after = compiles_started()
        before = self._compiles
        lost = after - before if after is not None and before is not None else None
        when = f"between {_clock(self._ok_at)} and {_clock(now)}"  # last seen working .. now
        self._ok_at, self._compiles = now, after
        self.notes += 1
        if self.notes > NOTES_MAX and lost == 0:
            return []  # a job that keeps reconfiguring: say again only when something was lost
        if lost == 0:
            level, tail = "info", "no compile started while it was off, so none is missing"
        elif lost:
            level, tail = (
                "warning",
                f"{lost} compile(s) started while it was off: their events are missing from this recording",
            )
        else:
            level, tail = "warning", "compile events in between may be missing"
        msg = (
            f"the job's logging configuration {what} PyTorch's trace logger (torch.__trace) {when}; "
            f"ctmon re-enabled it; {tail} (configure logging before importing torch, or with "
            "disable_existing_loggers=False)"
        )
        return [
            {
                "kind": protocol.NOTE,
                "t": now,
                "level": level,
                "source": CAPTURE_SOURCE,
                "message": msg,
                "missing_compiles": lost,
            }
        ]

    def _repair(self) -> str:
        lg, h = self._logger, self._handler
        what = []
        if lg.disabled:
            what.append("disabled")
            lg.disabled = False
        if h not in lg.handlers:
            what.append("removed ctmon's handler from")
            lg.addHandler(h)
            attach_first(lg, h)
        if lg.propagate:
            lg.propagate = False  # as PyTorch sets it: trace records are not the user's logs
        if lg.level > logging.DEBUG:
            what.append("raised the level of")
            lg.setLevel(logging.DEBUG)
        return " and ".join(what) or "reconfigured"


def attach_first(logger: logging.Logger, handler: logging.Handler) -> None:
    """Put ``handler`` first in line on ``logger``.

    Without TORCH_TRACE, PyTorch's own LazyTraceHandler removes itself from
    the logger while the first record is being handled, and logging's loop
    over the handler list then skips the handler after it for that record."""
    if handler not in logger.handlers:
        logger.addHandler(handler)
    handlers = logger.handlers
    if len(handlers) > 1 and handlers[0] is not handler:
        handlers.remove(handler)
        handlers.insert(0, handler)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 100) % 100:02d}"


def attribute_module() -> dict[str, object] | None:
    """Find the nn.Module whose call is being compiled, from the live stack.

    ``torch.compile(module)`` compiles a torch-internal wrapper frame, so the
    compile record names torch's code, not the user's. The module is the
    ``self`` of the innermost ``Module._wrapped_call_impl`` frame; unwrap an
    OptimizedModule to the user's module and report its class and forward().
    """
    nn = sys.modules.get("torch.nn.modules.module")
    if nn is None:
        return None
    target = nn.Module._wrapped_call_impl.__code__
    f: FrameType | None = sys._getframe(2)
    depth = 0
    while f is not None and depth < 80:
        if f.f_code is target:
            mod = f.f_locals.get("self")
            mod = getattr(mod, "_orig_mod", mod)
            cls = type(mod)
            fwd = getattr(cls, "forward", None)
            code = getattr(fwd, "__code__", None)
            info: dict[str, object] = {"module": cls.__qualname__}
            if code is not None:
                info["module_file"] = code.co_filename
                info["module_line"] = code.co_firstlineno
            return info
        f = f.f_back
        depth += 1
    return None
