"""The session's step sources: every step source's series, and which one is
'the' steps (the highest-ranked source seen; lower ones are kept only until
a higher one appears)."""

from __future__ import annotations

from ctmon.store.steps import MAX_NUMBERS, STARTS_A_STEP, StepSeries
from ctmon.wire import events as E
from ctmon.wire import protocol


def _first_start(s: StepSeries) -> float | None:
    """When the first step began, as a series replaced by a higher-ranked
    one saw it: known where one compiled call came before the first step
    ended (the loop's first forward). After several (a warm-up before the
    loop, or gradient accumulation's micro-batches) the step's start is
    not known. A series that ends steps passes on what it was told, where
    its one boundary ended the same first step."""
    if len(s.ns) != 1:
        return None
    return s.times[0] if s.source in STARTS_A_STEP else s.start_t


def _earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


class StepSources:
    """All step series of a session; the best-ranked one is 'the' steps."""

    def __init__(self) -> None:
        self.series: dict[str, StepSeries] = {}
        self.current: StepSeries | None = None
        # step numbers of a source whose boundaries have not come yet (they
        # travel apart: the numbers on the agent's socket, the boundaries by the ring)
        self._numbers: dict[str, list[tuple[int, int]]] = {}

    def _get(self, src: str) -> StepSeries:
        s = self.series.get(src)
        if s is None:
            s = self.series[src] = StepSeries(src)
            for i, n in self._numbers.pop(src, ()):
                s.add_number(i, n)
            cur = self.current
            if cur is None or protocol.STEP_RANK.get(src, -1) >= protocol.STEP_RANK.get(cur.source, -1):
                self.current = s
                # lower-ranked series are no longer needed
                for name in list(self.series):
                    if protocol.STEP_RANK.get(name, -1) < protocol.STEP_RANK.get(src, -1):
                        s.start_t = _earliest(s.start_t, _first_start(self.series.pop(name)))
        return s

    def on_number(self, ev: E.StepNumber) -> bool:
        """The job's own number of one step (see step_number)."""
        if ev.i < 0:
            return False
        s = self.series.get(ev.src)
        if s is not None:
            s.add_number(ev.i, ev.n)
            return True
        cur = self.current
        if ev.src not in protocol.STEP_RANK or (
            cur is not None and protocol.STEP_RANK[ev.src] < protocol.STEP_RANK.get(cur.source, -1)
        ):
            return False  # a source a higher-ranked one has replaced
        kept = self._numbers.setdefault(ev.src, [])
        if len(kept) < MAX_NUMBERS:
            kept.append((ev.i, ev.n))
        return True

    def on_steps(self, ev: E.Steps) -> bool:
        src = ev.src
        cur = self.current
        if cur is not None and src == cur.source and ev.i0 >= 0:  # the common case: the current source's next batch
            cur.add_batch(ev.i0, ev.t, ev.ns, True)
            return True
        rank = protocol.STEP_RANK.get(src)
        if rank is None or ev.i0 < 0:
            return False
        cur = self.current
        if cur is not None and rank < protocol.STEP_RANK.get(cur.source, -1):
            return False
        self._get(src).add_batch(ev.i0, ev.t, ev.ns, checked=True)
        return True

    def on_steps_run(self, run: list[E.Steps]) -> int:
        """Several ``steps`` events in a row; how many were taken. Stretches
        of the current source's own batches go in together, anything else one by one."""
        taken = 0
        i, n = 0, len(run)
        while i < n:
            cur = self.current
            if cur is None or run[i].src != cur.source:
                taken += self.on_steps(run[i])
                i += 1
                continue
            src = cur.source
            j = i
            while j < n and run[j].src == src:
                j += 1
            cur.add_batches(run[i:j])
            taken += j - i
            i = j
        return taken

    def on_device_time(self, ev: E.DeviceTime) -> bool:
        s = self.series.get(ev.src)
        if s is None:
            return False
        s.add_device_window(ev.i0, ev.i1, ev.ms)
        return True

    @property
    def count(self) -> int:
        return len(self.current) if self.current is not None else 0

    @property
    def source(self) -> str | None:
        return self.current.source if self.current is not None else None
