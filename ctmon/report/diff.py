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

import os
import re
from collections.abc import Mapping

from ctmon.report.bench import CLOSE, _gpu_peak
from ctmon.report.diff_cache_keys import cache_key_records, cache_keys
from ctmon.report.diff_entries import Diff, frame_key, more_is_worse, place, relative
from ctmon.report.diff_model import (
    BreakKey,
    CompileCall,
    DiffDoc,
    DiffEntry,
    FrameKey,
    ModuleSettings,
    Place,
    Ran,
    RunSummary,
    Side,
)
from ctmon.report.diff_timing import (
    BLOCKS,
    COMPILE_CLOSE,
    COMPILE_MIN_S,
    MEMORY_MIN_BYTES,
    compile_time,
    gpu_memory,
    steady_blocks,
    step_time,
)
from ctmon.report.model import Fields, Frame, GraphBreak, Report, cache_results
from ctmon.store import Session
from ctmon.words.labels import CACHE_NAMES

DIFF_VERSION = 1
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


def run_summary(path: str, session: Session, report: Report) -> RunSummary:
    """What the comparison reads of one run: the report's compile side, and
    what only the store has (steady steps in blocks, settings in force)."""
    cs = session.compile
    settings = cs.settings_in_force()
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
            **(settings[0] if settings is not None else {}),
        },
        "module_settings": _module_settings_of(settings),
        "compile_calls": [_compile_call(c) for c in report["compile_calls"]],
        "compile": report["compile"],
        "cache": report["cache"],
        "frames": report["frames"],
        "compiles": report["compiles"],
        "graph_breaks": report["graph_breaks"],
        "steps": steady_blocks(session),
        "gpu_mem_peak_bytes": _gpu_peak(session),
        "notes": report["notes"],
        "cache_keys": cache_key_records(cs),
    }


def _module_settings_of(
    settings: tuple[Mapping[str, object], Mapping[str, object], list[str]] | None,
) -> ModuleSettings | None:
    """What a run summary keeps of a run's Inductor and AOTAutograd settings
    beside their values (which go in ``config``); None: none recorded."""
    if settings is None:
        return None
    return {"defaults": dict(settings[1]), "mixed": list(settings[2])}


def _compile_call(c: Fields) -> CompileCall:
    """A torch.compile call's place and the arguments a diff sets beside the other run's."""
    return {
        "file": c.get("file"),
        "line": c.get("line"),
        "backend": c.get("backend"),
        "mode": c.get("mode"),
        "dynamic": c.get("dynamic"),
        "fullgraph": c.get("fullgraph"),
    }


NEW_SINCE_BASE_KINDS = ("limit_hit", "graph_break", "recompile", "frame")


def is_new_since_base(entry: DiffEntry) -> bool:
    """A break site, recompile reason, frame or limit hit NEW has and BASE
    had not (not one whose count only changed)."""
    return (
        entry["kind"] in NEW_SINCE_BASE_KINDS and entry["base"] in (None, False) and entry["new"] not in (None, False)
    )


def same_job(base: Ran, new: Ran) -> str | None:
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


def compare(base: RunSummary, new: RunSummary) -> DiffDoc:
    """The diff of two run summaries (``run_summary``), as ``--json`` prints it."""
    d = Diff()
    _limit_hits(d, base, new)
    _graph_breaks(d, base, new)
    _frames(d, base, new)
    _counts(d, base, new)
    compile_time(d, base, new)
    _caches(d, base, new)
    cache_keys(d, base, new)
    step_time(d, base, new)
    gpu_memory(d, base, new)
    _settings(d, base, new)
    return {
        "diff_version": DIFF_VERSION,
        "base": _side(base),
        "new": _side(new),
        **d.ordered(),  # regressions, improvements, changed, unchanged
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


def _side(run: RunSummary) -> Side:
    side: Side = {
        "path": run.get("path"),
        "input": run.get("input"),
        "command": run.get("command"),
        "session_id": run.get("session_id"),
    }
    if len(run.get("paths") or []) > 1:
        side["paths"] = list(run.get("paths") or [])
    return side


# -- frames, recompiles, the limit


def _at(key: FrameKey | BreakKey) -> Place:
    """Where an entry new since BASE is (its file relative to the job's
    working directory): for the findings of NEW at that place."""
    return {"file": key[0], "line": key[1]}


def _frame_title(f: Frame, run: RunSummary) -> str:
    return f"{f.get('name')} ({place(relative(f.get('file'), run), f.get('line'))})"


def _reasons(f: Frame) -> list[str]:
    """A frame's recompile reasons without the compile id each begins with
    (the ids are not the same in two runs)."""
    out: list[str] = []
    for r in f.get("recompile_reasons") or []:
        text = _COMPILE_ID.sub("", str(r)).strip()
        if text not in out:
            out.append(text)
    return out


def _frames(d: Diff, base: RunSummary, new: RunSummary) -> None:
    bf = {frame_key(f, base): f for f in base["frames"]}
    nf = {frame_key(f, new): f for f in new["frames"]}
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
        verdict = more_is_worse(old["compiles"], f["compiles"])
        what = f"{title}: {old['compiles']} → {f['compiles']} compiles"
        d.add(
            verdict, "frame_compiles", title, what if verdict != "unchanged" else title, old["compiles"], f["compiles"]
        )
    for key, f in bf.items():
        if key not in nf:
            title = _frame_title(f, base)
            d.add("improvements", "frame", title, f"{title} is compiled in BASE only", f["compiles"], None)


def _limit_hits(d: Diff, base: RunSummary, new: RunSummary) -> None:
    bf = {frame_key(f, base): f for f in base["frames"]}
    for f in new["frames"]:
        old = bf.get(frame_key(f, new))
        was = bool(old and old.get("limit_hit"))
        if f.get("limit_hit") and not was:
            title = _frame_title(f, new)
            limit = f.get("recompile_limit")
            what = f"{title} now hits the recompile limit ({limit}) and runs eager"
            d.add("regressions", "limit_hit", title, what, False, True, **_at(frame_key(f, new)))
    nf = {frame_key(f, new): f for f in new["frames"]}
    for f in base["frames"]:
        now = nf.get(frame_key(f, base))
        if f.get("limit_hit") and not (now and now.get("limit_hit")):
            title = _frame_title(f, base)
            d.add("improvements", "limit_hit", title, f"{title} no longer hits the recompile limit", True, False)


# -- graph breaks


def _break_key(b: GraphBreak, run: RunSummary) -> BreakKey:
    return (relative(b.get("file"), run), b.get("line"), b.get("reason"))


def _graph_breaks(d: Diff, base: RunSummary, new: RunSummary) -> None:
    bb = {_break_key(b, base): b for b in base["graph_breaks"]}
    nb = {_break_key(b, new): b for b in new["graph_breaks"]}
    for key, b in nb.items():
        at = place(key[0], key[1])
        if key not in bb:
            what = f"new graph break at {at}: {b.get('reason')} ({b.get('count')}×)"
            d.add("regressions", "graph_break", at, what, None, b.get("count"), reason=b.get("reason"), **_at(key))
        else:
            d.add("unchanged", "graph_break", at, f"graph break at {at}", bb[key].get("count"), b.get("count"))
    for key, b in bb.items():
        if key not in nb:
            at = place(key[0], key[1])
            what = f"graph break gone at {at}: {b.get('reason')}"
            d.add("improvements", "graph_break", at, what, b.get("count"), None, reason=b.get("reason"))


# -- totals


def _counts(d: Diff, base: RunSummary, new: RunSummary) -> None:
    for key, label in COUNTS.items():
        a, b = _count(base, key), _count(new, key)
        if a is None or b is None:
            continue
        verdict = more_is_worse(a, b)
        d.add(verdict, "count", key, f"{label} {a} → {b}" if a != b else label, a, b)


def _count(run: RunSummary, key: str) -> float | None:
    """One of COUNTS of a run (None: the run's summary has none)."""
    counts: Mapping[str, object] = run["compile"]
    return _number(counts.get(key))


def _number(value: object) -> float | None:
    return value if isinstance(value, (int, float)) else None


def _caches(d: Diff, base: RunSummary, new: RunSummary) -> None:
    for cache, label in CACHES.items():
        a, b = cache_results(base["cache"], cache), cache_results(new["cache"], cache)
        for field in ("miss", "bypass", "hit"):
            x, y = _number(a.get(field)), _number(b.get(field))
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
                d.add(more_is_worse(x, y), "cache", subject, what, x, y)


# -- versions and settings


def _settings(d: Diff, base: RunSummary, new: RunSummary) -> None:
    for key, a in base["versions"].items():
        b = new["versions"].get(key)
        _setting(d, "version", key, key, a, b)
    ca, cb = base.get("config") or {}, new.get("config") or {}
    if ca and cb:  # a run that recorded no settings (a TORCH_TRACE) says nothing of them
        for key in sorted(set(ca) | set(cb)):
            if not key.startswith(MODULE_SETTING):
                _setting(d, "config", key, f"torch._dynamo.config.{key}", ca.get(key), cb.get(key))
    _module_settings(d, base, new)
    calls_a = {(relative(c.get("file"), base), c.get("line")): c for c in base.get("compile_calls") or []}
    for c in new.get("compile_calls") or []:
        old = calls_a.get((relative(c.get("file"), new), c.get("line")))
        if old is None:
            continue
        at = place(relative(c.get("file"), new), c.get("line"))
        for key in ("backend", "mode", "dynamic", "fullgraph"):
            _setting(d, "compile_call", f"{at}:{key}", f"torch.compile at {at}: {key}", old.get(key), c.get(key))


MODULE_SETTING = "torch."  # an Inductor or AOTAutograd setting's key in ``config`` (a Dynamo one's has no module)


def _module_settings(d: Diff, base: RunSummary, new: RunSummary) -> None:
    """The Inductor and AOTAutograd settings, where both runs recorded them:
    a run's ``config`` lists those not at their defaults, so one the other
    run lists and it does not is at its default there (its value: the
    default the records name; "default" where the environment set it)."""
    ma, mb = base.get("module_settings"), new.get("module_settings")
    if not ma or not mb:
        return  # an older recording, or a TORCH_TRACE: no false "changed"
    ca, cb = base.get("config") or {}, new.get("config") or {}
    defaults = {**ma["defaults"], **mb["defaults"]}
    mixed = set(ma["mixed"]) | set(mb["mixed"])
    for key in sorted(k for k in set(ca) | set(cb) if k.startswith(MODULE_SETTING) and k not in mixed):
        a, b = ca.get(key, defaults.get(key)), cb.get(key, defaults.get(key))
        if (key in ca) == (key in cb) and a == b and type(a) is type(b):
            d.add("unchanged", "config", key, key, a, b)
        else:
            what = f"{key}: {_v_or_default(key, a, ca)} → {_v_or_default(key, b, cb)}"
            d.add("changed", "config", key, what, a, b)


def _v_or_default(key: str, value: object, config: Mapping[str, object]) -> str:
    if key in config:
        return _v(value)
    return "default" if value is None else f"{_v(value)} (default)"


def _setting(d: Diff, kind: str, subject: str, label: str, a: object, b: object) -> None:
    if a is None or b is None:
        return  # not known of one run (a TORCH_TRACE has no versions): no difference can be said
    if a == b:
        d.add("unchanged", kind, subject, label, a, b)
    else:
        d.add("changed", kind, subject, f"{label} {_v(a)} → {_v(b)}", a, b)


def _v(x: object) -> str:
    return str(x)
