"""CUDA graphs of ``mode="reduce-overhead"``: what PyTorch's CUDA-graph trees
warmed up, recorded and replayed (``cudagraph_tree`` events,
ctmon/agent/cudagraphs.py).

A graph the trees run is warmed up once (an eager run), recorded on its next
call, and replayed after that; a graph with dynamic shapes is all of this
once per distinct set of sizes. Skips (graphs the trees never take) are
``cudagraph`` events, counted in ``CompileState.cudagraph_skips``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ctmon.wire import events_compile as EC

MAX_RUNS = 20_000  # warm-ups and recordings kept for step attribution (the counts go on)
MAX_SIZES = 16  # distinct input sizes kept per graph
MAX_RUN_S = 3600.0  # a warm-up or recording longer than this is a clock's error, not a graph's

WARMUP = "warmup"
RECORD = "record"
COUNTS = "counts"


@dataclass(slots=True)
class GraphRun:
    """One warm-up or recording."""

    event: str
    t: float
    dur_s: float
    compile_id: str | None
    graph: str | None
    function_id: int | None
    shapes: list[list[int]]
    ints: list[int]
    again: bool = False  # a recording of a function the trees had recorded before

    @property
    def span(self) -> tuple[float, float]:
        return (self.t, self.t + self.dur_s)

    @property
    def sizes(self) -> str:
        return sizes_text(self.shapes, self.ints)


def sizes_text(shapes: list[list[int]], ints: list[int]) -> str:
    """``16×64, 16`` for inputs of shape (16, 64) and (16,); the int inputs
    (a dynamic graph's sizes) when no tensor shape was seen."""
    if shapes:
        return ", ".join("×".join(str(d) for d in s) if s else "scalar" for s in shapes[:3])
    return ", ".join(str(i) for i in ints[:3]) or "no inputs"


@dataclass
class GraphRecordings:
    """What the trees did with one compile's graph (its forward, backward or inference graph)."""

    compile_id: str | None
    graph: str | None
    warmups: int = 0
    recordings: int = 0
    again: int = 0  # recordings of a function recorded before
    record_s: float = 0.0
    warmup_s: float = 0.0
    functions: set[tuple[int | None, int | None]] = field(default_factory=set)  # (device, function id)
    sizes: list[str] = field(default_factory=list)  # distinct input sizes recorded, in order
    dynamic: bool = False  # int inputs: a graph with dynamic shapes, recorded once per size
    first_record_t: float | None = None
    # The functions recorded for the graph's first size key (its int inputs:
    # ``cudagraphify_impl`` makes one set of functions per key). More than
    # one where Inductor partitioned the graph: each partition is recorded.
    first_key: tuple[int, ...] | None = None
    first_functions: set[tuple[int | None, int | None]] = field(default_factory=set)


class CudagraphState:
    def __init__(self) -> None:
        self.runs: list[GraphRun] = []  # the first MAX_RUNS warm-ups and recordings, in order
        self.graphs: dict[tuple[str | None, str | None], GraphRecordings] = {}
        self.warmups = 0
        self.recordings = 0
        self.again = 0
        self.warmup_s = 0.0
        self.record_s = 0.0
        self.replays = 0
        self.eager = 0
        self.counted = False  # the agent sent its counts (replays are known only then)
        self._counted = (0, 0)  # the agent's own counts of warm-ups and recordings (events may be dropped)
        self._recorded: set[tuple[int | None, int | None]] = set()

    def on_event(self, ev: EC.CudagraphTree) -> GraphRun | None:
        if ev.event == COUNTS:
            self.counted = True
            self.replays = max(self.replays, ev.replays or 0)
            self.eager = max(self.eager, ev.eager or 0)
            self._counted = (max(self._counted[0], ev.warmups or 0), max(self._counted[1], ev.recordings or 0))
            return None
        if ev.event not in (WARMUP, RECORD):
            return None
        key = (ev.device, ev.function_id)
        again = ev.event == RECORD and ev.function_id is not None and key in self._recorded
        dur = min(max(0.0, ev.dur_s or 0.0), MAX_RUN_S)
        run = GraphRun(ev.event, ev.t, dur, ev.compile_id, ev.graph, ev.function_id, ev.shapes, ev.ints, again)
        if len(self.runs) < MAX_RUNS:
            self.runs.append(run)
        g = self.graphs.get((ev.compile_id, ev.graph))
        if g is None:
            g = self.graphs[(ev.compile_id, ev.graph)] = GraphRecordings(ev.compile_id, ev.graph)
        g.dynamic = g.dynamic or bool(ev.ints)
        if ev.event == WARMUP:
            self.warmups += 1
            self.warmup_s += run.dur_s
            g.warmups += 1
            g.warmup_s += run.dur_s
            return run
        self._recorded.add(key)
        self.recordings += 1
        self.record_s += run.dur_s
        self.again += again
        g.recordings += 1
        g.again += again
        g.record_s += run.dur_s
        g.functions.add(key)
        if g.first_record_t is None:
            g.first_record_t, g.first_key = ev.t, tuple(ev.ints)
        if tuple(ev.ints) == g.first_key:
            g.first_functions.add(key)
        size = run.sizes
        if size not in g.sizes and len(g.sizes) < MAX_SIZES:
            g.sizes.append(size)
        return run

    # ---- derived ----

    @property
    def seen(self) -> bool:
        return bool(self.graphs) or self.calls > 0

    @property
    def warmups_total(self) -> int:
        return max(self.warmups, self._counted[0])

    @property
    def recordings_total(self) -> int:
        return max(self.recordings, self._counted[1])

    @property
    def calls(self) -> int:
        """Calls of the trees' graphs: replayed, recorded, warmed up, or run
        eagerly during a warm-up."""
        return self.replays + self.eager + self.warmups_total + self.recordings_total

    @property
    def coverage(self) -> float | None:
        """The share of the trees' graph calls that were replays, where known
        (the agent sends the replays; a recording made before it did has none)."""
        calls = self.calls
        if not self.counted or calls == 0:
            return None
        return self.replays / calls
