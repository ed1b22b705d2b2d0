"""Where step time went, per compiled frame, from the agent's samples of the
main thread (ctmon/agent/hotness.py): in compiled graphs, in the eager code
between them (around graph breaks), or elsewhere. Host time, sampled: a
share is a count of samples over the samples taken while the job stepped.

Where the agent timed the compiled graphs' calls (ctmon/agent/graph_calls.py),
a frame has its exact ``calls`` and its graphs' share is their time over
the time the samples stand for: a sample lands where the job's thread lets
the GIL go, which a small region's Python tail never does, so a timed share
is the truer one. Its glue share stays sampled."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctmon.store.compiles import Frame
    from ctmon.wire import events as E

MIN_SAMPLES = 20  # fewer: no share is said (one sample is ~250 ms)
FRAMES_MAX = 2000

CodeKey = tuple[str, int, str]


def _fold(table: dict[CodeKey, list[int]], key: CodeKey, a: int, b: int) -> None:
    """Add a frame's pair of counts (negatives read as 0); at most FRAMES_MAX frames."""
    row = table.get(key)
    if row is None:
        if len(table) >= FRAMES_MAX:
            return
        row = table[key] = [0, 0]
    row[0] += max(0, a)
    row[1] += max(0, b)


class HotnessState:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.frames: dict[CodeKey, list[int]] = {}  # code (file, first line, name) -> [graph, glue] samples
        self.interval_s: float | None = None
        self.timed = False  # the agent timed the graphs' calls
        self.graphs: dict[CodeKey, list[int]] = {}  # code -> [calls, host ns in ended steps]
        self.span_ns = 0  # the time the samples stand for: a timed share's whole

    def on_hotness(self, ev: E.Hotness) -> None:
        for k, n in ev.counts.items():
            if k in ("graph", "glue", "other", "compiling") and n > 0:
                self.counts[k] += n
        for file, line, name, graph, glue in ev.frames:
            _fold(self.frames, (file, line, name), graph, glue)
        if ev.interval_s:
            self.interval_s = ev.interval_s
        if ev.graphs is not None:
            self.timed = True
            self.span_ns += max(0, ev.span_ns)
            for file, line, name, calls, ns in ev.graphs:
                _fold(self.graphs, (file, line, name), calls, ns)

    @property
    def samples(self) -> int:
        """Samples while the job stepped, compiling left out."""
        c = self.counts
        return c["graph"] + c["glue"] + c["other"]

    @property
    def graphs_timed(self) -> bool:
        return self.timed and self.span_ns > 0

    def share(self, what: str) -> float | None:
        """Of ``graph``, ``glue``, ``other``: sampled, but where the graphs
        were timed, ``graph`` is their timed share plus the samples in graphs
        no frame ran (a compiled backward), and ``other`` the rest."""
        n = self.samples
        if n < MIN_SAMPLES:
            return None
        if not self.graphs_timed or what == "glue":
            return round(self.counts[what] / n, 4)
        framed = sum(row[0] for row in self.frames.values())
        unframed = max(0, self.counts["graph"] - framed)
        graph = min(1.0, sum(row[1] for row in self.graphs.values()) / self.span_ns + unframed / n)
        if what == "graph":
            return round(graph, 4)
        return round(max(0.0, 1.0 - graph - self.counts["glue"] / n), 4)

    def frame_runtime(self, frame: Frame) -> dict[str, Any] | None:
        """A compiled frame's calls, and its share of step time in its graphs
        and in its eager glue (None: too few samples to say). None when
        neither is known."""
        code = frame.code
        if not code.file or code.line is None or not code.name:
            return None
        key = (code.file, code.line, code.name)
        timed = self.graphs.get(key, [0, 0]) if self.timed else None
        n = self.samples
        graph, glue = self.frames.get(key, [0, 0])
        if n < MIN_SAMPLES:
            if timed is None:
                return None
            return {
                "calls": timed[0],
                "share": None,
                "glue_share": None,
                "samples": graph + glue,
                "timed": self.graphs_timed,
            }
        share = min(1.0, timed[1] / self.span_ns) if timed is not None and self.graphs_timed else graph / n
        return {
            "calls": None if timed is None else timed[0],
            "share": round(share, 4),
            "glue_share": round(glue / n, 4),
            "samples": graph + glue,
            "timed": self.graphs_timed,
        }
