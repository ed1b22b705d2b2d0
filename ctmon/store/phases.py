"""PyTorch's own compile-phase timers (``compile_phase`` events, see
ctmon/agent/phases.py), folded: seconds per phase over all compiles (nested
phases each count whole), the spans themselves for timelines, and the
backward graphs being compiled now -- a rank compiling its backward (lazily,
at its first backward) is compiling, not stalled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctmon.wire import events_compile as EC

SPANS_MAX = 20_000


@dataclass(slots=True)
class PhaseSpan:
    """One phase of one compile (epoch seconds)."""

    compile_id: str
    phase: str
    start: float
    end: float


class PhaseTimers:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.spans: list[PhaseSpan] = []  # the first SPANS_MAX
        self.backward_open: dict[str, float] = {}  # compile id -> when its backward compile began
        self._open: dict[tuple[str, str], float] = {}

    def on_phase(self, ev: EC.CompilePhase) -> None:
        cid = str(ev.compile_id)
        key = (cid, ev.phase)
        if ev.ph == "B":
            self._open[key] = ev.t
            if ev.phase == "backward":
                self.backward_open[cid] = ev.t
            return
        start = self._open.pop(key, None)
        if ev.phase == "backward":
            self.backward_open.pop(cid, None)
        if start is None:
            return
        self.seconds[ev.phase] = self.seconds.get(ev.phase, 0.0) + max(0.0, ev.t - start)
        if len(self.spans) < SPANS_MAX:
            self.spans.append(PhaseSpan(cid, ev.phase, start, ev.t))

    def backward_done(self, compile_id: str) -> None:
        """The backward graph's metrics arrived: its compile is over, whatever its timer said."""
        self.backward_open.pop(compile_id, None)
