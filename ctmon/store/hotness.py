"""Where step time went, per compiled frame, from the agent's samples of the
main thread (ctmon/agent/hotness.py): in compiled graphs, in the eager code
between them (around graph breaks), or elsewhere. Host time, sampled: a
share is a count of samples over the samples taken while the job stepped."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctmon.store.compiles import Frame
    from ctmon.wire import events as E

MIN_SAMPLES = 20  # fewer: no share is said (one sample is ~250 ms)
FRAMES_MAX = 2000

CodeKey = tuple[str, int, str]


class HotnessState:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.frames: dict[CodeKey, list[int]] = {}  # code (file, first line, name) -> [graph, glue] samples
        self.interval_s: float | None = None

    def on_hotness(self, ev: E.Hotness) -> None:
        for k, n in ev.counts.items():
            if k in ("graph", "glue", "other", "compiling") and n > 0:
                self.counts[k] += n
        for file, line, name, graph, glue in ev.frames:
            row = self.frames.get((file, line, name))
            if row is None:
                if len(self.frames) >= FRAMES_MAX:
                    continue
                row = self.frames[(file, line, name)] = [0, 0]
            row[0] += max(0, graph)
            row[1] += max(0, glue)
        if ev.interval_s:
            self.interval_s = ev.interval_s

    def add(self, other: HotnessState) -> None:
        self.counts.update(other.counts)

    @property
    def samples(self) -> int:
        """Samples while the job stepped, compiling left out."""
        c = self.counts
        return c["graph"] + c["glue"] + c["other"]

    def share(self, what: str) -> float | None:
        n = self.samples
        return round(self.counts[what] / n, 4) if n >= MIN_SAMPLES else None

    def frame_runtime(self, frame: Frame) -> dict[str, Any] | None:
        """A compiled frame's share of step time in its graphs and in its eager glue."""
        n = self.samples
        code = frame.code
        if n < MIN_SAMPLES or not code.file or code.line is None or not code.name:
            return None
        row = self.frames.get((code.file, code.line, code.name))
        graph, glue = row if row is not None else (0, 0)
        return {"share": round(graph / n, 4), "glue_share": round(glue / n, 4), "samples": graph + glue}
