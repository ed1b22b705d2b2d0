"""The agent's sender thread wakes half as often while the step clock counts
a host-bound loop's steps (each wake costs such a loop a few hundred µs of
its own, docs/PERFORMANCE.md), with the hotness sampler or without it."""

from __future__ import annotations

import time
import types

import pytest

from ctmon.agent import channel as channel_mod
from ctmon.agent.channel import COUNTING_STRIDE, FLUSH_INTERVAL_S, Channel


class _Wake:
    """The sender's wait, on the test's clock: a wait passes its whole
    timeout; the last of ``wakes`` stops the sender (so ``wakes - 1`` flushes)."""

    def __init__(self, ch: Channel, now: list[float], wakes: int) -> None:
        self.ch, self.now, self.left = ch, now, wakes

    def wait(self, timeout: float) -> bool:
        self.now[0] += timeout
        self.left -= 1
        if self.left <= 0:
            self.ch._stop = True
        return False

    def clear(self) -> None:
        pass

    def set(self) -> None:
        pass


def _sender(monkeypatch: pytest.MonkeyPatch, wakes: int) -> tuple[Channel, list[float], list[bool]]:
    now = [100.0]
    monkeypatch.setattr(channel_mod, "time", types.SimpleNamespace(monotonic=lambda: now[0], time=time.time))
    ch = Channel(None)
    counting = [False]
    ch.counting = lambda: counting[0]
    ch._wake = _Wake(ch, now, wakes)  # type: ignore[assignment]
    return ch, now, counting


def _gaps(at: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in zip(at, at[1:], strict=False)]


def test_the_sampler_s_pace_doubles_while_the_clock_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    ch, now, counting = _sender(monkeypatch, 8)
    ticks: list[float] = []

    def tick() -> float:
        ticks.append(now[0])
        counting[0] = 3 <= len(ticks) < 6  # a counting stretch from the third sample to the sixth
        return 0.25

    ch.tick = tick
    ch._run()
    assert _gaps(ticks) == [0.25, 0.25] + [0.25 * COUNTING_STRIDE] * 3 + [0.25]


def test_without_the_sampler_the_flushes_slow_down_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    ch, now, counting = _sender(monkeypatch, 7)
    flushes: list[float] = []

    def periodic() -> list[object]:
        flushes.append(now[0])
        counting[0] = len(flushes) >= 3
        return []

    ch.periodic = periodic  # type: ignore[assignment]
    ch._run()
    assert _gaps(flushes) == [FLUSH_INTERVAL_S, FLUSH_INTERVAL_S] + [FLUSH_INTERVAL_S * COUNTING_STRIDE] * 3


def test_a_failing_question_leaves_the_pace_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    ch, now, _ = _sender(monkeypatch, 5)
    ch.counting = lambda: 1 // 0 == 0  # the clock gone wrong: the sender keeps its own pace
    flushes: list[float] = []
    ch.periodic = lambda: flushes.append(now[0]) or []  # type: ignore[assignment,func-returns-value]
    ch._run()
    assert _gaps(flushes) == [FLUSH_INTERVAL_S] * 3
