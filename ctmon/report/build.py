"""The report: a documented, stable JSON object built from the store.

docs/REPORT.md is the reference for every key. Rules: keys are only ever
added, never renamed or removed within ``report_version`` 1; times are in
seconds (``*_s``) or milliseconds (``*_ms``) as their names say; counts are
ints; unknown values are null, never absent.
"""

from __future__ import annotations

from typing import cast

import msgspec

import ctmon
from ctmon.findings.current import findings_of
from ctmon.findings.model import called_from_dict
from ctmon.report.model import (
    CalledFrom,
    Compile,
    CompileSite,
    Fields,
    Finding,
    FrameRuntime,
    Generation,
    Report,
    Specialization,
    StepNumbers,
    StepRuntime,
)
from ctmon.report.model import (
    Frame as FrameReport,
)
from ctmon.report.rank_sections import job_cache, job_compile, rank_reports
from ctmon.report.system import system_report
from ctmon.store import Session
from ctmon.store.compile_state import CompileState
from ctmon.store.compiles import CompileRecord, Frame
from ctmon.store.steps import StepSeries
from ctmon.wire import events_compile as EC
from ctmon.wire.events_compile import StackFrame
from ctmon.wire.protocol import finite

TRACE_MODE = "torch_trace"  # the session header of PyTorch's trace read as a recording (ctmon/read/torch_trace.py)

REPORT_VERSION = 1


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(float(v), nd)


def _joined(s: Session) -> Fields | None:
    """--pid: what Dynamo had done before the join, and whether ctmon left the
    job running (its own note when it leaves) or saw it end."""
    if s.joined is None:
        return None
    left = any(n.source == "join" and "leaving process" in n.message for n in s.notes)
    return {**s.joined.as_dict(), "left_running": left}


def build_report(s: Session, nodes: list[Fields] | None = None, *, lean: bool = False) -> Report:
    """``nodes``: one object per recording when several nodes' recordings were merged.
    ``lean``: only what a comparison of runs reads (ctmon/report/diff.py):
    ``steps``, ``generation``, ``system`` null and ``findings``, ``ranks``,
    ``compile_sites``, ``specializations`` empty -- the parts of the report
    that cost most on a day-long recording and that a diff never reads."""
    st = s.steps.current.stats() if s.steps.current is not None and not lean else None
    cs = s.compile
    marked = 0
    if s.steps.current is not None and not lean:
        marked = len(s.steps.current.compile_marked([c.span for c in cs.compiles]))
    exit_info = s.exit
    traced = s.meta.mode == TRACE_MODE
    report: Report = {
        "report_version": REPORT_VERSION,
        "ctmon_version": ctmon.__version__,
        "recorded_by": s.meta.ctmon_version,
        # "torch_trace": read from PyTorch's TORCH_TRACE, which holds no steps, samples, output or exit status
        "input": "torch_trace" if traced else "recording",
        "session_id": s.meta.session_id,
        "command": s.meta.command,
        "cwd": s.meta.cwd,
        "host": s.meta.host,
        "pid": s.meta.pid,
        "state": s.state,
        # None: still running, or a job ctmon did not start (ctmon.install()): its status is unknown
        "exit_code": exit_info.status if exit_info and exit_info.known else None,
        "exit_signal": exit_info.signal if exit_info else None,
        # --pid: what Dynamo had done before ctmon joined (docs/REPORT.md); null for a job ctmon started
        "joined": _joined(s),
        "duration_s": _r(s.duration_s),
        "python": s.meta.python,
        "torch": s.meta.torch,
        "cuda": s.meta.cuda,
        "triton": s.meta.triton,
        "devices": [_fields(d) for d in s.meta.devices],
        "steps": None
        if lean
        else {
            "count": None if traced else (st.count if st else 0),
            # the intervals the statistics are over: in a fast loop, about a fourteenth (agent/steps.py)
            "timed": st.intervals if st else 0,
            "source": s.steps.source,
            "device_timed": bool(s.steps.current and s.steps.current.device_windows),
            "p50_ms": _r(st.p50_ms if st else None, 4),
            "p90_ms": _r(st.p90_ms if st else None, 4),
            "p99_ms": _r(st.p99_ms if st else None, 4),
            "mean_ms": _r(st.mean_ms if st else None, 4),
            "min_ms": _r(st.min_ms if st else None, 4),
            "max_ms": _r(st.max_ms if st else None, 4),
            "steps_per_s": _r(st.steps_per_s if st else None, 3),
            "compile_steps": marked,
            # the step numbers findings and the text use: the job's own (its optimizer's
            # step count, ctmon.step(n)) or ctmon's count from 1 (store/steps.py)
            "numbers": _step_numbers(s.steps.current) if not traced else None,
            # the first step's time where its start is known (a compiled model's first call
            # began it); it is in no figure above when an optimizer or ctmon.step() ends steps
            "first_step_ms": _r(s.steps.current.first_step_ms(), 4) if s.steps.current is not None else None,
            # host time (ctmon/agent/hotness.py, graph_calls.py): in compiled graphs (timed where
            # the agent timed them), in their frames' eager code between graphs (sampled),
            # elsewhere; null until enough samples
            "compiled_share": s.hotness.share("graph"),
            "runtime": _runtime(s),
        },
        "generation": None if lean else _generation(s),
        "compile": job_compile(s),
        "compile_calls": [_fields(c) for c in cs.calls[:20]],
        "frames": [_frame(f, cast("FrameRuntime | None", s.hotness.frame_runtime(f))) for f in cs.frames_sorted()],
        "compiles": [_compile(c) for c in cs.compiles[:COMPILES_LISTED]],
        "compile_sites": [] if lean else compile_sites(cs),
        "specializations": [] if lean else [_specialization(x) for x in cs.specializations],
        "graph_breaks": [
            {
                "reason": b.reason,
                "file": b.file,
                "line": b.line,
                "count": b.count,
                "explanation": b.explanation,
                "hints": b.hints,
                "url": b.url,
                "called_from": _called_from(b.called_from),
                "user_stack": [_fields(fr, omit_none=True) for fr in b.user_stack],
            }
            for b in cs.breaks_sorted()
        ],
        "cache": job_cache(s, s.meta.cache_dir, s.meta.cache_entries or None),
        "cudagraphs": {"skips": [{"reason": r, "count": n} for r, n in cs.cudagraph_skips.most_common()]},
        "system": None if traced or lean else system_report(s),
        # plain dicts from the findings room: their keys are Finding's (tests/test_report_model.py)
        "findings": [] if lean else [cast(Finding, f.as_dict()) for f in findings_of(s)],
        "ranks": [] if lean else rank_reports(s),
        "nodes": nodes or [],
        "drops": dict(s.drops),
        "notes": [{"level": n.level, "source": n.source, "message": n.message} for n in s.notes],
    }
    # Values copied from events (devices, notes) can hold anything a writer
    # put there; the report is strict JSON regardless.
    return cast(Report, finite(report))


def _runtime(s: Session) -> StepRuntime | None:
    h = s.hotness
    if not h.samples:
        return None
    return {
        "clock": "host",
        "graphs_timed": h.graphs_timed,
        "samples": h.samples,
        "interval_s": h.interval_s,
        "graph_share": h.share("graph"),
        "glue_share": h.share("glue"),
        "other_share": h.share("other"),
        "compiling_samples": h.counts["compiling"],
    }


def _step_numbers(series: StepSeries | None) -> StepNumbers | None:
    if series is None or not len(series):
        return None
    return {
        "by": "job" if series.numbered_by_job else "ctmon",
        "first": series.first_number(),
        "last": series.last_number(),
    }


def _frame(f: Frame, runtime: FrameRuntime | None) -> FrameReport:
    reasons: list[str] = []
    for c in f.compiles:
        if c.recompile_reason and c.recompile_reason not in reasons:
            reasons.append(c.recompile_reason)
    return {
        "frame_id": f.frame_id,
        "name": f.title,
        "file": f.loc.file,
        "line": f.loc.line,
        "code": {"name": f.code.name, "file": f.code.file, "line": f.code.line},
        "module": f.module,
        "called_from": _called_from(f.called_from),
        "compiles": len(f.compiles),
        "recompiles": f.recompiles,
        "recompile_reasons": reasons,
        "entries": f.entries,
        "recompile_limit": f.recompile_limit,
        "limit_hit": f.limit_hit,
        "time_s": _r(f.time_s),
        "compile_ids": [c.compile_id for c in f.compiles][:100],
        "runtime": runtime,
    }


COMPILES_LISTED = 1000


def _compile(c: CompileRecord) -> Compile:
    """One compile: what tlparse lists per compile id, as the report's reader needs it."""
    return {
        "compile_id": c.compile_id,
        "frame_id": c.frame_id,
        "recompile": c.is_recompile,
        "reason": c.recompile_reason,
        "time_s": _r(c.time_s),
        "phases_s": {"backend": _r(c.backend_s), "inductor": _r(c.inductor_s), "code_gen": _r(c.code_gen_s)},
        "graph_ops": c.graph_ops,
        "guards": c.guards,
        "graph_breaks": c.graph_breaks,
        "fx_graph": {"hit": c.fx_hits, "miss": c.fx_misses},
        "restarts": list(c.restarts),
        "failed": f"{c.fail_type}: {c.fail_reason or ''}".strip() if c.fail_type else None,
        "started_at": _called_from(c.started_at),
    }


def _specialization(x: EC.Specialization) -> Specialization:
    return {
        "compile_id": x.compile_id,
        "sources": list(x.sources),
        "value": x.value,
        "reason": x.reason,
        "file": x.file,
        "line": x.line,
        "code": x.code,
    }


def compile_sites(cs: CompileState) -> list[CompileSite]:
    """Where in the user's code compiles began (tlparse's stack trie, flat):
    each line with the compile ids that began under it, most first."""
    sites: dict[tuple[str | None, int | None], CompileSite] = {}
    for c in cs.compiles:
        at = c.started_at
        if at is None:
            continue
        site = sites.setdefault((at.file, at.line), {**cast(CalledFrom, called_from_dict(at)), "compile_ids": []})
        site["compile_ids"].append(c.compile_id)
    return sorted(sites.values(), key=lambda x: -len(x["compile_ids"]))


def _generation(s: Session) -> Generation | None:
    g = s.generation.stats(s.steps, [c.span for c in s.compile.compiles])
    if g is None:
        return None
    return {
        "calls": g.calls,
        "tokens": g.tokens,
        "prefill": "compiled" if g.prefill_compiled else "eager",
        "ttft_ms": _r(g.ttft_ms, 4),
        "ttft_max_ms": _r(g.ttft_max_ms, 4),
        "token_p50_ms": _r(g.token_p50_ms, 4),
        "token_p90_ms": _r(g.token_p90_ms, 4),
        "token_samples": g.token_samples,
    }


def _called_from(frame: StackFrame | None) -> CalledFrom | None:
    # the findings room's helper, typed: {file, line, code} or None
    return cast("CalledFrom | None", called_from_dict(frame))


def _fields(obj: msgspec.Struct, omit_none: bool = False) -> Fields:
    """A typed value as the JSON object the report shows (every field, by name)."""
    out = {name: msgspec.to_builtins(getattr(obj, name)) for name in obj.__struct_fields__}
    return {k: v for k, v in out.items() if v is not None} if omit_none else out
