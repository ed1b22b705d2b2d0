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

import json
import logging
import re
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from ctmon.agent.channel import Channel
from ctmon.agent.paths import is_ctmon_file, is_user_file
from ctmon.wire import protocol

KEEP_EVENTS = frozenset({"dynamo_start", "compilation_metrics", "bwd_compilation_metrics", "str"})
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

    def __init__(self, channel: Channel, attribute: Callable[[], dict[str, Any] | None]) -> None:
        super().__init__(logging.DEBUG)
        self._ch = channel
        self._attribute = attribute

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
                ch.put(("trace", aname, record.created, md, getattr(record, "payload", None)), True)
            elif name in KEEP_EVENTS:
                extra = None
                if name == "dynamo_start":
                    # Runs on the compiling thread, so the live stack still
                    # holds the nn.Module being compiled (see attribution),
                    # and config reads see the user's overrides, which
                    # torch keeps thread-local.
                    extra = {"attr": self._attribute(), "cfg": read_dynamo_config()}
                elif name == "compilation_metrics":
                    extra = {"cfg": read_dynamo_config()}
                ch.put(("trace", name, record.created, md, extra), name != "str")
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

    Called on the sender thread at each flush (every 50 ms): four attribute
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


def read_dynamo_config() -> dict[str, Any]:
    cfg = sys.modules.get("torch._dynamo.config")
    if cfg is None:
        return {}
    for name in ("recompile_limit", "cache_size_limit"):
        val = getattr(cfg, name, None)
        if isinstance(val, int):
            return {"recompile_limit": val}
    return {}


def attribute_module() -> dict[str, Any] | None:
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
            info: dict[str, Any] = {"module": cls.__qualname__}
            if code is not None:
                info["module_file"] = code.co_filename
                info["module_line"] = code.co_firstlineno
            return info
        f = f.f_back
        depth += 1
    return None


_GB_LOC = re.compile(r"Graph break in user code at (.*):(\d+)\s*$")
_FRAME = re.compile(r'^\s*File "(.*)", line (\d+), in (.*)$')
_TICKED = re.compile(r"`([^`]+)`")
_NAME_TOKEN = re.compile(r"^[A-Za-z_][\w.]{0,60}(\(\))?\.?$")
_URL = re.compile(r"(https?://\S+/(gb\d+)\.html)")


def parse_graph_break(text: str) -> dict[str, Any]:
    """Split Dynamo's graph-break text into location, reason and user stack."""
    lines = text.splitlines()
    out: dict[str, Any] = {"file": None, "line": None}
    if lines:
        m = _GB_LOC.match(lines[0].strip())
        if m:
            out["file"], out["line"] = m.group(1), int(m.group(2))
    reason_lines: list[str] = []
    stack: list[dict[str, Any]] = []
    section = "head"
    i = 0
    while i < len(lines):
        ln = lines[i]
        s = ln.strip()
        if s.startswith("Graph Break Reason:"):
            section = "reason"
            rest = s[len("Graph Break Reason:") :].strip()
            if rest:
                reason_lines.append(rest)
        elif s == "User code traceback:":
            section = "stack"
        elif section == "stack" and s.startswith("Traceback (most recent call last)"):
            break
        elif section == "reason":
            reason_lines.append(ln.rstrip())
        elif section == "stack":
            m = _FRAME.match(ln)
            if m:
                fr: dict[str, Any] = {"file": m.group(1), "line": int(m.group(2)), "name": m.group(3)}
                if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) and lines[i + 1].strip():
                    fr["code"] = lines[i + 1].strip()
                    i += 1
                stack.append(fr)
        i += 1
    full = "\n".join(reason_lines).strip()
    url = _URL.search(text)
    if url:
        out["url"], out["gb_id"] = url.group(1), url.group(2)
        full = full.replace(f"For more details about this graph break, please visit: {url.group(1)}", "").strip()
    out["reason"] = protocol.clip(full, 8000)
    expl = [x.strip()[len("Explanation:") :].strip() for x in reason_lines if x.strip().startswith("Explanation:")]
    summary = summarize_reason(reason_lines)
    # A generic type ("Failed to trace builtin operator") says more with the
    # name the explanation gives it (`print`).
    tok = _TICKED.search(expl[0]) if expl else None
    if tok and tok.group(1) not in summary and _NAME_TOKEN.match(tok.group(1)):
        # only a name (`print`, `time.time`), never PyTorch's example code
        summary = f"{summary}: {tok.group(1)}"
    out["summary"] = summary
    hints = [x.strip()[len("Hint:") :].strip() for x in reason_lines if x.strip().startswith("Hint:")]
    if expl:
        out["explanation"] = expl[0]
    if hints:
        out["hints"] = hints[:6]
    out["user_stack"] = stack[-12:]
    if out["file"] is None and stack:
        out["file"], out["line"] = stack[-1]["file"], stack[-1]["line"]
    return out


def summarize_reason(reason_lines: list[str]) -> str:
    """The one line that names the cause (PyTorch's graph-break 'type')."""
    cleaned = [x.strip() for x in reason_lines if x.strip()]
    for x in cleaned:
        if x.startswith("Encountered graph break when attempting to trace"):
            continue
        if x.startswith(("Explanation:", "Hint:", "Developer debug context:")):
            break
        return x.rstrip(":")
    return cleaned[0] if cleaned else "graph break"


def parse_reasons(payload: str | None) -> list[str]:
    if not payload:
        return []
    s = payload.strip()
    if s.startswith("["):
        try:
            val = json.loads(s)
            if isinstance(val, list):
                return [protocol.clip(str(v), 4000) or "" for v in val]
        except ValueError:
            pass
    return [protocol.clip(s, 4000) or ""]


_CACHE_FIELDS = ("key", "cache_status_detailed", "cache_bypass_reason", "reason", "time_saved_ms", "time_saved_ns")
_JSON_VALUE = r'\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|null|true|false)'
_CACHE_FIELD_RE = {k: re.compile('"' + k + '"' + _JSON_VALUE) for k in _CACHE_FIELDS}


def cache_fields(payload: str) -> dict[str, Any]:
    """The few fields ctmon keeps from a cache artifact's JSON payload.

    The payload also lists every component of the cache key (the whole
    graph's code, often hundreds of KB); parsing all of it on every compile
    would cost the compiling job CPU for nothing, so the wanted top-level
    values are picked out by pattern and each one is parsed on its own."""
    out: dict[str, Any] = {}
    for k, rx in _CACHE_FIELD_RE.items():
        m = rx.search(payload)
        if m is None:
            continue
        try:
            out[k] = json.loads(m.group(1))
        except ValueError:
            continue
    return out


class TraceConverter:
    """Sender-thread side: raw trace records -> protocol events."""

    def __init__(self) -> None:
        self._strings: dict[int, str] = {}

    @staticmethod
    def compile_id(md: dict[str, Any]) -> str | None:
        fid, fcid = md.get("frame_id"), md.get("frame_compile_id")
        if fid is None:
            return None
        cid = f"{fid}/{fcid}"
        ca = md.get("compiled_autograd_id")
        return f"!{ca}/{cid}" if ca is not None else cid

    def convert(self, name: str, t: float, md: dict[str, Any], extra: Any) -> list[protocol.Event]:
        ev: protocol.Event | None = None
        if name == "str":
            val = md.get("str")
            if isinstance(val, (list, tuple)) and len(val) == 2:
                self._strings[int(val[1])] = str(val[0])
            return []
        base = {"t": t, "compile_id": self.compile_id(md), "frame_id": md.get("frame_id")}
        if md.get("rank") is not None:
            base["rank"] = md.get("rank")
        if name == "dynamo_start":
            ev = self._dynamo_start(md, extra, base)
        elif name == "compilation_metrics":
            ev = self._metrics(md, base)
            if isinstance(extra, dict):
                ev.update(extra.get("cfg") or {})
        elif name == "bwd_compilation_metrics":
            m = md.get(name) or {}
            ev = {"kind": protocol.BWD_COMPILE, **base}
            for k in BWD_FIELDS:
                if m.get(k) is not None:
                    ev[k] = m[k]
            if m.get("compile_id"):
                ev["compile_id"] = m["compile_id"]
        elif name == "dynamo_graph_break_reason":
            ev = {"kind": protocol.GRAPH_BREAK, **base, **parse_graph_break(extra or "")}
            # the job's stack starts in ctmon's launcher: not the user's code
            ev["user_stack"] = [f for f in ev.get("user_stack") or [] if not is_ctmon_file(f.get("file"))]
        elif name == "recompile_reasons":
            ev = {"kind": protocol.RECOMPILE_REASONS, **base, "reasons": parse_reasons(extra)}
        elif name in CACHE_ARTIFACTS:
            ev = self._cache(name, extra, base)
        elif name == "triton_kernel_info":
            ev = self._autotune(extra, base)
        elif name == "dynamo_error":
            ev = {
                "kind": protocol.NOTE,
                **base,
                "level": "error",
                "source": "dynamo",
                "message": protocol.clip(extra, 8000),
            }
        return [ev] if ev is not None else []

    def _dynamo_start(self, md: dict[str, Any], extra: Any, base: dict[str, Any]) -> protocol.Event:
        raw = (md.get("dynamo_start") or {}).get("stack") or []
        stack = []
        for fr in raw:
            if not isinstance(fr, dict):
                continue
            fn = fr.get("filename")
            path = self._strings.get(fn, str(fn)) if isinstance(fn, int) else str(fn)
            stack.append({"file": path, "line": fr.get("line"), "name": fr.get("name"), "code": fr.get("loc") or None})
        ev: protocol.Event = {"kind": protocol.COMPILE_START, **base}
        if stack:
            top = stack[-1]
            ev.update(name=top["name"], file=top["file"], line=top["line"])
            users = [f for f in stack if is_user_file(f["file"])]
            if users:
                u = users[-1]
                ev["user"] = {k: u[k] for k in ("file", "line", "name", "code") if u.get(k) is not None}
        # Module attribution only matters when Dynamo compiled torch's own
        # wrapper (torch.compile(module)); a user function names itself.
        user_code = bool(stack) and is_user_file(stack[-1]["file"])
        ev["user_code"] = user_code
        extra = extra if isinstance(extra, dict) else {}
        attr = extra.get("attr")
        if isinstance(attr, dict) and stack:
            ev.update(attr)
            ev["module_user"] = is_user_file(attr.get("module_file"))
        ev.update(extra.get("cfg") or {})
        return ev

    def _metrics(self, md: dict[str, Any], base: dict[str, Any]) -> protocol.Event:
        m = md.get("compilation_metrics") or {}
        ev: protocol.Event = {"kind": protocol.COMPILE, **base}
        if m.get("compile_id"):
            ev["compile_id"] = m["compile_id"]
        for k in METRIC_FIELDS:
            v = m.get(k)
            if v is None or v == [] or v == "":
                continue
            if isinstance(v, str):
                v = protocol.clip(v, 8000)
            elif isinstance(v, (list, tuple)):
                v = [protocol.clip(x, 2000) if isinstance(x, str) else x for x in list(v)[:50]]
            ev[k] = v
        return ev

    def _cache(self, name: str, payload: Any, base: dict[str, Any]) -> protocol.Event:
        cache, result = CACHE_ARTIFACTS[name]
        ev: protocol.Event = {"kind": protocol.CACHE, **base, "cache": cache, "result": result}
        info = cache_fields(payload) if isinstance(payload, str) else {}
        if info.get("key"):
            ev["key"] = str(info["key"])[:80]
        reason = info.get("cache_bypass_reason") or info.get("reason")
        if reason:
            ev["reason"] = protocol.clip(reason, 2000)
        if info.get("cache_status_detailed"):
            ev["detail"] = str(info["cache_status_detailed"])[:80]
        saved = info.get("time_saved_ms")
        if isinstance(saved, (int, float)):
            ev["time_saved_s"] = saved / 1000.0
        elif isinstance(info.get("time_saved_ns"), (int, float)):
            ev["time_saved_s"] = info["time_saved_ns"] / 1e9
        return ev

    def _autotune(self, payload: Any, base: dict[str, Any]) -> protocol.Event | None:
        try:
            info = json.loads(payload) if isinstance(payload, str) else None
        except ValueError:
            info = None
        if not isinstance(info, dict):
            return None
        kernels = []
        for kname, kinfo in list(info.items())[:200]:
            if not isinstance(kinfo, dict):
                continue
            k: dict[str, Any] = {"name": str(kname)[:200]}
            for key, val in kinfo.items():
                if isinstance(val, (int, float, str, bool)) or val is None:
                    k[str(key)[:60]] = protocol.clip(val, 500) if isinstance(val, str) else val
                elif isinstance(val, dict) and len(val) <= 20:
                    k[str(key)[:60]] = {
                        str(a)[:60]: (b if isinstance(b, (int, float, bool)) or b is None else str(b)[:200])
                        for a, b in val.items()
                    }
            kernels.append(k)
        return {"kind": protocol.AUTOTUNE, **base, "kernels": kernels}
