"""A run as a timeline: Chrome trace-event JSON, what Perfetto UI
(ui.perfetto.dev) and chrome://tracing open.

One process per rank (and one for the job itself: its launcher, the node's
samples), each with tracks for steps (one slice per step), compiles (one
slice per compile, its phases nested inside), and events (graph breaks and
cache results as instants); GPU utilisation and memory, CPU and RSS as
counter tracks. Times are microseconds from the run's first event. Built
from the event stream of a recording or of a PyTorch trace, so a recompile
storm can be seen against the step times at a glance.

Compile phases come from the compile's own metrics: the whole frame, and
within it the backend (AOTAutograd and Inductor), Inductor, and its code
generation. The metrics give durations, not starts: the backend phases are
placed at the compile's end, where they run (Dynamo traces first).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ctmon.wire import events as E

JOB_PID = 0
TRACKS = {"steps": 1, "compiles": 2, "events": 3}


class PerfettoExport:
    def __init__(self) -> None:
        self.out: list[dict[str, Any]] = []
        self.t0: float | None = None
        self._named: set[int] = set()
        self._open: dict[tuple[int, str], E.CompileStart] = {}
        self._reasons: dict[tuple[int, str], list[str]] = {}
        self._boundary: dict[tuple[int, str], int] = {}  # a step source's last boundary, ns from the start

    def _us(self, t: float) -> float:
        return round(self._rel(t) * 1e6, 3)

    def _rel(self, t: float) -> float:
        """Seconds from the run's first event: offsets are added after this,
        so they keep their precision (an epoch time has only ~0.2 µs)."""
        if self.t0 is None:
            self.t0 = t
        return t - self.t0

    def _pid(self, rank: int | None) -> int:
        pid = JOB_PID if rank is None else rank + 1
        if pid not in self._named:
            self._named.add(pid)
            name = "job" if rank is None else f"rank {rank}"
            self.out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
            self.out.append(
                {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}
            )
            for track, tid in TRACKS.items():
                self.out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": track}})
        return pid

    def add(self, ev: E.Event | E.Unknown) -> None:
        if isinstance(ev, E.Unknown) or ev.t <= 0:
            return
        rank = getattr(ev, "rank", None)
        kind = type(ev)
        if kind is E.SessionStart:
            self._us(ev.t)
        elif kind is E.Process:
            assert isinstance(ev, E.Process)
            pid = self._pid(ev.rank)
            label = f"rank {ev.rank}" if ev.rank is not None else "job"
            where = ", ".join(str(x) for x in (ev.host, f"pid {ev.pid}" if ev.pid else None) if x)
            self.out.append(
                {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"{label} ({where})"}}
            )
        elif kind is E.Steps:
            assert isinstance(ev, E.Steps)
            self._steps(ev)
        elif kind is E.CompileStart:
            assert isinstance(ev, E.CompileStart)
            self._open[(self._pid(rank), str(ev.compile_id))] = ev
            self._us(ev.t)
        elif kind is E.RecompileReasons:
            assert isinstance(ev, E.RecompileReasons)
            self._reasons[(self._pid(rank), str(ev.compile_id))] = list(ev.reasons[:4])
        elif kind is E.Compile:
            assert isinstance(ev, E.Compile)
            self._compile(ev)
        elif kind is E.BwdCompile:
            assert isinstance(ev, E.BwdCompile)
            dur = ev.duration_us / 1e6 if ev.duration_us else (ev.inductor_compile_time_s or 0.0)
            self._slice(self._pid(rank), "compiles", f"backward {ev.compile_id}", self._rel(ev.t) - dur, dur, {})
        elif kind is E.GraphBreak:
            assert isinstance(ev, E.GraphBreak)
            where = f"{ev.file}:{ev.line}" if ev.file else "?"
            self._instant(self._pid(rank), f"graph break {where}", ev.t, {"reason": ev.summary or ev.reason or ""})
        elif kind is E.CacheResult:
            assert isinstance(ev, E.CacheResult)
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

    def _slice(self, pid: int, track: str, name: str, start_rel: float, dur_s: float, args: dict[str, Any]) -> None:
        self.out.append(
            {
                "ph": "X",
                "name": name,
                "pid": pid,
                "tid": TRACKS[track],
                "ts": round(max(0.0, start_rel) * 1e6, 3),
                "dur": round(max(0.0, dur_s) * 1e6, 3),
                "args": args,
            }
        )

    def _instant(self, pid: int, name: str, t: float, args: dict[str, Any], scope: str = "t") -> None:
        if pid == JOB_PID:
            self._pid(None)  # its names, once
        self.out.append(
            {"ph": "i", "s": scope, "name": name, "pid": pid, "tid": TRACKS["events"], "ts": self._us(t), "args": args}
        )

    def _steps(self, ev: E.Steps) -> None:
        pid = self._pid(ev.rank)
        key = (pid, ev.src)
        self._us(ev.t)
        assert self.t0 is not None
        # in integer nanoseconds from the run's start: a day of steps adds no rounding
        t_ns = round((ev.t - self.t0) * 1e9)
        for k, ns in enumerate(ev.ns):
            if k > 0:
                t_ns += ns
            if ns > 0 and (k > 0 or key in self._boundary):
                self.out.append(
                    {
                        "ph": "X",
                        "name": f"step {ev.i0 + k}",
                        "pid": pid,
                        "tid": TRACKS["steps"],
                        "ts": (t_ns - ns) / 1000,
                        "dur": ns / 1000,
                        "args": {"ms": round(ns / 1e6, 3), "src": ev.src},
                    }
                )
            self._boundary[key] = t_ns

    def _compile(self, ev: E.Compile) -> None:
        pid = self._pid(ev.rank)
        cid = str(ev.compile_id)
        start = self._open.pop((pid, cid), None)
        total = ev.entire_frame_compile_time_s
        begin = self._rel(start.t) if start is not None else self._rel(ev.t) - (total or 0.0)
        dur = total if total is not None else max(0.0, self._rel(ev.t) - begin)
        name = (start.name if start is not None else None) or ev.co_name or "compile"
        args: dict[str, Any] = {"compile_id": cid}
        if start is not None and start.file:
            args["at"] = f"{start.file}:{start.line}"
        reasons = self._reasons.pop((pid, cid), None)
        if reasons:
            args["recompile_reasons"] = reasons
        if ev.fail_type:
            args["failed"] = f"{ev.fail_type}: {ev.fail_reason or ''}"[:500]
        recompile = bool(reasons) or bool(ev.recompile_reason)
        self._slice(pid, "compiles", f"{'recompile' if recompile else 'compile'} {cid} {name}", begin, dur, args)
        end = begin + dur
        for label, secs in (
            ("backend (AOTAutograd + Inductor)", ev.backend_compile_time_s),
            ("Inductor", ev.inductor_compile_time_s),
            ("code generation", ev.code_gen_time_s),
        ):
            if secs and 0 < secs <= dur:
                self._slice(pid, "compiles", label, end - secs, secs, {"compile_id": cid, "placed": "at the end"})

    def _sample(self, ev: E.Sample) -> None:
        pid = self._pid(None)
        ts = self._us(ev.t)
        if ev.cpu_percent is not None:
            self.out.append({"ph": "C", "name": "CPU %", "pid": pid, "ts": ts, "args": {"cpu": ev.cpu_percent}})
        rss = ev.tree_rss or ev.rss
        if rss is not None:
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
        # per track in time order (metadata first), as viewers expect
        meta = [e for e in self.out if e["ph"] == "M"]
        timed = sorted((e for e in self.out if e["ph"] != "M"), key=lambda e: (e["pid"], e.get("tid", 0), e["ts"]))
        return {"traceEvents": meta + timed, "displayTimeUnit": "ms", "otherData": {"exporter": "ctmon"}}


def export(events: Iterable[E.Event | E.Unknown]) -> dict[str, Any]:
    ex = PerfettoExport()
    for ev in events:
        ex.add(ev)
    return ex.result()
