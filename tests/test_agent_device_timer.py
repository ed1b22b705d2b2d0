"""The device timer (ctmon/agent/device_timer.py) through its event seam: what a
CUDA event does, played by a fake whose 'device' finishes when told, on a
fake host clock that a record moves on by what it costs."""

from __future__ import annotations

from typing import Any

import pytest

from ctmon.agent import device_timer
from ctmon.agent.channel import Channel
from ctmon.agent.device_timer import DeviceTimer


class Host:
    """The host clock (ns) and the fake device's state."""

    def __init__(self, record_ns: int) -> None:
        self.now = 1_000_000_000
        self.record_ns = record_ns  # host time one record costs
        self.device_ms = 0.0  # the device's clock
        self.finished = 0  # records the device has reached
        self.records = 0
        self.made = 0


class FakeEvent:
    def __init__(self, host: Host) -> None:
        host.made += 1
        self.host = host
        self.at: float | None = None
        self.seq = -1

    def record(self) -> None:
        self.seq, self.at = self.host.records, None
        self.host.records += 1
        self.host.now += self.host.record_ns

    def query(self) -> bool:
        done = self.seq < self.host.finished
        if done and self.at is None:
            self.at = self.host.device_ms
        return done

    def elapsed_time(self, end: Any) -> float:
        assert self.at is not None and end.at is not None
        return float(end.at - self.at)


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Host:
    h = Host(record_ns=1_000)
    monkeypatch.setattr(device_timer, "_now", lambda: h.now)
    return h


def _timer(host: Host, gap_ns: int = 10) -> tuple[DeviceTimer, Channel]:
    ch = Channel(None)
    timer = DeviceTimer(ch, lambda: FakeEvent(host), record_gap_ns=gap_ns)
    timer.reset("compiled")
    return timer, ch


def _spans(ch: Channel) -> list[tuple[Any, ...]]:
    return [r for r in ch.records if r[0] == "device_time"]


def _step(timer: DeviceTimer, host: Host, idx: int, ns: int) -> None:
    host.now += ns
    timer.boundary(idx, host.now)


def test_spans_between_finished_boundaries_are_sent_with_their_step_indices(host: Host) -> None:
    timer, ch = _timer(host)
    for i in range(4):
        host.device_ms, host.finished = 3.0 * i, i + 1  # the device finished boundary i-1's work at 3i ms
        _step(timer, host, i, 10_000_000)
    # The last boundary's event is pending until the next poll.
    assert _spans(ch) == [("device_time", "compiled", 0, 1, 3.0), ("device_time", "compiled", 1, 2, 3.0)]


def test_boundaries_closer_than_the_gap_record_nothing(host: Host) -> None:
    timer, _ = _timer(host, gap_ns=10_000_000)
    host.finished = 0  # the device behind: it sets the pace
    for i in range(100):
        _step(timer, host, i, 1_000_000)  # 1 ms steps for 100 ms: one event per 10 ms
    assert 9 <= host.records <= 10


def test_the_timer_keeps_its_own_host_time_within_its_budget(host: Host) -> None:
    # On a slow host a record (with its poll) costs the job's thread 50 µs:
    # one per 10 ms would be 0.5 % of a 1 ms step. The timer waits BUDGET_INV
    # times what a record took before the next.
    host.record_ns = 50_000
    timer, ch = _timer(host, gap_ns=10_000_000)
    start = host.now
    for i in range(2_000):
        host.finished = max(0, host.records - 1)  # the device a record behind: it sets the pace
        _step(timer, host, i, 1_000_000)
    took = host.now - start
    spent = host.records * host.record_ns
    assert spent <= took / device_timer.BUDGET_INV
    # ... and no less often than that: device times still come
    assert host.records >= 0.8 * took / (host.record_ns * device_timer.BUDGET_INV)
    assert len(_spans(ch)) >= host.records - 3


def test_where_the_device_keeps_up_the_timer_backs_off_and_comes_back(host: Host) -> None:
    """A host-bound loop: each event is done by the next boundary, so the
    host's clock is true and records come at most once a second; once the
    device falls behind, one per RECORD_GAP_NS again."""
    timer, ch = _timer(host, gap_ns=10_000_000)
    for i in range(10_000):  # 10 s of 1 ms steps, the device idle
        host.finished = host.records
        _step(timer, host, i, 1_000_000)
    keeping_up = host.records
    assert 10 <= keeping_up <= 25  # ~1/s once backed off, not 1,000
    assert len(_spans(ch)) >= keeping_up - 2  # device times still come
    for i in range(10_000, 12_000):  # 2 s with the device a record behind
        host.finished = max(0, host.records - 1)
        _step(timer, host, i, 1_000_000)
    assert host.records - keeping_up >= 95  # one more wait of up to 1 s, then 1 per 10 ms


def test_a_reset_keeps_its_events_for_the_next_source(host: Host) -> None:
    timer, ch = _timer(host)
    for i in range(5):  # the device never finishes: five events pending
        _step(timer, host, i, 10_000_000)
    assert host.made == 5
    timer.reset("optimizer")  # a new source: spans start anew
    for i in range(5):
        _step(timer, host, i, 10_000_000)
    assert host.made == 5  # recorded again, none created
    host.finished = host.records
    _step(timer, host, 5, 10_000_000)
    assert {r[1] for r in _spans(ch)} == {"optimizer"}  # nothing spans the reset


def test_a_failing_event_turns_the_timer_off_without_raising(host: Host) -> None:
    ch = Channel(None)

    def broken() -> FakeEvent:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    timer = DeviceTimer(ch, broken, record_gap_ns=10)
    timer.boundary(0, host.now)
    assert timer.failed
