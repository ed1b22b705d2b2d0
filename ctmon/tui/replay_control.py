"""Moving through a replay: step to the next compile or break, jump by a
tenth of the run, play at a chosen speed. The store shown is rebuilt from
the ``Timeline``'s checkpoints; the fully-loaded store stays as it is."""

from __future__ import annotations

from collections.abc import Callable

from textual.timer import Timer

from ctmon.store import Session
from ctmon.tui.context import ViewContext
from ctmon.tui.timeline import Timeline

PLAY_TICK_S = 0.1


class ReplayControl:
    def __init__(
        self,
        ctx: ViewContext,
        full: Session,
        timeline: Timeline | None,
        refresh: Callable[[], object],
        set_interval: Callable[..., Timer],
    ) -> None:
        self.ctx = ctx
        self.full = full
        self.timeline = timeline
        self._refresh = refresh
        self._set_interval = set_interval
        self._play_timer: Timer | None = None
        self._play_t = 0.0

    def _ok(self) -> bool:
        return self.timeline is not None and self.ctx.replay is not None and len(self.timeline) > 0

    def goto(self, position: int) -> None:
        tl, r = self.timeline, self.ctx.replay
        if tl is None or r is None:
            return
        position = max(0, min(position, len(tl)))
        current = self.ctx.session
        if position >= len(tl):
            session = self.full
        elif current is not self.full:
            session = tl.build(position, current, r.position)
        else:
            session = tl.build(position)
        r.position = position
        r.total = len(tl)
        if session is not current:
            self.ctx.session = session
            self.ctx.gen += 1
            self.ctx.gpu_error = None
        self._refresh()

    def step(self, direction: int) -> None:
        if not self._ok():
            return
        assert self.timeline is not None and self.ctx.replay is not None
        self._stop()
        pos = self.ctx.replay.position
        self.goto(self.timeline.next_mark(pos) if direction > 0 else self.timeline.prev_mark(pos))

    def jump(self, direction: int) -> None:
        if not self._ok():
            return
        tl, r = self.timeline, self.ctx.replay
        assert tl is not None and r is not None
        self._stop()
        start = tl.start_time() or 0.0
        end = tl.time_at(len(tl)) or start
        now = tl.time_at(r.position) or start
        target = now + direction * 0.1 * max(end - start, 1e-6)
        pos = tl.position_at_time(target)
        if direction < 0 and pos >= r.position:
            pos = max(0, r.position - 1)
        self.goto(pos)

    def play(self) -> None:
        if not self._ok():
            return
        tl, r = self.timeline, self.ctx.replay
        assert tl is not None and r is not None
        if r.playing:
            self._stop()
            self._refresh()
            return
        start = tl.start_time() or 0.0
        end = tl.time_at(len(tl)) or start
        if r.at_end:
            self.goto(0)
        self._play_t = tl.time_at(r.position) or start
        if r.speed == 1.0:
            r.speed = _nice_speed((end - start) / 30.0)
        r.playing = True
        self._play_timer = self._set_interval(PLAY_TICK_S, self._tick, name="play")
        self._refresh()

    def speed(self, factor: float) -> None:
        r = self.ctx.replay
        if r is None:
            return
        r.speed = min(10000.0, max(0.25, r.speed * factor))
        self._refresh()

    def _tick(self) -> None:
        tl, r = self.timeline, self.ctx.replay
        if tl is None or r is None or not r.playing:
            return
        self._play_t += PLAY_TICK_S * r.speed
        pos = tl.position_at_time(self._play_t)
        if pos >= len(tl):
            self._stop()
            self.goto(len(tl))
        elif pos != r.position:
            self.goto(pos)

    def _stop(self) -> None:
        r = self.ctx.replay
        if r is not None:
            r.playing = False
        if self._play_timer is not None:
            self._play_timer.stop()
            self._play_timer = None


def _nice_speed(x: float) -> float:
    if x <= 1:
        return 1.0
    for base in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000):
        if base >= x:
            return float(base)
    return 10000.0
