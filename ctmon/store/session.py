"""The session store: every event folds into one state object.

Pure Python -- no torch, no textual, no I/O. Live view, replay, report and
the CI gate all read this object, so they cannot disagree. ``apply`` never
raises on malformed input (fields of the wrong type are ignored), which the
fuzz tests check.

``rev`` counts changes per section ("steps", "compile", "samples", "output",
"log", "meta") so a viewer repaints only what changed.
"""

from __future__ import annotations

import signal as _signal
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from ctmon.store.compiles import CompileState
from ctmon.store.output import OutputBuffer
from ctmon.store.steps import StepClock
from ctmon.store.values import finite, nonempty
from ctmon.wire import protocol

_INF = float("inf")
LOG_MAX = 5000
SAMPLES_MAX = 3600


@dataclass
class LogEntry:
    t: float
    kind: str  # compile | recompile | graph_break | cache | limit | note | exit | error
    text: str
    severity: str = "info"  # info | warning | critical
    ref: Any = None  # compile id, break site key, ...


@dataclass
class Meta:
    session_id: str | None = None
    command: list[str] = field(default_factory=list)
    cwd: str | None = None
    host: str | None = None
    mode: str | None = None
    ctmon_version: str | None = None
    protocol_version: int | None = None
    supervisor_pid: int | None = None
    pid: int | None = None
    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    triton: str | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    cache_dir: str | None = None
    cache_entries: dict[str, int] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    start_t: float | None = None
    recording: str | None = None
    gpu_error: str | None = None  # why there are no GPU samples (no NVML, no GPU)


@dataclass
class ExitInfo:
    code: int | None
    signal: str | None
    t: float

    @property
    def status(self) -> int:
        """Shell-style status: the code, or 128 + signal number."""
        if self.code is not None:
            return self.code
        if self.signal:
            try:
                return 128 + int(getattr(_signal, self.signal))
            except (AttributeError, TypeError, ValueError):
                return 128
        return 1


class Session:
    def __init__(self) -> None:
        self.meta = Meta()
        self.steps = StepClock()
        self.compile = CompileState()
        self.output = OutputBuffer()
        self.log: deque[LogEntry] = deque(maxlen=LOG_MAX)
        self.log_counts: Counter[str] = Counter()
        self.samples: deque[protocol.Event] = deque(maxlen=SAMPLES_MAX)
        self.notes: list[protocol.Event] = []
        self.exit: ExitInfo | None = None
        self.drops = {"steps": 0, "events": 0}
        self.events = 0
        self.bad_events = 0
        self.unknown: Counter[str] = Counter()
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.newer_protocol = False
        self._session_seen = False
        self.rev: Counter[str] = Counter()
        self._findings: list[Any] = []
        self._findings_key: Any = None
        self._handlers = {
            protocol.SESSION: self._on_session,
            protocol.PROCESS: self._on_process,
            protocol.TORCH: self._on_torch,
            protocol.DEVICES: self._on_devices,
            protocol.COMPILE_START: self._on_compile_start,
            protocol.COMPILE: self._on_compile,
            protocol.BWD_COMPILE: self._on_bwd,
            protocol.RECOMPILE_REASONS: self._on_reasons,
            protocol.GRAPH_BREAK: self._on_graph_break,
            protocol.CACHE: self._on_cache,
            protocol.AUTOTUNE: self._on_autotune,
            protocol.CUDAGRAPH: self._on_cudagraph,
            protocol.STEPS: self._on_steps,
            protocol.DEVICE_TIME: self._on_device_time,
            protocol.DROPS: self._on_drops,
            protocol.NOTE: self._on_note,
            protocol.OUTPUT: self._on_output,
            protocol.SAMPLE: self._on_sample,
            protocol.EXIT: self._on_exit,
        }

    # ---- folding ----

    def apply(self, ev: protocol.Event) -> None:
        self.events += 1
        kind = ev.get("kind")
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            self.unknown[str(kind)[:40]] += 1
            return
        try:
            t = ev.get("t")
            if type(t) is not float or t != t or t == _INF:  # decode() already gives finite floats
                t = finite(t)
            if t is not None and t > 0:
                if self.first_t is None or t < self.first_t:
                    self.first_t = t
                if self.last_t is None or t > self.last_t:
                    self.last_t = t
            handler(ev)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError):
            self.bad_events += 1

    def apply_all(self, events: Any) -> Session:
        for ev in events:
            self.apply(ev)
        return self

    def _log(self, t: Any, kind: str, text: str, severity: str = "info", ref: Any = None) -> None:
        self.log.append(LogEntry(finite(t) or 0.0, kind, text, severity, ref))
        self.log_counts[kind] += 1
        self.rev["log"] += 1

    def _on_session(self, ev: protocol.Event) -> None:
        if self._session_seen:
            # Two recordings joined into one file (cat a b > c): the later
            # header would relabel the first run's events. Keep the first.
            self._on_note(
                {
                    "kind": protocol.NOTE,
                    "t": ev.get("t"),
                    "level": "warning",
                    "source": "ctmon",
                    "message": f"recording holds a second session header at event {self.events} "
                    "(two recordings concatenated?); showing the first",
                }
            )
            return
        self._session_seen = True
        m = self.meta
        m.session_id = nonempty(ev.get("id")) or m.session_id
        cmd = ev.get("command")
        if isinstance(cmd, list):
            m.command = [str(c) for c in cmd]
        m.cwd = nonempty(ev.get("cwd")) or m.cwd
        m.host = nonempty(ev.get("host")) or m.host
        m.mode = nonempty(ev.get("mode")) or m.mode
        m.ctmon_version = nonempty(ev.get("ctmon")) or m.ctmon_version
        v = ev.get("v")
        if isinstance(v, int):
            m.protocol_version = v
            self.newer_protocol = v > protocol.PROTOCOL_VERSION
        if isinstance(ev.get("pid"), int):
            m.supervisor_pid = ev["pid"]
        if isinstance(ev.get("job_pid"), int):
            m.pid = ev["job_pid"]
        m.recording = nonempty(ev.get("recording")) or m.recording
        if finite(ev.get("t")):
            m.start_t = finite(ev.get("t"))
        self.rev["meta"] += 1

    def _on_process(self, ev: protocol.Event) -> None:
        if isinstance(ev.get("pid"), int):
            self.meta.pid = ev["pid"]
        self.meta.python = nonempty(ev.get("python")) or self.meta.python
        self.rev["meta"] += 1

    def _on_torch(self, ev: protocol.Event) -> None:
        m = self.meta
        m.torch = nonempty(ev.get("torch")) or m.torch
        m.cuda = nonempty(ev.get("cuda")) or m.cuda
        m.triton = nonempty(ev.get("triton")) or m.triton
        m.cache_dir = nonempty(ev.get("cache_dir")) or m.cache_dir
        entries = ev.get("cache_entries")
        if isinstance(entries, dict):
            m.cache_entries = {str(k): int(v) for k, v in entries.items() if isinstance(v, int)}
        env = ev.get("env")
        if isinstance(env, dict):
            m.env = {str(k): str(v) for k, v in env.items()}
        self.rev["meta"] += 1

    def _on_devices(self, ev: protocol.Event) -> None:
        devs = ev.get("cuda")
        if isinstance(devs, list):
            self.meta.devices = [d for d in devs if isinstance(d, dict)]
            self.rev["meta"] += 1

    def _on_compile_start(self, ev: protocol.Event) -> None:
        self.compile.on_start(ev)
        self.rev["compile"] += 1

    def _on_compile(self, ev: protocol.Event) -> None:
        rec = self.compile.on_compile(ev)
        frame = self.compile.frames.get(rec.frame_id)
        where = frame.loc.text() if frame else "?"
        name = frame.title if frame else "?"
        if rec.limit_hit:
            self._log(
                ev.get("t"),
                "limit",
                f"{rec.compile_id} {name} at {where}: recompile limit hit; this frame now runs eager",
                "critical",
                rec.compile_id,
            )
        elif not rec.ok:
            self._log(
                ev.get("t"),
                "error",
                f"{rec.compile_id} {name} at {where}: compile failed ({rec.fail_type}): {_first_line(rec.fail_reason)}",
                "warning",
                rec.compile_id,
            )
        elif rec.is_recompile:
            self._log(
                ev.get("t"),
                "recompile",
                f"{rec.compile_id} {name} at {where} ({rec.time_s:.2f}s): {_first_line(rec.recompile_reason)}",
                "warning",
                rec.compile_id,
            )
        else:
            self._log(
                ev.get("t"),
                "compile",
                f"{rec.compile_id} {name} at {where} ({rec.time_s:.2f}s)",
                "info",
                rec.compile_id,
            )
        self.rev["compile"] += 1

    def _on_bwd(self, ev: protocol.Event) -> None:
        self.compile.on_bwd(ev)
        self.rev["compile"] += 1

    def _on_reasons(self, ev: protocol.Event) -> None:
        self.compile.on_reasons(ev)

    def _on_graph_break(self, ev: protocol.Event) -> None:
        site = self.compile.on_graph_break(ev)
        self._log(
            ev.get("t"),
            "graph_break",
            f"graph break at {site.loc.text()}: {site.reason}",
            "warning",
            (site.file, site.line),
        )
        self.rev["compile"] += 1

    def _on_cache(self, ev: protocol.Event) -> None:
        self.compile.on_cache(ev)
        extra = f" ({str(ev.get('reason'))[:120]})" if ev.get("result") == "bypass" and ev.get("reason") else ""
        self._log(
            ev.get("t"),
            "cache",
            f"{ev.get('cache')} cache {ev.get('result')} [{ev.get('compile_id')}]{extra}",
            "info",
            ev.get("compile_id"),
        )
        self.rev["compile"] += 1

    def _on_autotune(self, ev: protocol.Event) -> None:
        self.compile.on_autotune(ev)
        n = len(ev.get("kernels") or [])
        self._log(
            ev.get("t"),
            "autotune",
            f"Triton: {n} kernel(s) compiled/tuned [{ev.get('compile_id')}]",
            "info",
            ev.get("compile_id"),
        )
        self.rev["compile"] += 1

    def _on_cudagraph(self, ev: protocol.Event) -> None:
        reason = nonempty(ev.get("reason")) or nonempty(ev.get("message")) or "cudagraph event"
        self.compile.cudagraph_skips[reason[:300]] += 1
        self._log(ev.get("t"), "cudagraph", f"cudagraphs: {reason[:200]}", "warning")
        self.rev["compile"] += 1

    def _on_steps(self, ev: protocol.Event) -> None:
        if self.steps.on_steps(ev):
            self.rev["steps"] += 1

    def _on_device_time(self, ev: protocol.Event) -> None:
        if self.steps.on_device_time(ev):
            self.rev["steps"] += 1

    def _on_drops(self, ev: protocol.Event) -> None:
        for k in ("steps", "events"):
            v = ev.get(k)
            if isinstance(v, int) and v > self.drops[k]:
                self.drops[k] = v
        self.rev["meta"] += 1

    def _on_note(self, ev: protocol.Event) -> None:
        if len(self.notes) < 1000:
            self.notes.append(ev)
        level = nonempty(ev.get("level")) or "info"
        sev = {"error": "warning", "warning": "warning"}.get(level, "info")
        self._log(ev.get("t"), "note", _first_line(nonempty(ev.get("message")) or ""), sev)

    def _on_output(self, ev: protocol.Event) -> None:
        data = ev.get("data")
        if isinstance(data, str):
            self.output.feed(nonempty(ev.get("stream")) or "stdout", data)
            self.rev["output"] += 1

    def _on_sample(self, ev: protocol.Event) -> None:
        if isinstance(ev.get("gpu_error"), str):
            self.meta.gpu_error = ev["gpu_error"][:300]  # sent once; samples roll over
        self.samples.append(ev)
        self.rev["samples"] += 1

    def _on_exit(self, ev: protocol.Event) -> None:
        code = ev.get("code")
        sig = nonempty(ev.get("signal"))
        self.exit = ExitInfo(code if isinstance(code, int) else None, sig, finite(ev.get("t")) or 0.0)
        before = self.output.total_lines
        self.output.flush_partial()
        if self.output.total_lines != before:
            self.rev["output"] += 1
        what = f"exited with code {self.exit.code}" if self.exit.code is not None else f"killed by {sig}"
        self._log(ev.get("t"), "exit", f"job {what}", "critical" if self.exit.status != 0 else "info")
        self.rev["meta"] += 1

    # ---- derived ----

    @property
    def state(self) -> str:
        if self.exit is not None:
            return "exited"
        if self.compile.active:
            return "compiling"
        if self.steps.count > 0 or self.compile.compile_count > 0:
            return "running"
        return "starting"

    @property
    def duration_s(self) -> float | None:
        start = self.meta.start_t or self.first_t
        end = self.exit.t if self.exit else self.last_t
        if start is None or end is None:
            return None
        return max(0.0, end - start)

    def latest_sample(self) -> protocol.Event | None:
        return self.samples[-1] if self.samples else None

    def findings(self) -> list[Any]:
        """Findings for the current state, recomputed only when the state changed."""
        from ctmon.store.findings import analyze

        key = (
            self.rev["compile"],
            self.rev["steps"],
            self.rev["samples"] // 5,
            self.rev["meta"],
            self.exit is not None,
        )
        if self._findings_key != key:
            self._findings = analyze(self)
            self._findings_key = key
        return self._findings


def _first_line(text: str | None, limit: int = 200) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit]
