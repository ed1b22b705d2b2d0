"""Follow a recording while its job runs and print, with the time since the
job started, every change in what the ranks view shows (each rank's state
and detail, from ``rank_statuses``, the function the TUI's ranks view
draws) and every critical finding as soon as the store holds it.

For machines without a terminal to watch the TUI on (the GPU machine): the
same store and the same functions, read from the file the supervisor writes.

    python benchmarks/rank_states_follow.py REC.jsonl [--every 0.5] [--for 300]

Stops when the job has ended (or after --for seconds); the last lines show
the final states.
"""

from __future__ import annotations

import argparse
import os
import re
import time

from ctmon.report.load import load
from ctmon.store.findings import analyze
from ctmon.store.rank_status import rank_statuses
from ctmon.wire.errors import RecordingError


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recording")
    ap.add_argument("--every", type=float, default=0.5)
    ap.add_argument("--for", dest="limit", type=float, default=300.0)
    args = ap.parse_args()
    shown: dict[int, str] = {}
    critical: set[str] = set()
    t_end = time.time() + args.limit
    first: float | None = None
    while time.time() < t_end:
        time.sleep(args.every)
        if not os.path.exists(args.recording):
            continue
        try:
            s, _ = load(args.recording)
        except RecordingError:
            continue
        now = time.time()
        if first is None:
            first = s.first_t if s.first_t is not None else now
        at = f"{now - first:7.1f} s"
        for st in rank_statuses(s, now):
            line = f"{st.state} {st.detail}".strip()
            # Seconds tick in the detail: print a state when it changes, its
            # detail at most every 5 s.
            key = st.state + "|" + re.sub(r"\d+", "N", st.detail)
            if shown.get(st.rank, "").split("@")[0] != key or now - float(shown[st.rank].split("@")[1]) >= 5:
                shown[st.rank] = f"{key}@{now}"
                print(f"{at}  rank {st.rank}: {line}  (steps {st.steps}, compiles {st.compiles})", flush=True)
        for f in analyze(s):
            if f.severity == "critical" and f.id not in critical:
                critical.add(f.id)
                print(f"{at}  CRITICAL {f.title}", flush=True)
        if s.exit is not None:
            print(f"{at}  job ended: {s.exit}", flush=True)
            return


if __name__ == "__main__":
    main()
