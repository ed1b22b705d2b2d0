"""``ctmon diff``'s timings, judged against the runs' own noise (the
module docstring of ctmon/report/diff.py says how): compile time in total
and per phase, steady step time, and the job's GPU memory peak; and the
steady step times one run gives the comparison."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import numpy as np

from ctmon.report.bench import CLOSE, STEADY_MIN, _interval
from ctmon.report.diff_entries import Diff, frame_key
from ctmon.report.diff_model import EntryDetails, FrameKey, RunSummary, StepBlocks
from ctmon.report.model import Compile
from ctmon.store import Session
from ctmon.store.steps import StepSeries
from ctmon.words.labels import PHASE_NAMES
from ctmon.words.units import ms_sig

BLOCKS = 5  # step-time samples per run (bench runs a mode 3-7 times)
COMPILE_CLOSE = 0.10  # compile-time changes under 10 % are not called
COMPILE_MIN_S = 1.0  # nor under a second
MEMORY_MIN_BYTES = 64 << 20

# ctmon's own split of a compile's time, from each compile's metrics. PyTorch's
# phase timers (traced_phases_s) time inductor and code_gen too: those entries
# say "(traced)", so that two figures of one phase never read alike.
PHASE_LABELS = {
    "dynamo": "Dynamo (tracing and guards)",
    "backend": "the backend (AOTAutograd and Inductor)",
    "inductor": PHASE_NAMES["inductor"],
    "code_gen": PHASE_NAMES["code_gen"],
}


def traced_label(phase: str) -> str:
    """``Inductor (traced)``: a phase as PyTorch's own timers measured it."""
    return f"{PHASE_NAMES.get(phase, phase)} (traced)"


def steady_blocks(session: Session) -> StepBlocks:
    """The run's steady step times (bench's ``_steady``: after the last
    compile; the last half where fewer than ``STEADY_MIN`` come after it),
    their p50/p90, and the p50/p90 of each of up to ``BLOCKS`` consecutive
    blocks. Array slices, not a loop over boundaries: a day-long run has
    millions."""
    series = session.steps.current
    empty: StepBlocks = {"steady": 0, "p50_ms": None, "p90_ms": None, "blocks_p50_ms": [], "blocks_p90_ms": []}
    if series is None or len(series) < 2:
        return empty
    ms = _intervals_ms(series)
    ends = [c.span[1] for c in session.compile.compiles]
    for rs in session.ranks.values():
        ends += [c.span[1] for c in rs.session.compile.compiles]
    ends += [p.end for p in session.compile.phases.spans if p.phase == "backward"]
    first = max(1, series.times.count_until(max(ends)) + 1) if ends else 1
    steady = ms[first:]
    steady = steady[steady > 0]
    if len(steady) < STEADY_MIN:
        half = ms[max(1, len(ms) // 2) :]
        steady = half[half > 0]
    if not len(steady):
        return empty
    n_blocks = min(BLOCKS, len(steady) // STEADY_MIN)
    blocks = np.array_split(steady, n_blocks) if n_blocks >= 2 else []
    return {
        "steady": int(len(steady)),
        "device_timed": bool(series.device_windows),
        "p50_ms": round(float(np.percentile(steady, 50)), 4),
        "p90_ms": round(float(np.percentile(steady, 90)), 4),
        "blocks_p50_ms": [round(float(np.percentile(b, 50)), 4) for b in blocks],
        "blocks_p90_ms": [round(float(np.percentile(b, 90)), 4) for b in blocks],
    }


def _intervals_ms(series: StepSeries) -> np.ndarray:
    """Every interval in ms by boundary index (0 or NaN where unknown)."""
    if series.eff_ms is not None:
        out = np.frombuffer(series.eff_ms, dtype=np.float32).astype(np.float64)
        return np.nan_to_num(out, nan=0.0)
    return np.frombuffer(series.ns, dtype=np.int64) / 1e6


# -- compile time


def compile_time(d: Diff, base: RunSummary, new: RunSummary) -> None:
    total = _paired(base, new, lambda c: c.get("time_s"))
    _time_entry(d, "total", "compile time", base["compile"]["total_time_s"], new["compile"]["total_time_s"], total)
    getters: dict[str, Callable[[Compile], float | None]] = {
        "dynamo": lambda c: _minus(c.get("time_s"), (c.get("phases_s") or {}).get("backend")),
        "backend": lambda c: (c.get("phases_s") or {}).get("backend"),
        "inductor": lambda c: (c.get("phases_s") or {}).get("inductor"),
        "code_gen": lambda c: (c.get("phases_s") or {}).get("code_gen"),
    }
    bp, np_ = base["compile"].get("phases_s") or {}, new["compile"].get("phases_s") or {}
    for phase, get in getters.items():
        if phase in bp or phase in np_:
            pairs = _paired(base, new, get)
            _time_entry(
                d, f"phase:{phase}", f"compile time in {PHASE_LABELS[phase]}", bp.get(phase), np_.get(phase), pairs
            )
    bt, nt = base["compile"].get("traced_phases_s") or {}, new["compile"].get("traced_phases_s") or {}
    if not bt or not nt:
        return  # a run recorded before ctmon read PyTorch's phase timers has none: nothing to set beside
    for phase in sorted(set(bt) | set(nt)):
        label = traced_label(phase)
        _time_entry(d, f"traced:{phase}", f"compile time in {label}", bt.get(phase, 0.0), nt.get(phase, 0.0), [])


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None else a - (b or 0.0)


def _paired(base: RunSummary, new: RunSummary, get: Callable[[Compile], float | None]) -> list[float]:
    """NEW over BASE for each compile that pairs up: the same frame's k-th
    compile in both runs (compile ids differ between runs; frames do not)."""

    def by_frame(run: RunSummary) -> dict[FrameKey, list[Compile]]:
        keys = {f["frame_id"]: frame_key(f, run) for f in run["frames"]}
        out: dict[FrameKey, list[Compile]] = {}
        for c in run["compiles"]:
            key = keys.get(c.get("frame_id"))
            if key is not None:
                out.setdefault(key, []).append(c)
        return out

    a, b = by_frame(base), by_frame(new)
    ratios = []
    for key, cs in a.items():
        for x, y in zip(cs, b.get(key, []), strict=False):
            u, v = get(x), get(y)
            if u and v and u > 0 and v > 0:
                ratios.append(v / u)
    return ratios


def _time_entry(d: Diff, subject: str, label: str, a: float | None, b: float | None, ratios: list[float]) -> None:
    if a is None or b is None:
        return
    delta = b - a
    big = abs(delta) > COMPILE_MIN_S and abs(delta) > COMPILE_CLOSE * a
    ci = _interval(ratios)
    resolved = big and (ci is None or not (ci[0] <= 1 <= ci[1]))
    what = f"{label} {_s(a)} → {_s(b)} ({'+' if delta >= 0 else '−'}{_s(abs(delta))})"
    extra: EntryDetails = {"ratio_ci": ci, "paired": len(ratios)}
    if not resolved:
        why = "within noise" if big else f"under {COMPILE_CLOSE:.0%} or {COMPILE_MIN_S:g} s"
        shown = f"{label} ({_s(a)} → {_s(b)}, {why})" if abs(delta) >= 0.005 else label
        d.add("unchanged", "compile_time", subject, shown, a, b, **extra)
        return
    d.add("regressions" if delta > 0 else "improvements", "compile_time", subject, what, a, b, **extra)


def _s(v: float) -> str:
    return f"{v:.2f} s" if v < 100 else f"{v:.0f} s"


# -- step time and memory


def _spread(samples: list[float]) -> float | None:
    """bench's noise: half the range of the samples over their median."""
    if len(samples) < 2:
        return None
    mid = statistics.median(samples)
    return (max(samples) - min(samples)) / 2 / mid if mid > 0 else None


def _quantile(run: RunSummary, q: str) -> tuple[float | None, list[float]]:
    """A run's steady p50 or p90, and its blocks' (none: the run has no steps)."""
    steps = run.get("steps")
    if not steps:
        return None, []
    if q == "p50":
        return steps.get("p50_ms"), steps.get("blocks_p50_ms") or []
    return steps.get("p90_ms"), steps.get("blocks_p90_ms") or []


def step_time(d: Diff, base: RunSummary, new: RunSummary) -> None:
    for q in ("p50", "p90"):
        (a, sa), (b, sb) = _quantile(base, q), _quantile(new, q)
        subject, label = f"step_{q}", f"steady step time {q}"
        if a is None or b is None:
            if a is not None or b is not None:
                d.add("changed", "step_time", subject, f"{label}: measured in one run only", a, b)
            continue
        spread = max(_spread(sa) or 0.0, _spread(sb) or 0.0)
        ca, cb = _interval(sa), _interval(sb)
        change = b / a - 1 if a > 0 else math.inf
        over = max(CLOSE, spread)
        apart = ca is not None and cb is not None and (cb[0] > ca[1] or cb[1] < ca[0])
        extra: EntryDetails = {
            "change_pct": round(100 * change, 2),
            "noise_pct": round(100 * over, 2),
            "base_ci": ca,
            "new_ci": cb,
        }
        what = f"{label} {ms_sig(a)} → {ms_sig(b)} ({change:+.1%}; noise ±{over:.1%})"
        if abs(change) > over and apart:
            d.add("regressions" if change > 0 else "improvements", "step_time", subject, what, a, b, **extra)
        else:
            why = "too few steady steps to tell" if ca is None or cb is None else f"within noise ±{over:.1%}"
            d.add("unchanged", "step_time", subject, f"{label} ({ms_sig(a)} → {ms_sig(b)}, {why})", a, b, **extra)


def gpu_memory(d: Diff, base: RunSummary, new: RunSummary) -> None:
    a, b = base.get("gpu_mem_peak_bytes"), new.get("gpu_mem_peak_bytes")
    if a is None and b is None:
        return
    if a is None or b is None:
        d.add("changed", "gpu_memory", "gpu_mem_peak", "GPU memory peak: measured in one run only", a, b)
        return
    delta = b - a
    what = f"GPU memory peak {_gib(a)} → {_gib(b)} ({delta / a:+.1%})" if a else f"GPU memory peak → {_gib(b)}"
    if abs(delta) > MEMORY_MIN_BYTES and (not a or abs(delta) > CLOSE * a):
        d.add("regressions" if delta > 0 else "improvements", "gpu_memory", "gpu_mem_peak", what, a, b)
    else:
        d.add("unchanged", "gpu_memory", "gpu_mem_peak", f"GPU memory peak ({_gib(a)} → {_gib(b)}, within noise)", a, b)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"
