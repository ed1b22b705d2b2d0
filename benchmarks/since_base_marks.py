"""What "new since BASE" costs the screen in a compile storm.

The live screen with ``--baseline`` marks each finding whose place is new
since BASE (ctmon/findings/since_base.py). Its work runs once per run of the
rules and is cached between repaints; this measures both on a synthetic
storm (jobs/recordings.py: recompiles over 400 frames, graph breaks at 300
sites) against an empty BASE, where every place is new (the most marking).

Usage: python benchmarks/since_base_marks.py [--events 100000] [--repeats 7]
Prints the median and range of: the rules (findings_of), the marks after a
run of the rules, and the marks on a repaint (cached).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from jobs.recordings import storm_events  # noqa: E402

from ctmon.findings.current import findings_of  # noqa: E402
from ctmon.findings.model import Finding  # noqa: E402
from ctmon.findings.since_base import BaseFacts, SinceBase  # noqa: E402
from ctmon.store import Session  # noqa: E402
from ctmon.wire.decode import typed  # noqa: E402


def _ms(seconds: list[float]) -> str:
    ms = sorted(s * 1e3 for s in seconds)
    return f"{statistics.median(ms):.2f} ms [{ms[0]:.2f}, {ms[-1]:.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    events = [e for e in map(typed, storm_events(args.events)) if e is not None]
    rules, first, again = [], [], []
    found: list[Finding] = []
    for _ in range(args.repeats):
        session = Session().apply_all(events)  # a fresh store: findings_of's cache starts empty
        t = time.perf_counter()
        found = list(findings_of(session))
        rules.append(time.perf_counter() - t)
        since = SinceBase(BaseFacts("base.jsonl"))
        t = time.perf_counter()
        marked = [since.marks_of(f, found, session) for f in found]
        first.append(time.perf_counter() - t)
        t = time.perf_counter()
        [since.marks_of(f, found, session) for f in found]
        again.append(time.perf_counter() - t)
    print(
        f"{args.events} events: {len(session.compile.compiles)} compiles, {len(found)} findings, "
        f"{sum(1 for m in marked if m)} marked"
    )
    print(f"rules (findings_of):            {_ms(rules)}")
    print(f"marks after a run of the rules: {_ms(first)}")
    print(f"marks on a repaint (cached):    {_ms(again)}")


if __name__ == "__main__":
    main()
