"""``ctmon diff BENCH_A BENCH_B``: two ``ctmon bench`` outputs, mode by mode.

A bench output holds one recording per mode and run (ctmon/read/inputs.py
tells one apart). The modes both ran pair up by name, and each pair is
compared as two runs are (ctmon/report/diff.py): counts, settings and
compile time from each mode's first run (the cold one, on a fresh compile
cache: bench's later runs reuse it), and steady step time from every run.
Where a mode ran twice or more, each run's steady p50 (and p90) is one
sample -- the process-to-process spread bench itself judges a speed-up by
-- and the mode's figure is their median; a mode run once has only its own
steps, cut into blocks as for any one run.

The JSON keeps the one-run diff whole under ``modes`` and lists every
mode's entries again at the top level, each naming its ``mode``, so that
``regressions`` means what it means for two runs (``--fail``)."""

from __future__ import annotations

import statistics

from ctmon.report.diff import METHOD, compare
from ctmon.report.diff_model import (
    BenchDiffDoc,
    BenchEntry,
    DiffDoc,
    DiffEntry,
    NotRead,
    RunSummary,
    Side,
    StepBlocks,
)
from ctmon.report.diff_timing import BLOCKS

VERDICTS = ("regressions", "improvements", "changed", "unchanged")
BENCH_METHOD = {
    "modes": "each mode both outputs hold, compared as two runs: counts, settings and compile time from its first "
    "run (a fresh compile cache), step time from all its runs",
    **METHOD,
    "step_time": (
        "a mode run 2 or more times: each run's steady p50 (p90) is one sample, as ctmon bench takes them, and the "
        f"mode's figure their median; run once: its steady steps in up to {BLOCKS} blocks. Then as for two runs: "
        "a change is called when it exceeds 5 % and both sides' own spread and their 95 % intervals do not overlap"
    ),
}


def bench_steps(first: StepBlocks, runs: list[StepBlocks]) -> StepBlocks:
    """A mode's steady step times for the comparison: its runs' p50 and p90
    as the samples where two or more runs measured any; else the first
    run's own blocks."""
    measured = [r for r in runs if r.get("p50_ms") is not None and r.get("p90_ms") is not None]
    if len(measured) < 2:
        return first
    p50s = [float(r["p50_ms"] or 0.0) for r in measured]
    p90s = [float(r["p90_ms"] or 0.0) for r in measured]
    return {
        "steady": sum(r["steady"] for r in measured),
        "device_timed": any(r.get("device_timed") for r in measured),
        "runs": len(measured),
        "p50_ms": round(statistics.median(p50s), 4),
        "p90_ms": round(statistics.median(p90s), 4),
        "blocks_p50_ms": p50s,
        "blocks_p90_ms": p90s,
    }


def compare_benches(
    base: dict[str, RunSummary],
    new: dict[str, RunSummary],
    sides: tuple[Side, Side],
    not_read: list[NotRead],
) -> BenchDiffDoc:
    """One diff per mode both hold (in bench's order, BASE's), the modes
    one side alone holds named, and every entry again at the top level."""
    modes = {m: compare(base[m], new[m]) for m in base if m in new}
    flat: dict[str, list[BenchEntry]] = {v: [] for v in VERDICTS}
    for mode, doc in modes.items():
        for verdict, entries in _verdicts(doc):
            flat[verdict] += [{**e, "mode": mode} for e in entries]
    flat["regressions"] += _unread_in_new(base, not_read)
    return {
        "diff_version": next(iter(modes.values()))["diff_version"] if modes else 1,
        "input": "bench",
        "base": sides[0],
        "new": sides[1],
        "modes": modes,
        "only_base": [m for m in base if m not in new],
        "only_new": [m for m in new if m not in base],
        "not_read": not_read,
        "regressions": flat["regressions"],
        "improvements": flat["improvements"],
        "changed": flat["changed"],
        "unchanged": flat["unchanged"],
        "method": BENCH_METHOD,
    }


def _verdicts(doc: DiffDoc) -> list[tuple[str, list[DiffEntry]]]:
    return [
        ("regressions", doc["regressions"]),
        ("improvements", doc["improvements"]),
        ("changed", doc["changed"]),
        ("unchanged", doc["unchanged"]),
    ]


def _unread_in_new(base: dict[str, RunSummary], not_read: list[NotRead]) -> list[BenchEntry]:
    """A mode BASE measured whose run in NEW cannot be read: nothing of it
    can be compared, and that is itself a regression (a CI gate must not
    pass a bench whose mode stopped recording)."""
    out: list[BenchEntry] = []
    for n in not_read:
        if n["side"] == "new" and n["mode"] in base:
            what = f"{n['mode']}: NEW's first run cannot be read ({n['why']})"
            out.append(
                {"mode": n["mode"], "kind": "mode", "subject": n["mode"], "what": what, "base": True, "new": None}
            )
    return out
