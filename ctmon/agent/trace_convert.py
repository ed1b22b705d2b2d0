"""PyTorch's structured-trace records turned into ctmon events, on the sender
thread: graph-break text split into location, reason and user stack,
recompile reasons, cache results and Triton autotuning, compile records with
the user's own frame. The records come from ``trace.TraceHandler``."""

from __future__ import annotations

import json
import re
from typing import Any

from ctmon.agent.cache_keys import cache_components
from ctmon.agent.paths import called_from, is_ctmon_file, is_own_file, is_user_file
from ctmon.agent.phases import phase_of
from ctmon.agent.trace import BWD_FIELDS, CACHE_ARTIFACTS, METRIC_FIELDS
from ctmon.wire import guard_reasons, protocol

_GB_LOC = re.compile(r"Graph break in user code at (.*):(\d+)\s*$")
_FRAME = re.compile(r'^\s*File "(.*)", line (\d+), in (.*)$')
_TICKED = re.compile(r"`([^`]+)`")
_NAME_TOKEN = re.compile(r"^[A-Za-z_][\w.]{0,60}(\(\))?\.?$")
_URL = re.compile(r"(https?://\S+/(gb\d+)\.html)")


def parse_graph_break(text: str) -> dict[str, object]:
    """Split Dynamo's graph-break text into location, reason and user stack."""
    lines = text.splitlines()
    out: dict[str, object] = {"file": None, "line": None}
    if lines:
        m = _GB_LOC.match(lines[0].strip())
        if m:
            out["file"], out["line"] = m.group(1), int(m.group(2))
    reason_lines: list[str] = []
    stack: list[dict[str, object]] = []
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
                fr: dict[str, object] = {"file": m.group(1), "line": int(m.group(2)), "name": m.group(3)}
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


def parse_reasons(payload: str | None, limit: int | None = None) -> list[str]:
    """The reasons of a ``recompile_reasons`` artifact (a JSON list, or one
    reason as plain text); the first ``limit`` of them clipped for the wire."""
    raw = _reason_list(payload)
    return [protocol.clip(r, 4000) or "" for r in raw[:limit]]


def _reason_list(payload: str | None) -> list[str]:
    if not payload:
        return []
    s = payload.strip()
    if s.startswith("["):
        try:
            val = json.loads(s)
            if isinstance(val, list):
                return [str(v) for v in val]
        except ValueError:
            pass
    return [s]


def recompile_reasons(payload: str | None) -> dict[str, object]:
    """A ``recompile_reasons`` artifact's fields, bounded: PyTorch lists the
    failed guard of every cached version (n reasons on the n-th recompile);
    the event carries the kinds of them with their counts
    (ctmon/wire/guard_reasons.py) and ``total``, PyTorch's own count."""
    raw = _reason_list(payload)
    examined = [protocol.clip(r, 4000) or "" for r in raw[: guard_reasons.EXAMINED]]
    kept, counts = guard_reasons.summarize(examined)
    return {"reasons": kept, "counts": counts, "total": len(raw)}


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
        # compile id -> the user's own line into it (a library's frame): a
        # break inside the compile whose own stack starts at the compiled
        # frame falls back to it; dropped when the compile ends
        self._called: dict[str, dict[str, object]] = {}

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
            self._called.pop(str(base["compile_id"]), None)
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
            if not is_own_file(ev.get("file")):  # a break inside a library: the user's line into it
                mine = called_from(ev["user_stack"]) or self._called.get(str(base["compile_id"]))
                if mine is not None:
                    ev["called_from"] = mine
        elif name == "chromium_event":
            ev = self._phase(extra, base)
        elif name == "symbolic_shape_specialization":
            ev = self._specialization(md.get(name) or {}, base)
        elif name == "recompile_reasons":
            ev = {"kind": protocol.RECOMPILE_REASONS, **base, **recompile_reasons(extra)}
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

    def _dynamo_start(self, md: dict[str, Any], extra: object, base: dict[str, object]) -> protocol.Event:
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
        # where the user's code called into what is compiled (tlparse's stack trie, one level)
        callers = [f for f in stack[:-1] if is_own_file(f["file"])]
        if callers:
            c = callers[-1]
            ev["caller"] = {k: c[k] for k in ("file", "line", "name", "code") if c.get(k) is not None}
        # Module attribution only matters when Dynamo compiled torch's own
        # wrapper (torch.compile(module)); a user function names itself.
        user_code = bool(stack) and is_user_file(stack[-1]["file"])
        ev["user_code"] = user_code
        if stack and not is_own_file(stack[-1]["file"]):  # a library's frame: the user's line into it
            mine = called_from(stack)
            if mine is not None:
                ev["called_from"] = mine
                if len(self._called) < 1000:  # ids of compiles that never finish must not pile up
                    self._called[str(base["compile_id"])] = mine
        extra = extra if isinstance(extra, dict) else {}
        attr = extra.get("attr")
        if isinstance(attr, dict) and stack:
            ev.update(attr)
            ev["module_user"] = is_user_file(attr.get("module_file"))
        ev.update(extra.get("cfg") or {})
        config = extra.get("config")
        if isinstance(config, dict) and config:
            ev["dynamo_config"] = config
        return ev

    @staticmethod
    def _phase(payload: Any, base: dict[str, object]) -> protocol.Event | None:
        """A compile phase's edge, at PyTorch's own timestamp (µs)."""
        phase = phase_of(payload) if isinstance(payload, str) else None
        if phase is None:
            return None
        ev = json.loads(payload)
        ph, ts = ev.get("ph"), ev.get("ts")
        if ph not in ("B", "E"):
            return None
        t = ts / 1e6 if isinstance(ts, (int, float)) and ts > 0 else base["t"]
        return {"kind": protocol.COMPILE_PHASE, **base, "t": t, "phase": phase, "ph": ph}

    def _specialization(self, sp: dict[str, Any], base: dict[str, object]) -> protocol.Event:
        ev: protocol.Event = {"kind": protocol.SPECIALIZATION, **base}
        for k in ("symbol", "value", "reason"):
            if sp.get(k) is not None:
                ev[k] = protocol.clip(str(sp[k]), 500)
        ev["sources"] = [protocol.clip(str(x), 300) for x in (sp.get("sources") or [])[:8]]
        user = [f for f in sp.get("user_stack") or [] if isinstance(f, dict)]
        if user:
            fr = user[-1]
            fn = fr.get("filename")
            ev["file"] = self._strings.get(fn, str(fn)) if isinstance(fn, int) else str(fn)
            ev["line"] = fr.get("line")
            if fr.get("loc"):
                ev["code"] = protocol.clip(str(fr["loc"]), 500)
        return ev

    def _metrics(self, md: dict[str, Any], base: dict[str, object]) -> protocol.Event:
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

    def _cache(self, name: str, extra: object, base: dict[str, object]) -> protocol.Event:
        cache, result = CACHE_ARTIFACTS[name]
        ev: protocol.Event = {"kind": protocol.CACHE, **base, "cache": cache, "result": result}
        payload = extra
        if isinstance(extra, tuple) and len(extra) == 2:  # the agent's (payload, settings in force)
            payload, settings = extra
            if isinstance(settings, dict):
                ev["settings"] = settings
        info = cache_fields(payload) if isinstance(payload, str) else {}
        if info.get("key"):
            ev["key"] = str(info["key"])[:80]
        reason = info.get("cache_bypass_reason") or info.get("reason")
        if reason:
            ev["reason"] = protocol.clip(reason, 2000)
        if info.get("cache_status_detailed"):
            ev["detail"] = str(info["cache_status_detailed"])[:80]
        if isinstance(payload, str):
            components, graph = cache_components(payload)
            if components:
                ev["components"] = components
            if graph is not None and cache == "fx_graph":
                ev["graph"] = graph
        saved = info.get("time_saved_ms")
        if isinstance(saved, (int, float)):
            ev["time_saved_s"] = saved / 1000.0
        elif isinstance(info.get("time_saved_ns"), (int, float)):
            ev["time_saved_s"] = info["time_saved_ns"] / 1e9
        return ev

    def _autotune(self, payload: object, base: dict[str, object]) -> protocol.Event | None:
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
            k: dict[str, object] = {"name": str(kname)[:200]}
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
