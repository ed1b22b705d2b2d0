"""A distributed job in the report: one object per rank, and job totals.

The job's session shows one rank in full (ctmon/store/rank_stores.py); its
``compile`` and ``cache`` counts are made job-wide here: the sum over every
rank's own store, plus what processes that are no rank (the launcher) did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, cast

from ctmon.report.model import Cache, CacheResults, CompileTotals, Rank
from ctmon.store import Session
from ctmon.store.compile_state import CompileState
from ctmon.store.compiles import CacheCounts
from ctmon.store.launcher_failures import rank_failures
from ctmon.wire.protocol import COMPILE_PHASES


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(float(v), nd)


# One process's counts before they are summed over ranks: plain dicts,
# walked key by key (``_add``, ``_finish``) whatever they hold.
Counts = dict[str, Any]


def compile_counts(cs: CompileState) -> Counts:
    return {
        "compiles": cs.compile_count,
        "recompiles": cs.recompile_count,
        "graph_breaks": cs.graph_break_count,
        "limit_hits": cs.limit_hits,
        "failures": cs.failures,
        "frames": len(cs.frames),
        "backward_compiles": cs.bwd_compiles,
        "total_time_s": cs.total_time_s + cs.bwd_time_s,
        "forward_time_s": cs.total_time_s,
        "backward_time_s": cs.bwd_time_s,
        "recompile_limit": cs.recompile_limit,
        "torch_compile_calls": cs.call_count,
        "phases_s": compile_phases(cs),
        # PyTorch's own phase timers, where the run logged them (a phase
        # never seen is absent, not 0); nested phases each count whole
        "traced_phases_s": {p: round(cs.phases.seconds[p], 3) for p in COMPILE_PHASES if p in cs.phases.seconds},
    }


def compile_phases(cs: CompileState) -> dict[str, float]:
    """Where frame compile time went, from each compile's metrics: Dynamo
    (tracing, guards: the frame's time less its backend's), the backend
    (AOTAutograd and Inductor), and within it Inductor and its code
    generation. Sums over compiles; a phase no compile reported is 0."""
    out = {"dynamo": 0.0, "backend": 0.0, "inductor": 0.0, "code_gen": 0.0}
    for c in cs.compiles:
        backend = c.backend_s or 0.0
        out["dynamo"] += max(0.0, c.time_s - backend)
        out["backend"] += backend
        out["inductor"] += c.inductor_s or 0.0
        out["code_gen"] += c.code_gen_s or 0.0
    return {k: round(v, 3) for k, v in out.items()}


def cache_counts(cs: CompileState) -> Counts:
    return {
        **{name: c.as_dict() for name, c in sorted(cs.cache.items())},
        "autotune": {"kernels": cs.autotune_kernels, "cached": cs.autotune_cached},
        "bypass_reasons": Counter(cs.bypass_reasons),
        "time_saved_s": cs.time_saved_s,
    }


# not sums: a setting, and a count of distinct things
_KEEP = {"recompile_limit", "frames"}


def job_compile(s: Session) -> CompileTotals:
    """The report's ``compile``: every rank's compile counts, summed."""
    return cast(CompileTotals, job_totals(s, compile_counts))


def job_cache(s: Session, cache_dir: str | None, entries_at_start: dict[str, int] | None) -> Cache:
    """The report's ``cache``: every rank's cache results, summed, and where the cache was."""
    return cast(Cache, {**job_totals(s, cache_counts), "cache_dir": cache_dir, "entries_at_start": entries_at_start})


def job_totals(s: Session, counts: Callable[[CompileState], Counts]) -> Counts:
    """``counts`` of the job: its session's, with every other rank's added."""
    total = counts(s.compile)
    others = [rs.session for r, rs in sorted(s.ranks.items()) if r != s.primary_rank]
    for other in others:
        _add(total, counts(other.compile))
    if "frames" in total and s.ranks:
        keys = {(f.code.file, f.code.line, f.code.name) for f in s.compile.frames.values()}
        for other in others:
            keys |= {(f.code.file, f.code.line, f.code.name) for f in other.compile.frames.values()}
        total["frames"] = len(keys)
    return _finish(total)


def _add(into: Counts, more: Counts) -> None:
    for k, v in more.items():
        if k in _KEEP:
            if into.get(k) is None:
                into[k] = v
        elif isinstance(v, Counter):  # before dict: a Counter is one
            into[k] = into.get(k, Counter()) + v
        elif isinstance(v, dict):
            _add(into.setdefault(k, {}), v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            into[k] = (into.get(k) or 0) + v


def _finish(d: Counts) -> Counts:
    out: Counts = {}
    for k, v in d.items():
        if isinstance(v, Counter):
            out[k] = [{"reason": r, "count": n} for r, n in v.most_common()]
        elif isinstance(v, dict):
            out[k] = _finish(v)
        elif isinstance(v, float):
            out[k] = _r(v)
        else:
            out[k] = v
    return out


def rank_reports(s: Session) -> list[Rank]:
    out: list[Rank] = []
    failed = (
        {f.rank: f for f in rank_failures(x.text for x in s.output.lines if x.stream == "stderr")} if s.ranks else {}
    )
    for r, rs in sorted(s.ranks.items()):
        fail = failed.get(r)
        cs = rs.session.compile
        series = rs.session.steps.current
        st = series.stats() if series is not None else None
        out.append(
            {
                "rank": r,
                "local_rank": rs.local_rank,
                "world_size": rs.world_size,
                "host": rs.host,
                "pid": rs.pid,
                "primary": r == s.primary_rank,
                # a rank is the launcher's child: its exit status is what the launcher said of it
                "exit_code": fail.exit_code if fail else None,
                "exit_signal": fail.signal if fail else None,
                "steps": {
                    "count": None if s.meta.mode == "torch_trace" else (st.count if st else 0),
                    "source": rs.session.steps.source,
                    "device_timed": bool(series is not None and series.device_windows),
                    "p50_ms": _r(st.p50_ms if st else None, 4),
                    "p90_ms": _r(st.p90_ms if st else None, 4),
                },
                "compile": {
                    "compiles": cs.compile_count,
                    "recompiles": cs.recompile_count,
                    "graph_breaks": cs.graph_break_count,
                    "limit_hits": cs.limit_hits,
                    "failures": cs.failures,
                    "time_s": _r(cs.total_time_s + cs.bwd_time_s),
                },
                "cache": {name: _results(c) for name, c in sorted(cs.cache.items())},
                "gpu_mem_peak_bytes": rs.gpu_mem_peak,
            }
        )
    return out


def _results(c: CacheCounts) -> CacheResults:
    return {"hit": c.hit, "miss": c.miss, "bypass": c.bypass}
