"""``ctmon diff BASE NEW``: what changed between two runs of one job.

Each side is read into the store and the report as ``ctmon report`` reads it
(a recording or a TORCH_TRACE directory), then cut down to what a comparison
needs (``run_summary``: a plain dict, so the comparison is tested on
hand-built ones). ``compare`` puts every compared figure in one of four
lists: ``regressions``, ``improvements``, ``changed`` (neither better nor
worse: versions, settings) and ``unchanged`` (equal, or within the noise).

Counts (compiles, recompiles, breaks, cache misses) are exact: any change is
one. Timings are not, and two runs are one sample each, so the noise is
judged as ``ctmon bench`` judges it (ctmon/report/bench.py):

* step time: each run's steady steps (after its last compile, as bench
  takes them) are cut into up to ``BLOCKS`` consecutive blocks, and each
  block's median (or p90) is one sample, as each run's median is in bench.
  A change is called when it is larger than ``bench.CLOSE`` (what bench
  calls "the same speed") and than either run's own spread (bench's noise:
  half the range of the samples over their median), and the two runs'
  95 % intervals (bench's Student-t on the logs, widened by its
  ``RESOLUTION``) do not overlap;
* compile time: a change is called when it is over ``COMPILE_CLOSE`` of the
  base and over ``COMPILE_MIN_S`` (a loaded machine moves a short compile by
  that much), and, where two or more compiles pair up (the same frame's
  k-th compile in both runs), the 95 % interval of their ratios (bench's,
  as bench pairs the k-th runs of two modes) leaves out 1;
* GPU memory peak (the job's own, from the ~1 Hz samples): over
  ``bench.CLOSE`` and over ``MEMORY_MIN_BYTES``.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

from ctmon.report.bench import CLOSE, STEADY_MIN, _gpu_peak, _interval
from ctmon.store import Session
from ctmon.words.labels import CACHE_NAMES, PHASE_NAMES
from ctmon.words.locations import where
from ctmon.words.units import ms_sig

DIFF_VERSION = 1
BLOCKS = 5  # step-time samples per run (bench runs a mode 3-7 times)
COMPILE_CLOSE = 0.10  # compile-time changes under 10 % are not called
COMPILE_MIN_S = 1.0  # nor under a second
MEMORY_MIN_BYTES = 64 << 20

# The order entries are listed in: what a user acts on first.
KIND_ORDER = (
    "limit_hit",
    "graph_break",
    "recompile",
    "frame",
    "frame_compiles",
    "count",
    "compile_time",
    "cache",
    "step_time",
    "gpu_memory",
    "version",
    "config",
    "compile_call",
)

# ctmon's own split of a compile's time (dynamo, backend), then PyTorch's
# traced phases: inductor and code_gen are timed both ways, the rest traced only.
PHASE_LABELS = {
    "dynamo": "Dynamo (tracing and guards)",
    "backend": "the backend (AOTAutograd and Inductor)",
    "inductor": PHASE_NAMES["inductor"],
    "code_gen": PHASE_NAMES["code_gen"],
    **{k: f"{PHASE_NAMES[k]} (traced)" for k in ("dynamo_tracing", "guards", "aot_autograd", "autotune", "backward")},
}
COUNTS = {
    "compiles": "compiles",
    "recompiles": "recompiles",
    "graph_breaks": "graph breaks",
    "limit_hits": "recompile-limit hits",
    "failures": "compile failures",
    "frames": "compiled frames",
    "backward_compiles": "backward compiles",
}
CACHES = {key: f"{name} cache" for key, name in CACHE_NAMES.items()}
_COMPILE_ID = re.compile(r"^\s*\[?\d+/\d+\]?\s*:\s*")  # "0/0: " before a recompile reason


# ------------------------------------------------------------- one side


def run_summary(path: str, session: Session, report: dict[str, Any]) -> dict[str, Any]:
    """What the comparison reads of one run: the report's compile side, and
    what only the store has (steady steps in blocks, settings in force)."""
    cs = session.compile
    return {
        "path": path,
        "input": report["input"],
        "command": report["command"],
        "cwd": report["cwd"],
        "session_id": report["session_id"],
        "versions": {
            "python": report["python"],
            "torch": report["torch"],
            "triton": report["triton"],
            "cuda": report["cuda"],
            "device": ", ".join(sorted({str(d.get("name")) for d in report["devices"]})) or None,
        },
        "config": {
            **{str(k): v for k, v in cs.config_in_force([c.compile_id for c in cs.compiles]).items()},
            "recompile_limit": report["compile"]["recompile_limit"],
        },
        "compile_calls": [
            {k: c.get(k) for k in ("file", "line", "backend", "mode", "dynamic", "fullgraph")}
            for c in report["compile_calls"]
        ],
        "compile": report["compile"],
        "cache": report["cache"],
        "frames": report["frames"],
        "compiles": report["compiles"],
        "graph_breaks": report["graph_breaks"],
        "steps": steady_blocks(session),
        "gpu_mem_peak_bytes": _gpu_peak(session),
        "notes": report["notes"],
    }


NEW_SINCE_BASE_KINDS = ("limit_hit", "graph_break", "recompile", "frame")


def is_new_since_base(entry: dict[str, Any]) -> bool:
    """A break site, recompile reason, frame or limit hit NEW has and BASE
    had not (not one whose count only changed)."""
    return (
        entry["kind"] in NEW_SINCE_BASE_KINDS and entry["base"] in (None, False) and entry["new"] not in (None, False)
    )


def steady_blocks(session: Session) -> dict[str, Any]:
    """The run's steady step times (bench's ``_steady``: after the last
    compile; the last half where fewer than ``STEADY_MIN`` come after it),
    their p50/p90, and the p50/p90 of each of up to ``BLOCKS`` consecutive
    blocks. Array slices, not a loop over boundaries: a day-long run has
    millions."""
    series = session.steps.current
    empty: dict[str, Any] = {"steady": 0, "p50_ms": None, "p90_ms": None, "blocks_p50_ms": [], "blocks_p90_ms": []}
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


def _intervals_ms(series: Any) -> Any:
    """Every interval in ms by boundary index (0 or NaN where unknown)."""
    if series.eff_ms is not None:
        out = np.frombuffer(series.eff_ms, dtype=np.float32).astype(np.float64)
        return np.nan_to_num(out, nan=0.0)
    return np.frombuffer(series.ns, dtype=np.int64) / 1e6


def same_job(base: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why BASE and NEW are not runs of one job (their scripts differ), or
    None. A side that does not say what it ran (a TORCH_TRACE) matches any."""
    a, b = script_of(base.get("command") or []), script_of(new.get("command") or [])
    if a is None or b is None or a == b:
        return None
    return f"BASE ran {a} and NEW ran {b}: not runs of one job"


def script_of(command: list[str]) -> str | None:
    """The script (its file name) or ``-m`` module a command ran."""
    for k, arg in enumerate(command):
        if arg == "-m" and k + 1 < len(command):
            return f"-m {command[k + 1]}"
        if arg.endswith(".py"):
            return os.path.basename(arg)
    return None


# ------------------------------------------------------------ comparing


class Diff:
    """The four lists, filled as figures are compared."""

    def __init__(self) -> None:
        self.lists: dict[str, list[dict[str, Any]]] = {
            "regressions": [],
            "improvements": [],
            "changed": [],
            "unchanged": [],
        }

    def add(self, verdict: str, kind: str, subject: str, what: str, base: Any, new: Any, **more: Any) -> None:
        self.lists[verdict].append({"kind": kind, "subject": subject, "what": what, "base": base, "new": new, **more})

    def ordered(self) -> dict[str, list[dict[str, Any]]]:
        rank = {k: i for i, k in enumerate(KIND_ORDER)}
        return {name: sorted(xs, key=lambda e: rank.get(e["kind"], len(rank))) for name, xs in self.lists.items()}


def compare(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The diff of two run summaries (``run_summary``), as ``--json`` prints it."""
    d = Diff()
    _limit_hits(d, base, new)
    _graph_breaks(d, base, new)
    _frames(d, base, new)
    _counts(d, base, new)
    _compile_time(d, base, new)
    _caches(d, base, new)
    _step_time(d, base, new)
    _gpu_memory(d, base, new)
    _settings(d, base, new)
    return {
        "diff_version": DIFF_VERSION,
        "base": _side(base),
        "new": _side(new),
        **d.ordered(),
        "method": METHOD,
    }


METHOD = {
    "counts": "compiles, recompiles, graph breaks and cache results are exact counts: any change is reported",
    "step_time": (
        f"steady steps (after the last compile) in up to {BLOCKS} consecutive blocks per run, one sample a block; "
        f"a change is called when it exceeds {CLOSE:.0%} and both runs' own spread (half the range of the blocks' "
        "figures) and the runs' 95 % intervals (Student-t, as ctmon bench) do not overlap"
    ),
    "compile_time": (
        f"a change is called when it exceeds {COMPILE_CLOSE:.0%} and {COMPILE_MIN_S:g} s and, where 2 or more "
        "compiles pair up (a frame's k-th compile in each run), the 95 % interval of their ratios leaves out 1"
    ),
    "gpu_memory": f"the job's own GPU memory peak (~1 Hz samples); called over {CLOSE:.0%} and "
    f"{MEMORY_MIN_BYTES >> 20} MiB",
}


def _side(run: dict[str, Any]) -> dict[str, Any]:
    return {k: run.get(k) for k in ("path", "input", "command", "session_id")}


def relative(file: str | None, run: dict[str, Any]) -> str | None:
    """A file as the job's working directory saw it: runs made in two
    checkouts still name one place."""
    cwd = run.get("cwd")
    if file and cwd and file.startswith(cwd.rstrip("/") + "/"):
        return file[len(cwd.rstrip("/")) + 1 :]
    return file


def _place(file: str | None, line: int | None) -> str:
    return where(file, line) if file else "?"


# -- frames, recompiles, the limit


def _frame_key(f: dict[str, Any], run: dict[str, Any]) -> tuple[Any, ...]:
    return (relative(f.get("file"), run), f.get("line"), f.get("name"))


def _at(key: tuple[Any, ...]) -> dict[str, Any]:
    """Where an entry new since BASE is (its file relative to the job's
    working directory): for the findings of NEW at that place."""
    return {"file": key[0], "line": key[1]}


def _frame_title(f: dict[str, Any], run: dict[str, Any]) -> str:
    return f"{f.get('name')} ({_place(relative(f.get('file'), run), f.get('line'))})"


def _reasons(f: dict[str, Any]) -> list[str]:
    """A frame's recompile reasons without the compile id each begins with
    (the ids are not the same in two runs)."""
    out: list[str] = []
    for r in f.get("recompile_reasons") or []:
        text = _COMPILE_ID.sub("", str(r)).strip()
        if text not in out:
            out.append(text)
    return out


def _frames(d: Diff, base: dict[str, Any], new: dict[str, Any]) -> None:
    bf = {_frame_key(f, base): f for f in base["frames"]}
    nf = {_frame_key(f, new): f for f in new["frames"]}
    for key, f in nf.items():
        title = _frame_title(f, new)
        if key not in bf:
            d.add("regressions", "frame", title, f"{title} is compiled in NEW only", None, f["compiles"], **_at(key))
            for reason in _reasons(f):
                what = f"new recompile of {title}: {reason}"
                d.add("regressions", "recompile", title, what, None, reason, **_at(key))
            continue
        old = bf[key]
        before, after = _reasons(old), _reasons(f)
        for reason in after:
            if reason not in before:
                what = f"new recompile of {title}: {reason}"
                d.add("regressions", "recompile", title, what, None, reason, **_at(key))
        for reason in before:
            if reason not in after:
                d.add("improvements", "recompile", title, f"recompile gone from {title}: {reason}", reason, None)
        verdict = _more_is_worse(old["compiles"], f["compiles"])
        what = f"{title}: {old['compiles']} → {f['compiles']} compiles"
        d.add(
            verdict, "frame_compiles", title, what if verdict != "unchanged" else title, old["compiles"], f["compiles"]
        )
    for key, f in bf.items():
        if key not in nf:
            title = _frame_title(f, base)
            d.add("improvements", "frame", title, f"{title} is compiled in BASE only", f["compiles"], None)


def _limit_hits(d: Diff, base: dict[str, Any], new: dict[str, Any]) -> None:
    bf = {_frame_key(f, base): f for f in base["frames"]}
    for f in new["frames"]:
        old = bf.get(_frame_key(f, new))
        was = bool(old and old.get("limit_hit"))
        if f.get("limit_hit") and not was:
            title = _frame_title(f, new)
            limit = f.get("recompile_limit")
            what = f"{title} now hits the recompile limit ({limit}) and runs eager"
            d.add("regressions", "limit_hit", title, what, False, True, **_at(_frame_key(f, new)))
    nf = {_frame_key(f, new): f for f in new["frames"]}
    for f in base["frames"]:
        now = nf.get(_frame_key(f, base))
        if f.get("limit_hit") and not (now and now.get("limit_hit")):
            title = _frame_title(f, base)
            d.add("improvements", "limit_hit", title, f"{title} no longer hits the recompile limit", True, False)


def _more_is_worse(a: float, b: float) -> str:
    return "regressions" if b > a else "improvements" if b < a else "unchanged"


# -- graph breaks


def _break_key(b: dict[str, Any], run: dict[str, Any]) -> tuple[Any, ...]:
    return (relative(b.get("file"), run), b.get("line"), b.get("reason"))


def _graph_breaks(d: Diff, base: dict[str, Any], new: dict[str, Any]) -> None:
    bb = {_break_key(b, base): b for b in base["graph_breaks"]}
    nb = {_break_key(b, new): b for b in new["graph_breaks"]}
    for key, b in nb.items():
        place = _place(key[0], key[1])
        if key not in bb:
            what = f"new graph break at {place}: {b.get('reason')} ({b.get('count')}×)"
            d.add("regressions", "graph_break", place, what, None, b.get("count"), reason=b.get("reason"), **_at(key))
        else:
            d.add("unchanged", "graph_break", place, f"graph break at {place}", bb[key].get("count"), b.get("count"))
    for key, b in bb.items():
        if key not in nb:
            place = _place(key[0], key[1])
            what = f"graph break gone at {place}: {b.get('reason')}"
            d.add("improvements", "graph_break", place, what, b.get("count"), None, reason=b.get("reason"))


# -- totals


def _counts(d: Diff, base: dict[str, Any], new: dict[str, Any]) -> None:
    for key, label in COUNTS.items():
        a, b = base["compile"].get(key), new["compile"].get(key)
        if a is None or b is None:
            continue
        verdict = _more_is_worse(a, b)
        d.add(verdict, "count", key, f"{label} {a} → {b}" if a != b else label, a, b)


def _caches(d: Diff, base: dict[str, Any], new: dict[str, Any]) -> None:
    for cache, label in CACHES.items():
        a, b = base["cache"].get(cache) or {}, new["cache"].get(cache) or {}
        for field in ("miss", "bypass", "hit"):
            x, y = a.get(field), b.get(field)
            if x is None or y is None:
                continue
            subject = f"{cache}.{field}"
            if x == y:
                d.add("unchanged", "cache", subject, f"{label} {field}es" if field != "hit" else f"{label} hits", x, y)
                continue
            word = {"miss": "misses", "bypass": "bypasses", "hit": "hits"}[field]
            what = f"{label} {word} {x} → {y}"
            if field == "hit":
                # fewer hits alone is no regression (fewer compiles asked); more is one cache working
                d.add("improvements" if y > x else "changed", "cache", subject, what, x, y)
            else:
                d.add(_more_is_worse(x, y), "cache", subject, what, x, y)


# -- compile time


def _compile_time(d: Diff, base: dict[str, Any], new: dict[str, Any]) -> None:
    total = _paired(base, new, lambda c: c.get("time_s"))
    _time_entry(d, "total", "compile time", base["compile"]["total_time_s"], new["compile"]["total_time_s"], total)
    getters: dict[str, Callable[[dict[str, Any]], float | None]] = {
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
        label = PHASE_LABELS.get(phase, phase)
        _time_entry(d, f"traced:{phase}", f"compile time in {label}", bt.get(phase, 0.0), nt.get(phase, 0.0), [])


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None else a - (b or 0.0)


def _paired(base: dict[str, Any], new: dict[str, Any], get: Callable[[dict[str, Any]], float | None]) -> list[float]:
    """NEW over BASE for each compile that pairs up: the same frame's k-th
    compile in both runs (compile ids differ between runs; frames do not)."""

    def by_frame(run: dict[str, Any]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
        keys = {f["frame_id"]: _frame_key(f, run) for f in run["frames"]}
        out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
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
    extra: dict[str, Any] = {"ratio_ci": ci, "paired": len(ratios)}
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


def _step_time(d: Diff, base: dict[str, Any], new: dict[str, Any]) -> None:
    bs, ns = base.get("steps") or {}, new.get("steps") or {}
    for q in ("p50", "p90"):
        a, b = bs.get(f"{q}_ms"), ns.get(f"{q}_ms")
        subject, label = f"step_{q}", f"steady step time {q}"
        if a is None or b is None:
            if a is not None or b is not None:
                d.add("changed", "step_time", subject, f"{label}: measured in one run only", a, b)
            continue
        sa, sb = bs.get(f"blocks_{q}_ms") or [], ns.get(f"blocks_{q}_ms") or []
        spread = max(_spread(sa) or 0.0, _spread(sb) or 0.0)
        ca, cb = _interval(sa), _interval(sb)
        change = b / a - 1 if a > 0 else math.inf
        over = max(CLOSE, spread)
        apart = ca is not None and cb is not None and (cb[0] > ca[1] or cb[1] < ca[0])
        extra = {"change_pct": round(100 * change, 2), "noise_pct": round(100 * over, 2), "base_ci": ca, "new_ci": cb}
        what = f"{label} {ms_sig(a)} → {ms_sig(b)} ({change:+.1%}; noise ±{over:.1%})"
        if abs(change) > over and apart:
            d.add("regressions" if change > 0 else "improvements", "step_time", subject, what, a, b, **extra)
        else:
            why = "too few steady steps to tell" if ca is None or cb is None else f"within noise ±{over:.1%}"
            d.add("unchanged", "step_time", subject, f"{label} ({ms_sig(a)} → {ms_sig(b)}, {why})", a, b, **extra)


def _gpu_memory(d: Diff, base: dict[str, Any], new: dict[str, Any]) -> None:
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


# -- versions and settings


def _settings(d: Diff, base: dict[str, Any], new: dict[str, Any]) -> None:
    for key, a in base["versions"].items():
        b = new["versions"].get(key)
        _setting(d, "version", key, key, a, b)
    ca, cb = base.get("config") or {}, new.get("config") or {}
    if ca and cb:  # a run that recorded no settings (a TORCH_TRACE) says nothing of them
        for key in sorted(set(ca) | set(cb)):
            _setting(d, "config", key, f"torch._dynamo.config.{key}", ca.get(key), cb.get(key))
    calls_a = {(relative(c.get("file"), base), c.get("line")): c for c in base.get("compile_calls") or []}
    for c in new.get("compile_calls") or []:
        old = calls_a.get((relative(c.get("file"), new), c.get("line")))
        if old is None:
            continue
        place = _place(relative(c.get("file"), new), c.get("line"))
        for key in ("backend", "mode", "dynamic", "fullgraph"):
            _setting(d, "compile_call", f"{place}:{key}", f"torch.compile at {place}: {key}", old.get(key), c.get(key))


def _setting(d: Diff, kind: str, subject: str, label: str, a: Any, b: Any) -> None:
    if a is None or b is None:
        return  # not known of one run (a TORCH_TRACE has no versions): no difference can be said
    if a == b:
        d.add("unchanged", kind, subject, label, a, b)
    else:
        d.add("changed", kind, subject, f"{label} {_v(a)} → {_v(b)}", a, b)


def _v(x: Any) -> str:
    return str(x)
