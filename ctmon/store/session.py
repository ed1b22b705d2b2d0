"""The session store: every event folds into one state object.

Pure Python -- no torch, no textual, no I/O. Live view, replay, report and
the CI gate all read this object, so they cannot disagree. Events arrive
typed (ctmon/wire/events.py), validated where their bytes entered the
process; an event built in memory as a dict is validated the same way on its
way in. ``apply`` never raises, which the fuzz tests check.

``rev`` counts changes per section ("steps", "compile", "samples", "output",
"log", "meta") so a viewer repaints only what changed.
"""

from __future__ import annotations

import copy
from collections import Counter, deque
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any, cast

import msgspec

from ctmon.store.compiles import CompileState
from ctmon.store.cudagraphs import CudagraphState
from ctmon.store.generation import GenerationState
from ctmon.store.hotness import HotnessState
from ctmon.store.joined import JoinedBefore, joined_before
from ctmon.store.output import OutputBuffer
from ctmon.store.ranks import KEPT_UNTIL_RANKED, RankState, keeping, route
from ctmon.store.records import ExitInfo, LogEntry, Meta
from ctmon.store.steps import StepClock
from ctmon.store.values import nonempty
from ctmon.wire import events as E
from ctmon.wire import protocol
from ctmon.wire.decode import from_dict

LOG_MAX = 5000
STEPS_RUN = 4096  # step events folded together by apply_all
SAMPLES_MAX = 3600
LIBRARY_LOGS_MAX = 500
SPECIALIZATIONS_MAX = 1000  # shapes Dynamo specialised, kept for the report
CUT_OFF = "cut_off"  # the state of a recording that ends without the job's exit, no ctmon writing it


class Session:
    def __init__(self) -> None:
        self.meta = Meta()
        self.steps = StepClock()
        self.generation = GenerationState()
        self.compile = CompileState()
        self.cudagraphs = CudagraphState()  # reduce-overhead's warm-ups, recordings and replays
        self.hotness = HotnessState()  # where step time went: compiled graphs, their eager glue, elsewhere
        self.output = OutputBuffer()
        self.log: deque[LogEntry] = deque(maxlen=LOG_MAX)
        self.log_counts: Counter[str] = Counter()
        self.samples: deque[E.Sample] = deque(maxlen=SAMPLES_MAX)
        self._live_sample: E.Sample | None = None  # the last sample with the job's memory in it
        self.notes: list[E.Note] = []
        self.exit: ExitInfo | None = None
        # The recording was read to its end, no exit in it, and no ctmon
        # writes it any more (its reader says so: report/load.py): the job's
        # end is not known, and it is not running either.
        self.cut_off = False
        self.uncaught: E.Uncaught | None = None  # the exception that ended its process, as it said
        self.joined: JoinedBefore | None = None  # --pid: what Dynamo had done before ctmon joined
        self.processes = 0  # agents' hellos: processes of the job that reported
        self.drops = {"steps": 0, "events": 0}
        self.events = 0
        self.bad_events = 0
        self.unknown: Counter[str] = Counter()
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.newer_protocol = False
        self._session_seen = False
        self.rev: Counter[str] = Counter()
        # a distributed job's ranks, each with its own store (ctmon/store/ranks.py)
        self.ranks: dict[int, RankState] = {}
        self.primary_rank: int | None = None
        self.routes_ranks = True  # False in a rank's own store: it takes its events as they come
        self._handlers: dict[type[E.Event], Callable[[Any], None]] = {
            E.SessionStart: self._on_session,
            E.Process: self._on_process,
            E.Torch: self._on_torch,
            E.Devices: self._on_devices,
            E.Joined: self._on_joined,
            E.CompileCall: self._on_compile_call,
            E.CompileStart: self._on_compile_start,
            E.Compile: self._on_compile,
            E.BwdCompile: self._on_bwd,
            E.CompilePhase: self._on_phase,
            E.Hotness: self._on_hotness,
            E.RecompileReasons: self._on_reasons,
            E.GraphBreak: self._on_graph_break,
            E.CacheResult: self._on_cache,
            E.Autotune: self._on_autotune,
            E.Cudagraph: self._on_cudagraph,
            E.CudagraphTree: self._on_cudagraph_tree,
            E.Steps: self._on_steps,
            E.DeviceTime: self._on_device_time,
            E.StepNumber: self._on_step_number,
            E.Generation: self._on_generation,
            E.LibraryLog: self._on_library_log,
            E.Specialization: self._on_specialization,
            E.Uncaught: self._on_uncaught,
            E.ProcessEnd: self._on_process_end,
            E.Drops: self._on_drops,
            E.Note: self._on_note,
            E.Output: self._on_output,
            E.Sample: self._on_sample,
            E.Exit: self._on_exit,
        }
        # what the job's own process compiled before it knew it was a rank
        # (ctmon/store/ranks.py: kept_until_ranked)
        self.unranked: list[E.Ranked] | None = []
        for kind in KEPT_UNTIL_RANKED:
            self._handlers[kind] = keeping(self, self._handlers[kind])

    # ---- folding ----

    def apply(self, ev: E.Event | E.Unknown | dict[str, Any]) -> None:
        """Fold one event. A dict (built in memory: tests, tools) is validated
        first, like a line read off the wire."""
        self.events += 1
        if type(ev) is dict:
            typed = self._typed(ev)
            if typed is None:
                return
            ev = typed
        rank = getattr(ev, "rank", None)
        if rank is not None and self.routes_ranks and self._to_rank(cast(E.Ranked, ev), rank):
            return
        handler = self._handlers.get(type(ev))  # type: ignore[arg-type]
        if handler is None:
            self.unknown[str(getattr(ev, "kind", None))[:40]] += 1
            return
        t = cast(E.Event, ev).t
        if t > 0:
            if self.first_t is None or t < self.first_t:
                self.first_t = t
            if self.last_t is None or t > self.last_t:
                self.last_t = t
        try:
            handler(ev)
        except (TypeError, ValueError, OverflowError, ZeroDivisionError):
            # typed, yet out of range (an int too large for a float, ...)
            self.bad_events += 1

    def _to_rank(self, ev: E.Ranked, rank: int) -> bool:
        """A rank's event to that rank's store (ctmon/store/ranks.py); True
        when the job's own session is to leave it there."""
        return route(self, ev, rank, _rank_store)

    def _typed(self, obj: dict[str, Any]) -> E.Event | None:
        kind = obj.get("kind")
        if not isinstance(kind, str) or kind not in E.KINDS:
            self.unknown[str(kind)[:40]] += 1
            return None
        ev = from_dict(obj)
        if ev is None:
            self.bad_events += 1
        return ev

    def apply_all(self, events: Iterable[E.Event | E.Unknown | dict[str, Any]]) -> Session:
        # Most of a long run's events are step batches: they go in together,
        # a few thousand at a time (the same work as apply() on each, in one
        # loop). Only step events read or write the step clock, so folding
        # them a little later than the output and samples around them gives
        # the same store; device windows, which name step indices, wait for
        # the steps before them.
        # Output chunks are split into lines together, the same way: only
        # the exit (which flushes a partial line) and the general path read
        # the output buffer, so other events between them wait (in a compile
        # storm, output of both streams and compiles interleave).
        steps_kind, device_kind, output_kind, exit_kind = E.Steps, E.DeviceTime, E.Output, E.Exit
        handlers, apply = self._handlers, self.apply
        run: list[E.Steps] = []
        outs: list[E.Output] = []
        for ev in events:
            kind = type(ev)
            if self.routes_ranks and (self.ranks or (kind is E.Process and getattr(ev, "rank", None) is not None)):
                # a distributed job: each event to its rank's store, one by one
                if outs:
                    self._fold_output(outs)
                    outs = []
                if run:
                    self._fold_steps(run)
                    run = []
                apply(ev)
                continue
            if kind is steps_kind:
                self.events += 1  # counted in stream order, folded with its run
                run.append(ev)  # type: ignore[arg-type]
                if len(run) >= STEPS_RUN:
                    self._fold_steps(run)
                    run = []
                continue
            first, last = self.first_t, self.last_t
            if kind is output_kind and first is not None and last is not None:
                self.events += 1
                t = ev.t  # type: ignore[union-attr]
                if t > last:
                    self.last_t = t
                elif 0 < t < first:
                    self.first_t = t
                outs.append(ev)  # type: ignore[arg-type]
                continue
            if run and kind is device_kind:
                self._fold_steps(run)
                run = []
                first, last = self.first_t, self.last_t  # the run may have moved them
            handler = handlers.get(kind)  # type: ignore[arg-type]
            if outs and (kind is exit_kind or handler is None or first is None or last is None):
                self._fold_output(outs)
                outs = []
            if handler is None or first is None or last is None:
                apply(ev)  # the general way: dicts, unknown kinds, the first events
                continue
            # what apply() does, inline: most events are output lines and samples
            self.events += 1
            t = ev.t  # type: ignore[union-attr]
            if t > last:
                self.last_t = t
            elif 0 < t < first:
                self.first_t = t
            try:
                handler(ev)
            except (TypeError, ValueError, OverflowError, ZeroDivisionError):
                self.bad_events += 1
        if outs:
            self._fold_output(outs)
        if run:
            self._fold_steps(run)
        return self

    def _fold_output(self, outs: list[E.Output]) -> None:
        self.output.feed_many([o.stream or "stdout" for o in outs], [o.text() for o in outs])
        self.rev["output"] += len(outs)

    def _fold_steps(self, run: list[E.Steps]) -> None:
        times = [ev.t for ev in run if ev.t > 0]
        if times:
            lo, hi = min(times), max(times)
            if self.first_t is None or lo < self.first_t:
                self.first_t = lo
            if self.last_t is None or hi > self.last_t:
                self.last_t = hi
        try:
            taken = self.steps.on_steps_run(run)
        except (TypeError, ValueError, OverflowError):
            self.bad_events += 1
            return
        self.rev["steps"] += taken

    def _log(self, t: float, kind: str, text: str, severity: str = "info", ref: Any = None) -> None:
        self.log.append(LogEntry(t, kind, text, severity, ref))
        self.log_counts[kind] += 1
        self.rev["log"] += 1

    def _on_session(self, ev: E.SessionStart) -> None:
        if self._session_seen:
            # Two recordings joined into one file (cat a b > c): the later
            # header would relabel the first run's events. Keep the first.
            self._on_note(
                E.Note(
                    t=ev.t,
                    level="warning",
                    source="ctmon",
                    message=f"recording holds a second session header at event {self.events} "
                    "(two recordings concatenated?); showing the first",
                )
            )
            return
        self._session_seen = True
        m = self.meta
        m.session_id = nonempty(ev.id) or m.session_id
        if ev.command:
            m.command = list(ev.command)
        m.cwd = nonempty(ev.cwd) or m.cwd
        m.host = nonempty(ev.host) or m.host
        m.mode = nonempty(ev.mode) or m.mode
        m.ctmon_version = nonempty(ev.ctmon) or m.ctmon_version
        if ev.v is not None:
            m.protocol_version = ev.v
            self.newer_protocol = ev.v > protocol.PROTOCOL_VERSION
        if ev.pid is not None:
            m.supervisor_pid = ev.pid
        if ev.job_pid is not None:
            m.pid = ev.job_pid
        m.recording = nonempty(ev.recording) or m.recording
        if ev.t:
            m.start_t = ev.t
        self.rev["meta"] += 1

    def _on_process(self, ev: E.Process) -> None:
        self.processes += 1
        if ev.pid is not None:
            self.meta.pid = ev.pid
        self.meta.python = nonempty(ev.python) or self.meta.python
        self.rev["meta"] += 1

    def _on_torch(self, ev: E.Torch) -> None:
        m = self.meta
        m.torch = nonempty(ev.torch) or m.torch
        m.cuda = nonempty(ev.cuda) or m.cuda
        m.triton = nonempty(ev.triton) or m.triton
        m.cache_dir = nonempty(ev.cache_dir) or m.cache_dir
        if ev.cache_entries:
            m.cache_entries = dict(ev.cache_entries)
        if ev.env:
            m.env = dict(ev.env)
        self.rev["meta"] += 1

    def _on_devices(self, ev: E.Devices) -> None:
        self.meta.devices = list(ev.cuda)
        self.rev["meta"] += 1

    def _on_joined(self, ev: E.Joined) -> None:
        self.joined = joined_before(ev.pid, ev.before)
        self.rev["meta"] += 1

    def _on_compile_call(self, ev: E.CompileCall) -> None:
        self.compile.on_call(ev)
        self.rev["compile"] += 1

    def _on_compile_start(self, ev: E.CompileStart) -> None:
        self.compile.on_start(ev)
        self.rev["compile"] += 1

    def _on_compile(self, ev: E.Compile) -> None:
        rec = self.compile.on_compile(ev)
        frame = self.compile.frames.get(rec.frame_id)
        where = frame.loc.text() if frame else "?"
        name = frame.title if frame else "?"
        cid = rec.compile_id
        if rec.limit_hit:
            text = f"{cid} {name} at {where}: recompile limit hit; this frame now runs eager"
            self._log(ev.t, "limit", text, "critical", cid)
        elif not rec.ok:
            text = f"{cid} {name} at {where}: compile failed ({rec.fail_type}): {_first_line(rec.fail_reason)}"
            self._log(ev.t, "error", text, "warning", cid)
        elif rec.is_recompile:
            text = f"{cid} {name} at {where} ({rec.time_s:.2f}s): {_first_line(rec.recompile_reason)}"
            self._log(ev.t, "recompile", text, "warning", cid)
        else:
            self._log(ev.t, "compile", f"{cid} {name} at {where} ({rec.time_s:.2f}s)", "info", cid)
        self.rev["compile"] += 1

    def _on_hotness(self, ev: E.Hotness) -> None:
        self.hotness.on_hotness(ev)
        self.rev["steps"] += 1
        self.rev["hotness"] += 1  # the Frames pane's calls and shares

    def _on_phase(self, ev: E.CompilePhase) -> None:
        self.compile.phases.on_phase(ev)
        if ev.phase == "backward":  # what the ranks view shows changes
            self.rev["compile"] += 1

    def _on_bwd(self, ev: E.BwdCompile) -> None:
        self.compile.on_bwd(ev)
        self.rev["compile"] += 1

    def _on_reasons(self, ev: E.RecompileReasons) -> None:
        self.compile.on_reasons(ev)

    def _on_graph_break(self, ev: E.GraphBreak) -> None:
        site = self.compile.on_graph_break(ev)
        text = f"graph break at {site.loc.text()}: {site.reason}"
        self._log(ev.t, "graph_break", text, "warning", (site.file, site.line))
        self.rev["compile"] += 1

    def _on_cache(self, ev: E.CacheResult) -> None:
        self.compile.on_cache(ev)
        extra = f" ({ev.reason[:120]})" if ev.result == "bypass" and ev.reason else ""
        self._log(ev.t, "cache", f"{ev.cache} cache {ev.result} [{ev.compile_id}]{extra}", "info", ev.compile_id)
        self.rev["compile"] += 1

    def _on_autotune(self, ev: E.Autotune) -> None:
        self.compile.on_autotune(ev)
        text = f"Triton: {len(ev.kernels)} kernel(s) compiled/tuned [{ev.compile_id}]"
        self._log(ev.t, "autotune", text, "info", ev.compile_id)
        self.rev["compile"] += 1

    def _on_cudagraph(self, ev: E.Cudagraph) -> None:
        reason = nonempty(ev.reason) or nonempty(ev.message) or "cudagraph event"
        self.compile.cudagraph_skips[reason[:300]] += 1
        self._log(ev.t, "cudagraph", f"cudagraphs: {reason[:200]}", "warning")
        self.rev["compile"] += 1

    def _on_cudagraph_tree(self, ev: E.CudagraphTree) -> None:
        run = self.cudagraphs.on_event(ev)
        if run is not None:  # (the periodic counts change no view but the findings, which follow the steps)
            what = "recorded" if run.event == "record" else "warmed up"
            text = f"CUDA graph {what}: {run.graph or '?'} graph of {run.compile_id or '?'} ({run.sizes})"
            self._log(ev.t, "cudagraph", f"{text} in {run.dur_s * 1000:.0f} ms", "info", run.compile_id)
            self.rev["compile"] += 1

    def _on_steps(self, ev: E.Steps) -> None:
        if self.steps.on_steps(ev):
            self.rev["steps"] += 1

    def _on_device_time(self, ev: E.DeviceTime) -> None:
        if self.steps.on_device_time(ev):
            self.rev["steps"] += 1

    def _on_step_number(self, ev: E.StepNumber) -> None:
        if self.steps.on_number(ev):
            self.rev["steps"] += 1

    def _on_generation(self, ev: E.Generation) -> None:
        if self.generation.on_generation(ev):
            self.rev["steps"] += 1

    def _on_specialization(self, ev: E.Specialization) -> None:
        kept = self.compile.specializations
        if len(kept) < SPECIALIZATIONS_MAX:
            kept.append(ev)
            self.rev["compile"] += 1

    def _on_library_log(self, ev: E.LibraryLog) -> None:
        logs = self.compile.library_logs
        if len(logs) < LIBRARY_LOGS_MAX and (ev.file, ev.line) not in logs:
            logs[(ev.file, ev.line)] = ev
            self.rev["compile"] += 1

    def _on_uncaught(self, ev: E.Uncaught) -> None:
        self.uncaught = ev
        self.rev["meta"] += 1

    def _on_process_end(self, ev: E.ProcessEnd) -> None:
        pass  # a rank's end is its store's (see _to_rank); the job's own processes end with the job

    def _on_drops(self, ev: E.Drops) -> None:
        if ev.steps is not None and ev.steps > self.drops["steps"]:
            self.drops["steps"] = ev.steps
        if ev.events is not None and ev.events > self.drops["events"]:
            self.drops["events"] = ev.events
        self.rev["meta"] += 1

    def _on_note(self, ev: E.Note) -> None:
        if len(self.notes) < 1000:
            self.notes.append(ev)
        sev = {"error": "warning", "warning": "warning"}.get(ev.level, "info")
        self._log(ev.t, "note", _first_line(ev.message), sev)

    def _on_output(self, ev: E.Output) -> None:
        self.output.feed(ev.stream or "stdout", ev.text())
        self.rev["output"] += 1

    def _on_sample(self, ev: E.Sample) -> None:
        if ev.gpu_error is not None:
            self.meta.gpu_error = ev.gpu_error[:300]  # sent once; samples roll over
        if ev.rss or ev.tree_rss:
            self._live_sample = ev
        elif self._live_sample is not None:
            # The job's process is gone: a zombie's memory reads 0 B (older
            # recordings hold that), a dead one's nothing. What it last held
            # stands, as a terminal's last screen of it would show.
            live = self._live_sample
            ev = msgspec.structs.replace(ev, rss=live.rss, tree_rss=live.tree_rss, threads=live.threads)
        self.samples.append(ev)
        self.rev["samples"] += 1
        if self.ranks and ev.gpus:
            for rs in self.ranks.values():  # each rank's own GPU memory, from its pid
                rs.saw_gpus(ev.gpus)

    def _on_exit(self, ev: E.Exit) -> None:
        sig = nonempty(ev.signal)
        self.exit = ExitInfo(ev.code, sig, ev.t)
        before = self.output.total_lines
        self.output.flush_partial()
        if self.output.total_lines != before:
            self.rev["output"] += 1
        what = (
            f"exited with code {self.exit.code}"
            if self.exit.code is not None
            else f"killed by {sig}"
            if sig
            else "ended (its exit status is not known to ctmon)"
        )
        self._log(ev.t, "exit", f"job {what}", "critical" if self.exit.known and self.exit.status != 0 else "info")
        self.rev["meta"] += 1

    # ---- snapshots (replay) ----

    def snapshot(self) -> Session:
        """The store as it is now, cheap enough to take every few thousand
        events of a day-long replay: step series are kept as marks (their
        arrays only grow: see StepSeries.mark), and entries of the rolling
        buffers, never changed once made, are shared. ``restored`` gives a
        store to fold on from."""
        return copy.deepcopy(self, self._sharing({id(s): s.mark() for s in self.steps.series.values()}))

    @staticmethod
    def restored(snapshot: Session) -> Session:
        """A working store from a snapshot (which stays as it is)."""
        return copy.deepcopy(snapshot, snapshot._sharing({}))

    def _sharing(self, memo: dict[int, Any]) -> dict[int, Any]:
        # compile records too: folding never changes one once made (the
        # findings' cache of its parsed guard is the same in every copy)
        for entry in chain(self.log, self.output.lines, self.samples, self.notes, self.compile.compiles):
            memo[id(entry)] = entry
        return memo

    # ---- derived ----

    @property
    def state(self) -> str:
        if self.exit is not None:
            return "exited"
        if self.cut_off:
            return CUT_OFF
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

    def latest_sample(self) -> E.Sample | None:
        return self.samples[-1] if self.samples else None


def _first_line(text: str | None, limit: int = 200) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit]


def _rank_store() -> Session:
    """A rank's own store: it takes its events as they come."""
    child = Session()
    child.routes_ranks = False
    child.unranked = None
    return child
