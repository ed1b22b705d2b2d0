"""A fast loop's counting stretches (ctmon/agent/steps.py): every boundary is
counted, about a thirteenth of them timed (a fourteenth, the sender at its slower pace), and the step that ends a
stretch keeps its interval -- through the ring, its decoder and the store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ctmon.agent import step_hooks, steps
from ctmon.agent.channel import Channel
from ctmon.agent.graph_calls import GraphCalls
from ctmon.agent.step_hooks import optimizer_hook
from ctmon.agent.steps import RANK_API, RANK_OPTIMIZER, StepClock
from ctmon.report.build import build_report
from ctmon.report.text import summary_lines
from ctmon.store import Session
from ctmon.wire import protocol
from ctmon.wire.ring import GAP, RingReader, StepDecoder, StepRing

MS = 1_000_000
SECOND = 1000 * MS


class Host:
    now = 10 * SECOND


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Host:
    h = Host()
    monkeypatch.setattr(steps, "_now", lambda: h.now)
    monkeypatch.setattr(step_hooks, "_now", lambda: h.now)
    return h


@pytest.fixture
def clock(tmp_path: Path) -> Iterator[tuple[StepClock, StepRing]]:
    ring = StepRing.create(str(tmp_path / "steps.ring"), 1 << 16)
    c = StepClock(Channel(None))
    c.attach_ring(ring)
    yield c, ring
    ring.close()


def _folded(ring: StepRing) -> Session:
    """What the supervisor and the store make of the ring."""
    values, lost = RingReader(ring).read()
    session = Session()
    for ev in StepDecoder().decode(values, lost, now_wall=1000.0, now_ns=Host.now + 3600 * SECOND):
        session.apply(protocol.decode(protocol.encode(ev)))
    return session


def _run(clock: StepClock, host: Host, step: Any, n: int, every_ns: int) -> None:
    """``n`` boundaries ``every_ns`` apart, the sender's flush every 250 ms."""
    next_flush = host.now + 250 * MS
    for _ in range(n):
        host.now += every_ns
        step()
        if host.now >= next_flush:
            clock.end_count()
            next_flush += 250 * MS


def test_a_fast_loop_is_counted_whole_and_timed_a_little_of_the_time(clock, host: Host) -> None:
    c, ring = clock
    _run(c, host, lambda: c.mark(RANK_API), 60_000, MS)  # 60 s of 1 ms steps
    assert c.count == 60_000  # every boundary, with a stretch under way
    c.flush_counted()  # at exit
    folded = _folded(ring)
    assert folded.steps.count == 60_000
    known = folded.steps.current.intervals()
    # the first 20 s timed whole, then 0.25 s timed and 3-3.25 s counted (the
    # sender's flush ends a stretch): 20 + 40 x 0.25/3.5
    assert 22_000 < len(known) < 23_800, len(known)
    assert set(known) == {1.0}  # every known interval is a true one: none spans a stretch
    report = build_report(folded)
    assert report["steps"]["count"] == 60_000 and report["steps"]["timed"] == len(known)
    line = next(x for x in summary_lines(report) if "steps (api)" in x)
    assert f"from {len(known):,} timed" in line, line


def test_a_fast_loop_s_graphs_are_timed_with_its_steps_alone(clock, host: Host) -> None:
    """Past the first 20 s, the graphs' timing windows (ctmon/agent/graph_calls.py)
    are open while the clock times the steps and closed while it counts them:
    the wrapper's µs land on a fourteenth of a host-bound loop's steps."""
    c, _ = clock
    g = GraphCalls()
    g.on, g.span = True, (0, host.now)
    scope: dict[str, Any] = {"__compiled_fn_0_x": lambda: None}
    g.install(scope, list(scope), ("m.py", 1, "f"))
    c.each_second = g.on_second
    seen: list[tuple[bool, bool]] = []

    def step() -> None:
        scope["__compiled_fn_0_x"]()
        c.mark(RANK_API)
        seen.append((c.counting(), g.timing))

    _run(c, host, step, 20_000, MS)  # the first 20 s: a fourth of the time, as in any fast loop
    warm = g.timed_span(host.now) / (20 * SECOND)
    assert 0.2 < warm < 0.35, warm
    seen.clear()
    t0, open0 = host.now, g.timed_span(host.now)
    _run(c, host, step, 40_000, MS)
    assert g.read()[0][1] == 60_000  # every call counted
    assert all(timing != counting for counting, timing in seen)  # timed exactly when the steps are
    share = (g.timed_span(host.now) - open0) / (host.now - t0)
    assert 0.05 < share < 0.1, share  # 0.25 s in every 3.25-3.5


def test_a_slow_loop_is_timed_whole(clock, host: Host) -> None:
    c, ring = clock
    _run(c, host, lambda: c.mark(RANK_API), 4_000, 10 * MS)  # 40 s of 10 ms steps: 100 a second
    report = build_report(_folded(ring))
    assert report["steps"]["timed"] == 4_000 - 1
    assert " timed)" not in next(x for x in summary_lines(report) if "steps (api)" in x)


def test_the_step_that_ends_a_stretch_keeps_its_interval(clock, host: Host) -> None:
    c, ring = clock
    _run(c, host, lambda: c.mark(RANK_API), 30_000, MS)
    assert c._counting == RANK_API  # a stretch under way
    host.now += 60 * SECOND  # a long step (a checkpoint)
    c.end_count()  # the sender ends the stretch meanwhile
    c.mark(RANK_API)
    folded = _folded(ring)
    assert folded.steps.current.last_interval_ms() == pytest.approx(60_000.0)
    assert folded.steps.count == 30_001


def test_the_optimizer_hook_counts_its_own_optimizer_only(clock, host: Host) -> None:
    """A stretch counts the clock's optimizer in the hook's own short path;
    a second optimizer (a GAN's) is still not counted."""
    c, ring = clock
    hook = optimizer_hook(c)
    opt, other = (torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1) for _ in range(2))

    def step() -> None:
        hook(opt, (), {})
        hook(other, (), {})

    _run(c, host, step, 40_000, MS)
    assert c._counting_opt is opt and c._counting == RANK_OPTIMIZER
    c.flush_counted()
    folded = _folded(ring)
    assert folded.steps.count == 40_000 and folded.steps.source == "optimizer"
    assert 20_800 < len(folded.steps.current.intervals()) < 22_500


def test_a_higher_source_ends_a_stretch_and_takes_over(clock, host: Host) -> None:
    c, ring = clock
    _run(c, host, lambda: c.mark(RANK_OPTIMIZER), 30_000, MS)
    assert c._counting == RANK_OPTIMIZER
    host.now += MS
    c.mark(RANK_API)  # the user calls ctmon.step() from here on
    assert c._counting == -1 and c.rank == RANK_API and c.count == 1
    values, _ = RingReader(ring).read()
    last_opt = [e for e in StepDecoder().decode(values, 0, 1000.0, host.now) if e["src"] == "optimizer"][-1]
    assert last_opt["i0"] + len(last_opt["ns"]) == 30_000  # the stretch's count went in before the switch


def _read_as_the_supervisor(reader: RingReader, decoder: StepDecoder, session: Session) -> int:
    """One drain, as ctmon/launch/intake.py does it: the boundaries lost in it."""
    values, lost = reader.read()
    now_ns = Host.now + 3600 * SECOND
    for ev in decoder.decode(values, lost, 1000.0, now_ns, reader.start, reader.source(), reader.anchor()):
        session.apply(protocol.decode(protocol.encode(ev)))
    return decoder.lost_steps if lost else 0


def _fast_loop(ring: StepRing, host: Host, early_read: Any = None) -> StepClock:
    """10 boundaries (then ``early_read()``), then 60 s of 1 ms steps and
    the stretch under way written, as at exit."""
    host.now = 10 * SECOND
    c = StepClock(Channel(None))
    c.attach_ring(ring)
    _run(c, host, lambda: c.mark(RANK_API), 10, MS)
    if early_read is not None:
        early_read()
    _run(c, host, lambda: c.mark(RANK_API), 60_000, MS)
    c.flush_counted()
    return c


@pytest.mark.parametrize("switch_read", [True, False], ids=["switch-slot-read", "switch-slot-lost"])
def test_a_ring_overflow_over_counting_stretches_keeps_numbering_and_counts_the_lost(
    tmp_path: Path, host: Host, switch_read: bool
) -> None:
    """The supervisor falls a whole ring behind while the job counts: the
    lost slots hold stretch markers (one slot, thousands of boundaries each).
    The boundaries left are numbered where they truly are, and the lost ones
    counted exactly: against a ring large enough to lose nothing."""
    whole = StepRing.create(str(tmp_path / "whole.ring"), 1 << 16)
    _fast_loop(whole, host)
    truth, _ = RingReader(whole).read()

    ring = StepRing.create(str(tmp_path / "small.ring"), 1 << 10)  # 1,024 slots
    reader, decoder, session = RingReader(ring), StepDecoder(), Session()
    lost = [0]

    def read() -> None:
        lost[0] += _read_as_the_supervisor(reader, decoder, session)

    c = _fast_loop(ring, host, read if switch_read else None)
    read()
    assert reader.lost > 20_000  # slots, a dozen stretch markers among them
    assert sum(v <= -GAP for v in truth[: reader.start]) >= 5
    true_idx = StepDecoder()
    true_idx.decode(truth[: reader.start], 0, 0.0, 0)  # the index of the first slot kept
    read_early = 10 if switch_read else 0
    assert lost[0] == true_idx.next_idx - read_early
    assert session.steps.count == c.count == 60_010
    assert session.steps.source == "api"
    host.now += 10 * MS
    c.mark(RANK_API)  # and the next drain goes on from there
    read()
    assert session.steps.count == 60_011


def test_without_an_anchor_a_loss_counts_slots_as_before() -> None:
    """A ring whose writer never anchored (or anchored past what was read):
    each lost slot is one boundary, as the decoder always assumed."""
    d = StepDecoder()
    d.decode([-(RANK_API + 1), 100, 200], 0, 0.0, 0)
    (ev,) = d.decode([900, 1000], 5, 0.0, 0, start=8, source=(RANK_API, 0), anchor=None)
    assert ev["i0"] == 2 + 5 and d.lost_steps == 5
    (ev,) = d.decode([1100], 3, 0.0, 0, start=13, source=(RANK_API, 0), anchor=(20, 99))
    assert ev["i0"] == 9 + 3 and d.lost_steps == 3
