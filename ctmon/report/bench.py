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
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from ctmon.report.ranks import compile_counts, job_totals
from ctmon.store import Session
from ctmon.words import cut

MODES = ("eager", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
STEADY_MIN = 3  # fewer steady steps than this: the last half of the steps stands in
CLOSE = 0.05  # modes within 5 % of each other's p50 are "the same speed"


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
    """Fill speed-ups and break-even steps against eager; the recommendation."""
    eager = next((r for r in rows if r["mode"] == "eager" and r["status"] == "ok"), None)
    base = eager["p50_ms"] if eager is not None else None
    for r in rows:
        if r.get("p50_ms") and base:
            r["speedup"] = round(base / r["p50_ms"], 3)
            saving = (base - r["p50_ms"]) / 1000
            if r["mode"] != "eager" and saving > 0 and r.get("compile_s") is not None:
                r["break_even_steps"] = math.ceil(r["compile_s"] / saving)
    return recommend(rows)


def recommend(rows: list[dict[str, Any]]) -> dict[str, Any]:
    rec = _recommend(rows)
    unmeasured = [r["mode"] for r in rows if not r.get("p50_ms") and r["mode"] != rec["mode"]]
    if unmeasured:
        rec["reason"] += f" (not measured: {', '.join(unmeasured)}; see the table)"
    return rec


def _recommend(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r["status"] in ("ok", "time-limit", "interrupted") and r.get("p50_ms")]
    compiled = [r for r in ok if r["mode"] != "eager"]
    if not compiled:
        return {"mode": None, "reason": "no compiled mode ran to steady steps: nothing to recommend"}
    best = min(compiled, key=lambda r: r["p50_ms"])
    eager = next((r for r in ok if r["mode"] == "eager"), None)
    if eager is not None and best["p50_ms"] >= eager["p50_ms"] * (1 - CLOSE):
        return {
            "mode": "eager",
            "reason": f"no mode is more than {CLOSE:.0%} faster than eager (best: {best['mode']}, "
            f"{_ms(best['p50_ms'])} vs {_ms(eager['p50_ms'])} a step): compiling does not pay for itself here; "
            "compile only the hot parts, or look at the graph breaks",
        }
    default = next((r for r in compiled if r["mode"] == "default"), None)
    pick = best
    if default is not None and best is not default and best["p50_ms"] >= default["p50_ms"] * (1 - CLOSE):
        pick = default  # within a few percent: the cheaper compile and the fewer surprises
    reason = f"{pick['mode']}: {_ms(pick['p50_ms'])} a step"
    if pick.get("speedup"):
        reason += f", {pick['speedup']:.2f}× eager"
    if pick is not best:
        reason += (
            f"; {best['mode']} is within {CLOSE:.0%} ({_ms(best['p50_ms'])}) and compiles "
            f"{_s(best.get('compile_s'))} against {_s(pick.get('compile_s'))}"
        )
    if pick.get("break_even_steps") is not None:
        reason += f"; its {_s(pick.get('compile_s'))} of compiling pays off after {pick['break_even_steps']} steps"
    if default is not None and pick is not default and pick.get("peak_mem_bytes") and default.get("peak_mem_bytes"):
        more = pick["peak_mem_bytes"] / default["peak_mem_bytes"] - 1
        if more > 0.1:
            reason += f"; it holds {more:.0%} more GPU memory than default"
    return {"mode": pick["mode"], "reason": reason}


def _ms(v: float | None) -> str:
    return "?" if v is None else f"{v:.3g} ms"


def _s(v: float | None) -> str:
    return "?" if v is None else f"{v:.1f} s"


COLUMNS = (
    ("mode", "mode"),
    ("compile", "compile_s"),
    ("warm", "warm_compile_s"),
    ("1st step", "first_step_s"),
    ("p50", "p50_ms"),
    ("p90", "p90_ms"),
    ("speed-up", "speedup"),
    ("GPU mem", "peak_mem_bytes"),
    ("recomp", "recompiles"),
    ("breaks", "graph_breaks"),
    ("cg skips", "cudagraph_skips"),
    ("break-even", "break_even_steps"),
)


def _cell(key: str, v: Any) -> str:
    if v is None:
        return "—"
    if key in ("compile_s", "warm_compile_s", "first_step_s"):
        return f"{v:.1f} s"
    if key in ("p50_ms", "p90_ms"):
        return f"{v:.3g} ms"
    if key == "speedup":
        return f"{v:.2f}×"
    if key in ("peak_mem_bytes", "rss_peak_bytes"):
        return f"{v / 2**30:.2f} GiB"
    if key == "break_even_steps":
        return f"{v:,} steps"
    return str(v)


def table_rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, one row of cells per mode, and the notes under the table
    (failures and stops, one line each)."""
    warm = any(r.get("warm_compile_s") is not None for r in doc["modes"])
    cols = [(h, k) for h, k in COLUMNS if warm or k != "warm_compile_s"]
    if not any(r.get("peak_mem_bytes") for r in doc["modes"]):  # no GPU: the host's memory instead
        cols = [("host mem", "rss_peak_bytes") if k == "peak_mem_bytes" else (h, k) for h, k in cols]
    body, notes = [], []
    for r in doc["modes"]:
        if r["status"] in ("failed", "no-compile", "no-steps"):
            body.append([r["mode"], r["status"]] + [""] * (len(cols) - 2))
            notes.append(f"{r['mode']}: {r.get('error')}")
            continue
        body.append([_cell(k, r.get(k)) for _, k in cols])
        notes += [f"{r['mode']}: {_plain(n, r['mode'])}" for n in r.get("notes") or [] if "eager (" not in n]
        if r["status"] == "time-limit" and not r.get("steps"):
            notes.append(  # on a loaded machine, start-up alone (importing torch) can take that long
                f"{r['mode']}: stopped at the time limit ({doc.get('time_limit_s', 0):g} s) before its first step: "
                "give it more time with --time-limit"
            )
        elif r["status"] == "time-limit" and r.get("p50_ms") is None:
            notes.append(
                f"{r['mode']}: stopped at the time limit ({doc.get('time_limit_s', 0):g} s) before any steady "
                f"step ({r.get('steps', 0)} step(s) while compiling): give it more time with --time-limit"
            )
        elif r["status"] == "time-limit":
            notes.append(f"{r['mode']}: stopped at the time limit; its figures cover the steps it ran")
        elif r["status"] == "interrupted":
            notes.append(f"{r['mode']}: interrupted; its figures cover the steps it ran")
    return [h for h, _ in cols], body, notes


def _plain(note: str, mode: str) -> str:
    """An agent's bench note without its prefix: the table names the mode."""
    return note.removeprefix(f"ctmon bench ({mode}): ")


def render_text(doc: dict[str, Any]) -> str:
    head, body, notes = table_rows(doc)
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body]
    lines += [f"  {n}" for n in notes]
    rec = doc["recommendation"]
    lines.append("")
    lines.append(f"recommendation: {rec['reason']}" if rec.get("mode") else f"no recommendation: {rec['reason']}")
    timing = "device-timed (CUDA events)" if doc.get("device_timed") else "host-timed"
    lines.append(f"steady steps are those after the last compile; {timing}")
    return "\n".join(lines) + "\n"


def render_markdown(doc: dict[str, Any]) -> str:
    head, body, notes = table_rows(doc)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    out.append("")
    out += [f"- {n}" for n in notes]
    rec = doc["recommendation"]
    out.append(f"**Recommendation:** {rec['reason']}" if rec.get("mode") else f"No recommendation: {rec['reason']}")
    return "\n".join(out) + "\n"
