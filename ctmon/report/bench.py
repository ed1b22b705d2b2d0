"""``ctmon bench``'s figures: one row per mode from that mode's recorded run,
and the recommendation. Pure: stores in, dicts and text out.

What a row says, and from where (the run's own store):

* ``compile_s``: time compiling, frames and backward graphs, all ranks;
* ``first_step_s``: from the job's start to the end of its first step
  (start-up, the first compiles and the first step itself);
* ``p50_ms``/``p90_ms``: steady steps -- those after the last compile
  ended (steps that paid a compile are left out), device-timed on CUDA;
* ``speedup``: eager's p50 over this mode's;
* ``peak_mem_bytes``: the job's own GPU memory at its highest (its
  processes' use, from the 1 Hz samples); ``rss_peak_bytes``: host memory;
* ``break_even_steps``: compile time over the per-step saving against eager;
* ``warm_compile_s``: the same mode run again on the same compile cache.

A mode is run several times, interleaved with the others (``summarize``
folds its runs into one row): each run's median steady step is one sample,
``p50_ms`` is the median of those, and the intervals come from the runs, so
the process-to-process spread is in them (steps within one process agree
far better than processes do). ``speedup_ci`` pairs the runs of one round
(eager's k-th run with the mode's k-th: a load that comes and goes hits
both) and is a Student-t 95 % interval on the mean log ratio -- with 3-7
runs a distribution-free interval cannot reach 95 % (the range of 5 runs
covers the median 94 % of the time) and a bootstrap of 3 values is far too
narrow -- widened by ``RESOLUTION`` either side: process-level effects
(memory layout, clocks) that a few runs do not sample.
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from ctmon.report.rank_sections import compile_counts, job_totals
from ctmon.store import Session
from ctmon.words.phrases import cut
from ctmon.words.units import ms_sig

STEADY_MIN = 3  # fewer steady steps than this: the last half of the steps stands in
CLOSE = 0.05  # modes within 5 % of each other's p50 are "the same speed"
RESOLUTION = 0.01  # differences under 1 % between processes are never called resolved
# Student's t, two-sided 95 %, by degrees of freedom (no scipy in a report)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


@dataclass
class ModeRun:
    """One run of the script in one mode, as the runner saw it end."""

    mode: str
    session: Session | None  # None: nothing was recorded
    recording: str | None = None
    stopped: str | None = None  # "steps" (reached --steps), "time-limit", "interrupted", or None: it ended by itself
    exit_code: int | None = None
    error: str | None = None  # why the run could not be measured, one line
    warm: ModeRun | None = None  # the same mode again on the same cache (--warm)


def mode_row(run: ModeRun) -> dict[str, Any]:
    s = run.session
    row: dict[str, Any] = {"mode": run.mode, "status": "ok", "recording": run.recording}
    if s is None:
        return {**row, "status": "failed", "error": run.error or "nothing was recorded"}
    c = job_totals(s, compile_counts)
    series = s.steps.current
    n = len(series) if series is not None else 0
    steady = _steady(s)
    row.update(
        compile_s=round(c["total_time_s"], 3) if run.mode != "eager" else 0.0,
        first_step_s=_first_step_s(s),
        steps=n,
        steady_steps=len(steady),
        p50_ms=_q(steady, 0.5),
        p90_ms=_q(steady, 0.9),
        device_timed=bool(series is not None and series.device_windows),
        speedup=None,
        peak_mem_bytes=_gpu_peak(s),
        rss_peak_bytes=max((x.tree_rss or x.rss or 0 for x in s.samples), default=None) or None,
        recompiles=c["recompiles"],
        graph_breaks=c["graph_breaks"],
        cudagraph_skips=sum(s.compile.cudagraph_skips.values()),
        break_even_steps=None,
        warm_compile_s=None,
        stopped=run.stopped,
        exit_code=run.exit_code,
        # what the agent could not do in this mode (a call with another backend keeps it)
        notes=[n.message for n in s.notes if n.source == "agent" and n.message.startswith("ctmon bench")][:5],
    )
    if run.warm is not None and run.warm.session is not None and run.mode != "eager":
        row["warm_compile_s"] = round(job_totals(run.warm.session, compile_counts)["total_time_s"], 3)
    failed = run.error or _failure(run)
    if failed:
        row.update(status="failed", error=failed)
    elif run.mode != "eager" and s.compile.call_count == 0:
        row.update(status="no-compile", error="the script never called torch.compile: nothing to compare")
    elif run.stopped in ("time-limit", "interrupted"):
        row["status"] = run.stopped
    if row["p50_ms"] is None and row["status"] == "ok":
        row.update(status="no-steps", error="no steps were seen (no optimizer.step(), compiled call or ctmon.step())")
    return row


def summarize(runs: list[ModeRun]) -> dict[str, Any]:
    """One mode's row from its runs, in the order they ran: the first run
    (cold: a fresh compile cache of its own) gives compile time, first step,
    recompiles and status; every measured run gives one median step."""
    row = mode_row(runs[0])
    rows = [row] + [mode_row(r) for r in runs[1:]]
    medians = [r.get("p50_ms") for r in rows]
    measured = [m for m in medians if m]
    row["runs"] = len(runs)
    row["run_p50_ms"] = medians  # the k-th run of each mode ran in round k
    row["cold_compile_s"] = row.get("compile_s")
    if len(measured) > 1:
        row["p50_ms"] = round(statistics.median(measured), 4)
        row["p90_ms"] = round(statistics.median([r["p90_ms"] for r in rows if r.get("p90_ms")]), 4)
    row["p50_ci_ms"] = _interval(measured)
    later = [r["compile_s"] for r in rows[1:] if r.get("compile_s") is not None and r["status"] != "failed"]
    if later and row.get("warm_compile_s") is None and runs[0].mode != "eager":
        row["warm_compile_s"] = round(statistics.median(later), 3)  # the mode's own cache, reused
    failed = [f"run {k + 1}: {r.get('error')}" for k, r in enumerate(rows) if k and r["status"] == "failed"]
    if failed:
        row["notes"] = [*row.get("notes", []), *failed][:8]
    if row["status"] == "ok" and any(r["status"] in ("time-limit", "interrupted") for r in rows[1:]):
        row["status"] = next(r["status"] for r in rows[1:] if r["status"] in ("time-limit", "interrupted"))
    return row


def _interval(values: list[float]) -> list[float] | None:
    """A 95 % interval for the center of positive samples: Student's t on
    their logs, widened by RESOLUTION; None under two samples."""
    logs = [math.log(v) for v in values if v and v > 0]
    if len(logs) < 2:
        return None
    mean = statistics.fmean(logs)
    half = T975.get(len(logs) - 1, 2.2) * statistics.stdev(logs) / math.sqrt(len(logs))
    return [round(math.exp(mean - half) * (1 - RESOLUTION), 4), round(math.exp(mean + half) * (1 + RESOLUTION), 4)]


def noise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The machine's run-to-run noise: the spread of eager's run medians
    (half their range, as a share of their median)."""
    eager = next((r for r in rows if r["mode"] == "eager"), None)
    medians = [m for m in (eager or {}).get("run_p50_ms") or [] if m]
    if len(medians) < 2:
        return {"eager_runs": len(medians), "spread_pct": None}
    spread = (max(medians) - min(medians)) / 2 / statistics.median(medians)
    return {"eager_runs": len(medians), "spread_pct": round(100 * spread, 2)}


def _failure(run: ModeRun) -> str | None:
    """A run that ended on its own with a failure: what ended it."""
    if run.stopped is not None or run.exit_code in (0, None):
        return None
    s = run.session
    raised = s.uncaught if s is not None else None
    if raised is not None:
        where = f" at {raised.file}:{raised.line}" if raised.file else ""
        return f"{raised.type}: {cut(raised.message.splitlines()[0], 200) if raised.message else ''}{where}"
    return f"exited with code {run.exit_code}"


def _steady(s: Session) -> list[float]:
    """Step times after the last compile ended; steps that overlapped a
    compile are never steady."""
    series = s.steps.current
    if series is None or len(series) < 2:
        return []
    spans = [c.span for c in s.compile.compiles]
    for rs in s.ranks.values():
        spans += [c.span for c in rs.session.compile.compiles]
    spans += [(p.start, p.end) for p in s.compile.phases.spans if p.phase == "backward"]
    marked = series.compile_marked(spans)
    last_end = max((b for _, b in spans), default=-math.inf)
    first = bisect_right(series.times, last_end)  # the first boundary after every compile
    steady = [series.interval_ms(k) for k in range(max(1, first + 1), len(series)) if k not in marked]
    steady = [v for v in steady if v == v]
    if len(steady) >= STEADY_MIN:
        return steady
    half = [series.interval_ms(k) for k in range(max(1, len(series) // 2), len(series)) if k not in marked]
    return [v for v in half if v == v]


def _q(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 4)
    return round(statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1], 4)


def _first_step_s(s: Session) -> float | None:
    """The end of the first step: an optimizer or ``ctmon.step()`` boundary
    ends a step; a compiled call's boundary is its start (the first call's
    own compile comes after it), so there the second boundary ends the first."""
    series = s.steps.current
    first = 1 if series is not None and series.source == "compiled_call" else 0
    if series is None or len(series) <= first or s.first_t is None:
        return None
    return round(series.times[first] - s.first_t, 3)


def _gpu_peak(s: Session) -> int | None:
    """The job's own GPU memory at its highest, over all devices."""
    peak = None
    for x in s.samples:
        used = sum(g.proc_mem or 0 for g in x.gpus or [])
        if x.gpus and (peak is None or used > peak):
            peak = used
    return peak or None


def compare(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Fill speed-ups, their intervals and break-even steps against eager;
    the recommendation, with the machine's noise and whether it is resolved."""
    eager = next((r for r in rows if r["mode"] == "eager" and r["status"] in ("ok", "time-limit")), None)
    base = eager["p50_ms"] if eager is not None else None
    spread = noise(rows)
    for r in rows:
        r.setdefault("speedup_ci", None)
        r.setdefault("resolved", False)
        if r.get("p50_ms") and base:
            r["speedup"] = round(base / r["p50_ms"], 3)
            saving = (base - r["p50_ms"]) / 1000
            if r["mode"] != "eager" and saving > 0 and r.get("compile_s") is not None:
                r["break_even_steps"] = math.ceil(r["compile_s"] / saving)  # the cold compile's
            if r["mode"] != "eager" and eager is not None:
                r["speedup_ci"] = _speedup_interval(eager, r)
                r["resolved"] = _resolved(r, spread)
    rec = recommend(rows)
    rec["noise"] = spread
    return rec


def _speedup_interval(eager: dict[str, Any], row: dict[str, Any]) -> list[float] | None:
    """Eager's k-th run over the mode's k-th (same round), as an interval
    that holds the point figure."""
    pairs = zip(eager.get("run_p50_ms") or [], row.get("run_p50_ms") or [], strict=False)
    ci = _interval([e / m for e, m in pairs if e and m])
    if ci is None:
        return None
    return [round(min(ci[0], row["speedup"]), 3), round(max(ci[1], row["speedup"]), 3)]


def _resolved(row: dict[str, Any], spread: dict[str, Any]) -> bool:
    """The speed-up's interval leaves out 1 and the effect is larger than
    the noise of repeated eager runs."""
    ci = row.get("speedup_ci")
    if ci is None or ci[0] <= 1 <= ci[1]:
        return False
    return abs(row["speedup"] - 1) * 100 > (spread.get("spread_pct") or 0)


def recommend(rows: list[dict[str, Any]]) -> dict[str, Any]:
    rec = _recommend(rows)
    unmeasured = [r["mode"] for r in rows if not r.get("p50_ms") and r["mode"] != rec["mode"]]
    if unmeasured:
        rec["reason"] += f" (not measured: {', '.join(unmeasured)}; see the table)"
    return rec


def _unresolved(best: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The verdict when the best mode's difference from eager is not
    resolved: no winner, and the noise said."""
    if best.get("resolved"):
        return None
    spread = noise(rows).get("spread_pct")
    ci = best.get("speedup_ci")
    if ci is None:
        why = "one run per mode gives no interval (run more with --runs)"
        return {"mode": None, "resolved": False, "reason": f"no difference resolved: {why}"}
    half = max(ci[1] - best["speedup"], best["speedup"] - ci[0]) / best["speedup"]
    at = max(half * 100, spread or 0)
    return {
        "mode": None,
        "resolved": False,
        "reason": f"no difference resolved at this noise (±{at:.0f} %): best {best['mode']} "
        f"{best['speedup']:.2f}× eager, 95 % interval {ci[0]:.2f}–{ci[1]:.2f}× over {best.get('runs', 1)} runs; "
        "run more (--runs) or on a quieter machine",
    }


def _recommend(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r["status"] in ("ok", "time-limit", "interrupted") and r.get("p50_ms")]
    compiled = [r for r in ok if r["mode"] != "eager"]
    if not compiled:
        return {"mode": None, "resolved": False, "reason": "no compiled mode ran to steady steps: nothing to recommend"}
    best = min(compiled, key=lambda r: r["p50_ms"])
    eager = next((r for r in ok if r["mode"] == "eager"), None)
    if eager is None:
        return {"mode": None, "resolved": False, "reason": "eager was not measured: no baseline to compare with"}
    unresolved = _unresolved(best, rows)  # never a winner from noise
    if unresolved is not None:
        return unresolved
    if best["p50_ms"] >= eager["p50_ms"] * (1 - CLOSE):
        return {
            "mode": "eager",
            "resolved": True,
            "reason": f"no mode is more than {CLOSE:.0%} faster than eager (best: {best['mode']}, "
            f"{ms_sig(best['p50_ms'])} vs {ms_sig(eager['p50_ms'])} a step): compiling does not pay for itself here; "
            "compile only the hot parts, or look at the graph breaks",
        }
    default = next((r for r in compiled if r["mode"] == "default"), None)
    pick = best
    if default is not None and best is not default and best["p50_ms"] >= default["p50_ms"] * (1 - CLOSE):
        pick = default  # within a few percent: the cheaper compile and the fewer surprises
    reason = f"{pick['mode']}: {ms_sig(pick['p50_ms'])} a step"
    if pick.get("speedup"):
        reason += f", {pick['speedup']:.2f}× eager"
    if pick.get("speedup_ci"):
        reason += f" (95 % interval {pick['speedup_ci'][0]:.2f}–{pick['speedup_ci'][1]:.2f}×, {pick.get('runs')} runs)"
    if pick is not best:
        reason += (
            f"; {best['mode']} is within {CLOSE:.0%} ({ms_sig(best['p50_ms'])}) and compiles "
            f"{_s(best.get('compile_s'))} against {_s(pick.get('compile_s'))}"
        )
    if pick.get("break_even_steps") is not None:
        reason += (
            f"; its cold compile ({_s(pick.get('compile_s'))}, a fresh cache) pays off after "
            f"{pick['break_even_steps']} steps"
        )
    if default is not None and pick is not default and pick.get("peak_mem_bytes") and default.get("peak_mem_bytes"):
        more = pick["peak_mem_bytes"] / default["peak_mem_bytes"] - 1
        if more > 0.1:
            reason += f"; it holds {more:.0%} more GPU memory than default"
    if not pick.get("resolved"):  # default stands in for a resolved best within CLOSE: say so
        reason += f"; {pick['mode']} itself is not resolved against eager"
    return {"mode": pick["mode"], "resolved": True, "reason": reason}


def _s(v: float | None) -> str:
    return "?" if v is None else f"{v:.1f} s"
