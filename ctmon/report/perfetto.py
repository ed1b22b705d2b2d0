"""A run as a timeline: Chrome trace-event JSON, what Perfetto UI
(ui.perfetto.dev) and chrome://tracing open.

One process per rank (and one for the job itself: its launcher, the node's
samples), each with tracks for steps (one slice per step), compiles (one
slice per compile, its phases nested inside), and events (graph breaks and
cache results as instants); GPU utilisation and memory, CPU and RSS as
counter tracks. Times are microseconds from the run's first event. Built
from the event stream of a recording or of a PyTorch trace, so a recompile
storm can be seen against the step times at a glance.

Compile phases come from PyTorch's own phase timers where the run logged
them (``compile_phase`` events: Dynamo tracing, guards, AOTAutograd,
Inductor, code generation, autotuning, each backward graph), at the times
they ran. Older recordings have only the compile's metrics: the backend
(AOTAutograd and Inductor), Inductor and code generation as durations,
placed at the compile's end, where they run (Dynamo traces first).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ctmon.store.steps import step_number
from ctmon.wire import events as E
from ctmon.wire import events_compile as EC
from ctmon.wire.event_base import Event, Unknown
from ctmon.words.labels import PHASE_NAMES
from ctmon.words.textsafe import clean_markup

JOB_PID = 0
ORIGIN_PID = 10_000_000  # + the OS pid of a process without a rank, told apart from the job's
TRACKS = {"steps": 1, "compiles": 2, "events": 3}
# The latest event time (s since the epoch) drawn, and the longest duration:
# a recording may hold any finite number, and microseconds from a time near
# the float maximum are infinite, which strict JSON cannot hold.
LATEST_S = 1e15


class PerfettoExport:
    def __init__(self) -> None:
        self.out: list[dict[str, Any]] = []
        self.t0: float | None = None
        self._named: set[int] = set()
        self._open: dict[tuple[int, str], EC.CompileStart] = {}
        self._reasons: dict[tuple[int, str], list[str]] = {}
        self._boundary: dict[tuple[int, str], int] = {}  # a step source's last boundary, ns from the start
        self._origin: int | None = None  # the process (OS pid) of the event being added, where told
        self._phase_open: dict[tuple[int, str, str], float] = {}  # (pid, compile id, phase) -> start
        self._traced: set[tuple[int, str]] = set()  # compiles whose phases PyTorch's timers gave
        # step slices are named once the stream is read: the job's own step
        # numbers (step_number events) may come after the boundaries they name
        self._step_slices: list[tuple[dict[str, Any], tuple[int, str], int]] = []
        self._numbers: dict[tuple[int, str], list[tuple[int, int]]] = {}

    def _us(self, t: float) -> float:
        return round(self._rel(t) * 1e6, 3)

    def _rel(self, t: float) -> float:
        """Seconds from the run's first event: offsets are added after this,
        so they keep their precision (an epoch time has only ~0.2 µs)."""
        if self.t0 is None:
            self.t0 = t
        return t - self.t0

    def _pid(self, rank: int | None) -> int:
        origin = self._origin
        if rank is not None:
            pid, name = rank + 1, f"rank {rank}"
        elif origin is not None:
            pid, name = ORIGIN_PID + origin, f"process {origin}"
        else:
            pid, name = JOB_PID, "job"
        if pid not in self._named:
            self._named.add(pid)
            self.out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
            self.out.append(
                {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}
            )
            for track, tid in TRACKS.items():
                self.out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": track}})
        return pid

    def add(self, ev: Event | Unknown, origin: int | None = None) -> None:
        """One event; ``origin``: the OS pid of the process it came from,
        where a trace holds several processes without a rank."""
        if isinstance(ev, Unknown) or not 0 < ev.t <= LATEST_S:
            return
        self._origin = origin
        rank = getattr(ev, "rank", None)
        kind = type(ev)
        if kind is E.SessionStart:
            self._us(ev.t)
        elif kind is E.Process:
            assert isinstance(ev, E.Process)
            pid = self._pid(ev.rank)
            label = f"rank {ev.rank}" if ev.rank is not None else "job" if origin is None else "process"
            where = ", ".join(str(x) for x in (ev.host, f"pid {ev.pid}" if ev.pid else None) if x)
            self.out.append(
                {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": _text(f"{label} ({where})")}}
            )
        elif kind is E.Steps:
            assert isinstance(ev, E.Steps)
            self._steps(ev)
        elif kind is E.StepNumber:
            assert isinstance(ev, E.StepNumber)
            self._numbers.setdefault((self._pid(rank), ev.src), []).append((ev.i, ev.n))
        elif kind is EC.CompileStart:
            assert isinstance(ev, EC.CompileStart)
            self._open[(self._pid(rank), str(ev.compile_id))] = ev
            self._us(ev.t)
        elif kind is EC.RecompileReasons:
            assert isinstance(ev, EC.RecompileReasons)
            self._reasons[(self._pid(rank), str(ev.compile_id))] = list(ev.reasons[:4])
        elif kind is EC.Compile:
            assert isinstance(ev, EC.Compile)
            self._compile(ev)
        elif kind is EC.CompilePhase:
            assert isinstance(ev, EC.CompilePhase)
            self._phase(ev)
        elif kind is EC.BwdCompile:
            assert isinstance(ev, EC.BwdCompile)
            if (self._pid(rank), f"{ev.compile_id} backward") in self._traced:
                return  # drawn from PyTorch's timers already
            dur = ev.duration_us / 1e6 if ev.duration_us else (ev.inductor_compile_time_s or 0.0)
            self._slice(self._pid(rank), "compiles", f"backward {ev.compile_id}", self._rel(ev.t) - dur, dur, {})
        elif kind is EC.GraphBreak:
            assert isinstance(ev, EC.GraphBreak)
            where = f"{ev.file}:{ev.line}" if ev.file else "?"
            self._instant(self._pid(rank), f"graph break {where}", ev.t, {"reason": ev.summary or ev.reason or ""})
        elif kind is EC.CacheResult:
            assert isinstance(ev, EC.CacheResult)
            self._instant(
                self._pid(rank), f"{ev.cache} {ev.result}", ev.t, {"compile": ev.compile_id, "reason": ev.reason or ""}
            )
        elif kind is E.Sample:
            assert isinstance(ev, E.Sample)
            self._sample(ev)
        elif kind is E.Exit:
            assert isinstance(ev, E.Exit)
            how = f"code {ev.code}" if ev.code is not None else (ev.signal or "status unknown")
            self._instant(JOB_PID, f"exit ({how})", ev.t, {}, scope="g")

    def _slice(self, pid: int, track: str, name: str, start_rel: float, dur_s: float, args: dict[str, object]) -> None:
        self.out.append(
            {
                "ph": "X",
                "name": _text(name),
                "pid": pid,
                "tid": TRACKS[track],
                "ts": round(max(0.0, start_rel) * 1e6, 3),
                "dur": round(min(max(0.0, dur_s), LATEST_S) * 1e6, 3),
                "args": _texts(args),
            }
        )

    def _instant(self, pid: int, name: str, t: float, args: dict[str, object], scope: str = "t") -> None:
        if pid == JOB_PID:
            self._pid(None)  # its names, once
        self.out.append(
            {
                "ph": "i",
                "s": scope,
                "name": _text(name),
                "pid": pid,
                "tid": TRACKS["events"],
                "ts": self._us(t),
                "args": _texts(args),
            }
        )

    def _steps(self, ev: E.Steps) -> None:
        pid = self._pid(ev.rank)
        key = (pid, ev.src)
        src = _text(ev.src)
        self._us(ev.t)
        assert self.t0 is not None
        # in integer nanoseconds from the run's start: a day of steps adds no rounding
        t_ns = round((ev.t - self.t0) * 1e9)
        for k, ns in enumerate(ev.ns):
            if k > 0:
                t_ns += ns
            if ns > 0 and (k > 0 or key in self._boundary):
                step = {
                    "ph": "X",
                    "name": "step",  # numbered in result()
                    "pid": pid,
                    "tid": TRACKS["steps"],
                    "ts": (t_ns - ns) / 1000,
                    "dur": ns / 1000,
                    "args": {"ms": round(ns / 1e6, 3), "src": src},
                }
                self.out.append(step)
                self._step_slices.append((step, key, ev.i0 + k))
            self._boundary[key] = t_ns

    def _compile(self, ev: EC.Compile) -> None:
        pid = self._pid(ev.rank)
        cid = str(ev.compile_id)
        start = self._open.pop((pid, cid), None)
        total = ev.entire_frame_compile_time_s
        begin = self._rel(start.t) if start is not None else self._rel(ev.t) - (total or 0.0)
        dur = total if total is not None else max(0.0, self._rel(ev.t) - begin)
        name = (start.name if start is not None else None) or ev.co_name or "compile"
        args: dict[str, object] = {"compile_id": cid}
        if start is not None and start.file:
            args["at"] = f"{start.file}:{start.line}"
        reasons = self._reasons.pop((pid, cid), None)
        if reasons:
            args["recompile_reasons"] = reasons
        if ev.fail_type:
            args["failed"] = f"{ev.fail_type}: {ev.fail_reason or ''}"[:500]
        recompile = bool(reasons) or bool(ev.recompile_reason)
        self._slice(pid, "compiles", f"{'recompile' if recompile else 'compile'} {cid} {name}", begin, dur, args)
        if (pid, cid) in self._traced:
            return  # its phases are drawn from PyTorch's timers, where they ran
        end = begin + dur
        for label, secs in (
            ("backend (AOTAutograd + Inductor)", ev.backend_compile_time_s),
            ("Inductor", ev.inductor_compile_time_s),
            ("code generation", ev.code_gen_time_s),
        ):
            if secs and 0 < secs <= dur:
                self._slice(pid, "compiles", label, end - secs, secs, {"compile_id": cid, "placed": "at the end"})

    def _phase(self, ev: EC.CompilePhase) -> None:
        pid = self._pid(ev.rank)
        cid = str(ev.compile_id)
        key = (pid, cid, ev.phase)
        if ev.ph == "B":
            self._phase_open[key] = self._rel(ev.t)
            return
        start = self._phase_open.pop(key, None)
        if start is None:
            return
        self._traced.add((pid, f"{cid} backward" if ev.phase == "backward" else cid))
        label = f"backward {cid}" if ev.phase == "backward" else PHASE_NAMES.get(ev.phase, ev.phase)
        self._slice(pid, "compiles", label, start, self._rel(ev.t) - start, {"compile_id": cid})

    def _sample(self, ev: E.Sample) -> None:
        pid = self._pid(None)
        ts = self._us(ev.t)
        if ev.cpu_percent is not None:
            self.out.append({"ph": "C", "name": "CPU %", "pid": pid, "ts": ts, "args": {"cpu": ev.cpu_percent}})
        rss = ev.tree_rss or ev.rss
        if rss:  # 0 B: the job's process is gone (a zombie): the counter keeps its last live figure
            self.out.append({"ph": "C", "name": "RSS GB", "pid": pid, "ts": ts, "args": {"rss": round(rss / 1e9, 4)}})
        for g in ev.gpus or []:
            if g.util is not None:
                name = f"GPU {g.index} util %"
                self.out.append({"ph": "C", "name": name, "pid": pid, "ts": ts, "args": {"util": g.util}})
            if g.mem_used is not None:
                name = f"GPU {g.index} memory GB"
                mem = round(g.mem_used / 1e9, 4)
                self.out.append({"ph": "C", "name": name, "pid": pid, "ts": ts, "args": {"used": mem}})

    def result(self) -> dict[str, Any]:
        # each step as the job numbers it (ctmon/store/steps.py: 1-based, or the job's own)
        numbers = {key: sorted(found) for key, found in self._numbers.items()}
        for step, key, k in self._step_slices:
            step["name"] = f"step {step_number(key[1], k, numbers.get(key, ()))}"
        # per track in time order (metadata first), as viewers expect
        meta = [e for e in self.out if e["ph"] == "M"]
        timed = sorted((e for e in self.out if e["ph"] != "M"), key=lambda e: (e["pid"], e.get("tid", 0), e["ts"]))
        return {"traceEvents": meta + timed, "displayTimeUnit": "ms", "otherData": {"exporter": "ctmon"}}


def _text(value: str) -> str:
    """A string from the recording as the timeline shows it: the names and
    notes a viewer draws (Perfetto, the SVG) hold no control characters, lone
    surrogates or other characters a strict JSON or XML reader refuses."""
    return clean_markup(value)


def _texts(args: dict[str, object]) -> dict[str, object]:
    """A slice's or instant's notes, each string (in a list too) as :func:`_text`."""
    return {
        k: _text(v) if isinstance(v, str) else [_text(x) for x in v] if isinstance(v, list) else v
        for k, v in args.items()
    }


def export(events: Iterable[Event | Unknown | tuple[Event | Unknown, int | None]]) -> dict[str, Any]:
    """The timeline of an event stream; an item may be (event, origin): the
    OS pid of a process without a rank that it came from."""
    ex = PerfettoExport()
    for item in events:
        if isinstance(item, tuple):
            ex.add(*item)
        else:
            ex.add(item)
    return ex.result()
