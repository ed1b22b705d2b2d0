"""How each kind of event folds into a Session: one handler per kind, and
the table ``Session.apply`` (and the bulk path) dispatch on.

A handler takes the store and the event; what a log line says is
ctmon/words/log_lines.py's."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from ctmon.store.joined import joined_before
from ctmon.store.rank_stores import KEPT_UNTIL_RANKED, keeping
from ctmon.store.records import ExitInfo, LogEntry
from ctmon.store.values import nonempty
from ctmon.wire import events as E
from ctmon.wire import events_compile as EC
from ctmon.wire import protocol
from ctmon.wire.event_base import Event
from ctmon.words import log_lines

if TYPE_CHECKING:
    from ctmon.store.session import Session

# Any: each handler takes its own kind; the table is looked up by that kind.
Handler = Callable[["Session", Any], None]

LIBRARY_LOGS_MAX = 500
SPECIALIZATIONS_MAX = 1000  # shapes Dynamo specialised, kept for the report
NOTES_MAX = 1000


def log(s: Session, t: float, kind: str, text: str, severity: str = "info", ref: object = None) -> None:
    s.log.append(LogEntry(t, kind, text, severity, ref))
    s.log_counts[kind] += 1
    s.rev["log"] += 1


def on_session(s: Session, ev: E.SessionStart) -> None:
    if s.header_seen:
        # Two recordings joined into one file (cat a b > c): the later
        # header would relabel the first run's events. Keep the first.
        message = log_lines.second_header(s.events)
        on_note(s, E.Note(t=ev.t, level="warning", source="ctmon", message=message))
        return
    s.header_seen = True
    m = s.meta
    m.session_id = nonempty(ev.id) or m.session_id
    if ev.command:
        m.command = list(ev.command)
    m.cwd = nonempty(ev.cwd) or m.cwd
    m.host = nonempty(ev.host) or m.host
    m.mode = nonempty(ev.mode) or m.mode
    m.ctmon_version = nonempty(ev.ctmon) or m.ctmon_version
    if ev.v is not None:
        m.protocol_version = ev.v
        s.newer_protocol = ev.v > protocol.PROTOCOL_VERSION
    if ev.pid is not None:
        m.supervisor_pid = ev.pid
    if ev.job_pid is not None:
        m.pid = ev.job_pid
    m.recording = nonempty(ev.recording) or m.recording
    if ev.t:
        m.start_t = ev.t
    s.rev["meta"] += 1


def on_process(s: Session, ev: E.Process) -> None:
    s.processes += 1
    if ev.pid is not None:
        s.meta.pid = ev.pid
    s.meta.python = nonempty(ev.python) or s.meta.python
    s.rev["meta"] += 1


def on_torch(s: Session, ev: E.Torch) -> None:
    m = s.meta
    m.torch = nonempty(ev.torch) or m.torch
    m.cuda = nonempty(ev.cuda) or m.cuda
    m.triton = nonempty(ev.triton) or m.triton
    m.cache_dir = nonempty(ev.cache_dir) or m.cache_dir
    if ev.cache_entries:
        m.cache_entries = dict(ev.cache_entries)
    if ev.env:
        m.env = dict(ev.env)
    s.rev["meta"] += 1


def on_devices(s: Session, ev: E.Devices) -> None:
    s.meta.devices = list(ev.cuda)
    s.rev["meta"] += 1


def on_joined(s: Session, ev: E.Joined) -> None:
    s.joined = joined_before(ev.pid, ev.before)
    s.rev["meta"] += 1


def on_compile_call(s: Session, ev: EC.CompileCall) -> None:
    s.compile.on_call(ev)
    s.rev["compile"] += 1


def on_compile_start(s: Session, ev: EC.CompileStart) -> None:
    s.compile.on_start(ev)
    s.rev["compile"] += 1


def on_compile(s: Session, ev: EC.Compile) -> None:
    rec = s.compile.on_compile(ev)
    frame = s.compile.frames.get(rec.frame_id)
    where = frame.loc.text() if frame else "?"
    name = frame.title if frame else "?"
    cid = rec.compile_id
    if rec.limit_hit:
        log(s, ev.t, "limit", log_lines.limit_hit(cid, name, where), "critical", cid)
    elif not rec.ok:
        text = log_lines.compile_failed(cid, name, where, rec.fail_type, rec.fail_reason)
        log(s, ev.t, "error", text, "warning", cid)
    elif rec.is_recompile:
        text = log_lines.recompiled(cid, name, where, rec.time_s, rec.recompile_reason)
        log(s, ev.t, "recompile", text, "warning", cid)
    else:
        log(s, ev.t, "compile", log_lines.compiled(cid, name, where, rec.time_s), "info", cid)
    s.rev["compile"] += 1


def on_hotness(s: Session, ev: E.Hotness) -> None:
    s.hotness.on_hotness(ev)
    s.rev["steps"] += 1
    s.rev["hotness"] += 1  # the Frames pane's calls and shares


def on_phase(s: Session, ev: EC.CompilePhase) -> None:
    s.compile.phases.on_phase(ev)
    if ev.phase == "backward":  # what the ranks view shows changes
        s.rev["compile"] += 1


def on_bwd(s: Session, ev: EC.BwdCompile) -> None:
    s.compile.on_bwd(ev)
    s.rev["compile"] += 1


def on_reasons(s: Session, ev: EC.RecompileReasons) -> None:
    s.compile.on_reasons(ev)


def on_graph_break(s: Session, ev: EC.GraphBreak) -> None:
    site = s.compile.on_graph_break(ev)
    log(s, ev.t, "graph_break", log_lines.graph_break(site.loc.text(), site.reason), "warning", (site.file, site.line))
    s.rev["compile"] += 1


def on_cache(s: Session, ev: EC.CacheResult) -> None:
    s.compile.on_cache(ev)
    text = log_lines.cache_result(ev.cache, ev.result, ev.compile_id, ev.reason)
    log(s, ev.t, "cache", text, "info", ev.compile_id)
    s.rev["compile"] += 1


def on_autotune(s: Session, ev: EC.Autotune) -> None:
    s.compile.on_autotune(ev)
    log(s, ev.t, "autotune", log_lines.kernels_tuned(len(ev.kernels), ev.compile_id), "info", ev.compile_id)
    s.rev["compile"] += 1


def on_cudagraph(s: Session, ev: EC.Cudagraph) -> None:
    reason = nonempty(ev.reason) or nonempty(ev.message) or log_lines.NO_CUDAGRAPH_REASON
    s.compile.cudagraph_skips[reason[:300]] += 1
    log(s, ev.t, "cudagraph", log_lines.cudagraph_skipped(reason), "warning")
    s.rev["compile"] += 1


def on_cudagraph_tree(s: Session, ev: EC.CudagraphTree) -> None:
    run = s.cudagraphs.on_event(ev)
    if run is not None:  # (the periodic counts change no view but the findings, which follow the steps)
        text = log_lines.cudagraph_run(run.event, run.graph, run.compile_id, run.sizes, run.dur_s)
        log(s, ev.t, "cudagraph", text, "info", run.compile_id)
        s.rev["compile"] += 1


def on_steps(s: Session, ev: E.Steps) -> None:
    if s.steps.on_steps(ev):
        s.rev["steps"] += 1


def on_device_time(s: Session, ev: E.DeviceTime) -> None:
    if s.steps.on_device_time(ev):
        s.rev["steps"] += 1


def on_step_number(s: Session, ev: E.StepNumber) -> None:
    if s.steps.on_number(ev):
        s.rev["steps"] += 1


def on_generation(s: Session, ev: E.Generation) -> None:
    if s.generation.on_generation(ev):
        s.rev["steps"] += 1


def on_specialization(s: Session, ev: EC.Specialization) -> None:
    kept = s.compile.specializations
    if len(kept) < SPECIALIZATIONS_MAX:
        kept.append(ev)
        s.rev["compile"] += 1


def on_library_log(s: Session, ev: E.LibraryLog) -> None:
    logs = s.compile.library_logs
    if len(logs) < LIBRARY_LOGS_MAX and (ev.file, ev.line) not in logs:
        logs[(ev.file, ev.line)] = ev
        s.rev["compile"] += 1


def on_uncaught(s: Session, ev: E.Uncaught) -> None:
    s.uncaught = ev
    s.rev["meta"] += 1


def on_process_end(s: Session, ev: E.ProcessEnd) -> None:
    pass  # a rank's end is its store's (see Session._to_rank); the job's own processes end with the job


def on_drops(s: Session, ev: E.Drops) -> None:
    if ev.steps is not None and ev.steps > s.drops["steps"]:
        s.drops["steps"] = ev.steps
    if ev.events is not None and ev.events > s.drops["events"]:
        s.drops["events"] = ev.events
    s.rev["meta"] += 1


def on_note(s: Session, ev: E.Note) -> None:
    if len(s.notes) < NOTES_MAX:
        s.notes.append(ev)
    sev = {"error": "warning", "warning": "warning"}.get(ev.level, "info")
    log(s, ev.t, "note", log_lines.first_line(ev.message), sev)


def on_output(s: Session, ev: E.Output) -> None:
    s.output.feed(ev.stream or "stdout", ev.text())
    s.rev["output"] += 1


def on_sample(s: Session, ev: E.Sample) -> None:
    if ev.gpu_error is not None:
        s.meta.gpu_error = ev.gpu_error[:300]  # sent once; samples roll over
    if ev.rss or ev.tree_rss:
        s.last_live_sample = ev
    elif s.last_live_sample is not None:
        # The job's process is gone: a zombie's memory reads 0 B (older
        # recordings hold that), a dead one's nothing. What it last held
        # stands, as a terminal's last screen of it would show.
        live = s.last_live_sample
        ev = msgspec.structs.replace(ev, rss=live.rss, tree_rss=live.tree_rss, threads=live.threads)
    s.samples.append(ev)
    s.rev["samples"] += 1
    if s.ranks and ev.gpus:
        for rs in s.ranks.values():  # each rank's own GPU memory, from its pid
            rs.saw_gpus(ev.gpus)


def on_exit(s: Session, ev: E.Exit) -> None:
    sig = nonempty(ev.signal)
    s.exit = ExitInfo(ev.code, sig, ev.t)
    before = s.output.total_lines
    s.output.flush_partial()
    if s.output.total_lines != before:
        s.rev["output"] += 1
    severity = "critical" if s.exit.known and s.exit.status != 0 else "info"
    log(s, ev.t, "exit", log_lines.job_ended(s.exit.code, sig), severity)
    s.rev["meta"] += 1


def _handlers() -> dict[type[Event], Handler]:
    table: dict[type[Event], Handler] = {
        E.SessionStart: on_session,
        E.Process: on_process,
        E.Torch: on_torch,
        E.Devices: on_devices,
        E.Joined: on_joined,
        EC.CompileCall: on_compile_call,
        EC.CompileStart: on_compile_start,
        EC.Compile: on_compile,
        EC.BwdCompile: on_bwd,
        EC.CompilePhase: on_phase,
        E.Hotness: on_hotness,
        EC.RecompileReasons: on_reasons,
        EC.GraphBreak: on_graph_break,
        EC.CacheResult: on_cache,
        EC.Autotune: on_autotune,
        EC.Cudagraph: on_cudagraph,
        EC.CudagraphTree: on_cudagraph_tree,
        E.Steps: on_steps,
        E.DeviceTime: on_device_time,
        E.StepNumber: on_step_number,
        E.Generation: on_generation,
        E.LibraryLog: on_library_log,
        EC.Specialization: on_specialization,
        E.Uncaught: on_uncaught,
        E.ProcessEnd: on_process_end,
        E.Drops: on_drops,
        E.Note: on_note,
        E.Output: on_output,
        E.Sample: on_sample,
        E.Exit: on_exit,
    }
    # what the job's own process compiled before it knew it was a rank
    # (ctmon/store/rank_stores.py: kept_until_ranked)
    for kind in KEPT_UNTIL_RANKED:
        table[kind] = keeping(table[kind])
    return table


HANDLERS = _handlers()
