"""Step boundaries, found without any change to the user's code.

Three sources, by precedence (see protocol.STEP_RANK):

* ``ctmon.step()`` called by the user -- explicit, so it wins;
* ``optimizer.step()`` -- a global post-hook; the first optimizer that steps
  is the clock (a GAN's second optimizer would otherwise double the count);
* a call of a compiled callable at top level (not nested in another one) --
  inference loops have no optimizer; the first such callable is the clock.
  A compiled ``optimizer.step`` counts as that optimizer's step.

None of them changes what the job runs: no wrapper around user or compiled
code, nothing Dynamo traces into (see ctmon/agent/step_hooks.py).

Once a higher-ranked source shows up, lower ones are ignored from then on
and the switch is recorded, so the viewer can drop the lower series.

The hot path (``mark``) is a handful of attribute reads, one clock read and
two stores into a shared-memory ring (ctmon/wire/ring.py) that the supervisor
drains -- so boundaries survive even ``os._exit`` or SIGKILL of the job
(where no ring file can be made, a ring in the job's memory instead, read by
the sender thread: ``StepRelay``). On
CUDA the host clock measures launch time, not device time; a DeviceTimer
(ctmon/agent/device_timer.py) times some boundaries on the device.

Where boundaries come faster than 200 a second (a host-bound loop, whose
every µs is the job's), after the first 20 s the clock times a quarter of a
second and counts the next three (``_pace``): every boundary is counted, and a
stretch's count and last time go into the ring as one marker at its end.
The steps inside a stretch have no interval of their own (the store keeps
them as unknown); the step that ends it does. While the clock counts, the
sender thread wakes half as often (a stretch runs 3 to 3.6 s) and the
compiled graphs are not timed (ctmon/agent/graph_calls.py). A job killed
by SIGKILL or ``os._exit`` mid-stretch loses that stretch's count (at most
3.6 s of steps); a normal exit, an exception and ``exec`` write it.
"""

from __future__ import annotations

import operator
import time
import weakref
from collections.abc import Callable
from typing import Any

from ctmon.agent.channel import Channel
from ctmon.agent.device_timer import DeviceTimer
from ctmon.agent.generation import GenerationWatch
from ctmon.wire import protocol
from ctmon.wire.ring import (
    GAP,
    HEADER_WORDS,
    W_INDEX,
    W_SOURCE,
    W_SOURCE_AT,
    StepRing,
    set_anchor,
)

RANK_COMPILED, RANK_OPTIMIZER, RANK_API = 0, 1, 2
MAX_NUMBERS_SAID = 100  # step_number events a process sends at most (ctmon.step(n) passed something that jumps)
OFF = RANK_API + 1  # above every source: every boundary is ignored
_NAMES = protocol.STEP_SOURCES

CUDA_CHECK_NS = 1_000_000_000  # how often the clock looks for CUDA, a ring to swap in, a closed channel (_check)
# Counting stretches (see mark): once the clock has run WARM_NS, where
# boundaries come faster than FAST_STEPS_PER_S, TIMED_NS of them are timed,
# then COUNT_NS (to 3.6 s: the sender ends it) counted, and so on: about a
# fourteenth of them timed (the timed path costs a host-bound step 2.5 (CPU
# box) to 6 (H100 host) times the counting one, benchmarks/hook_cost.py fine).
WARM_NS = 20_000_000_000
FAST_STEPS_PER_S = 200
COUNT_NS = 3_000_000_000
TIMED_NS = 250_000_000

_now = time.perf_counter_ns


def always_alive() -> bool:
    return True


def liveness(obj: object) -> Callable[[], object]:
    """A weak reference's call (None once ``obj`` is gone); where ``obj``
    takes none, it counts as alive for good."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return always_alive


class StepClock:
    # Slots, the hot path's first: it touches one object, its first two
    # cache lines. Inside a host-bound loop each object the hook touches has
    # been evicted by the step between two calls, and costs a cache miss
    # (benchmarks/hook_calls.py cold).
    __slots__ = (
        "_counting_opt",
        "_counted",
        "_counted_at",
        "_counting",
        "rank",
        "depth",
        "_opt_key",
        "_next_check",
        "_w",
        "_base",
        "_words",
        "_mask",
        "timer",
        "ch",
        "_opt_ref",
        "_hooks",
        "_hook_id",
        "_hook_fn",
        "_call_key",
        "_call_ref",
        "probe_device",
        "is_compiling",
        "generation",
        "each_second",
        "_later",
        "_rate_at",
        "_count_since",
        "_numbered_rank",
        "_numbered_offset",
        "_numbers_said",
    )

    def __init__(self, channel: Channel) -> None:
        self.ch = channel
        self.rank = -1  # the source's rank; OFF once the clock must write no more
        self.depth = 0  # 1 while a top-level compiled call runs (one loop thread assumed)
        # The clock's optimizer and compiled callable: their ids, and
        # whether each is still alive (a weak reference's call): a loop built
        # anew (a sweep, a resized model) hands the clock to its own once the
        # old one is gone, while a second live one (a GAN's) is ignored.
        self._opt_key: int | None = None
        self._opt_ref: Callable[[], object] = always_alive
        self._hooks: dict[object, object] | None = None  # torch's global optimizer post-hooks
        self._hook_id: object = None
        self._hook_fn: object = None
        self._call_key: int | None = None
        self._call_ref: Callable[[], object] = always_alive
        self._next_check = 0
        self.timer: DeviceTimer | None = None
        # Returns a DeviceTimer once the job has initialised CUDA, else None.
        self.probe_device: Callable[[], DeviceTimer | None] = lambda: None
        self.is_compiling: Callable[[], bool] = lambda: False
        # Tells a generate() call's tokens (ctmon/agent/generation.py); armed
        # once the job imports transformers' generation utilities.
        self.generation: GenerationWatch | None = None
        # Run on the job's thread at the once-a-second check, with whether
        # a counting stretch begins (the graphs' timing windows:
        # ctmon/agent/graph_calls.py).
        self.each_second: Callable[[int, bool], None] | None = None
        # The ring's words, header and slots in one view (one object to
        # touch); until a ring is attached, a harmless stand-in.
        self._words: Any = [0] * (HEADER_WORDS + 1)
        self._mask = 0
        self._w = 0  # the ring's write index
        self._base = 0  # the write index of the current source's first boundary
        self._later: StepRing | None = None  # a ring to swap in at the next boundary
        # A counting stretch: the source it counts (-1: none) and, where
        # that is an optimizer stepped eagerly, that optimizer (for the
        # hook's own check); the sender thread ends it by setting both to
        # none. Its boundaries, not yet in the ring, and the last one's
        # time; when it began; and (time, count) at the last check, for the rate.
        self._counting = -1
        self._counting_opt: object = None
        self._counted = 0
        self._counted_at = 0
        self._count_since = 0
        self._rate_at: tuple[int, int] | None = None
        # The job's own step numbers (step_number events): the source and
        # offset (number less boundary index) said last, and how many were said
        self._numbered_rank = -1
        self._numbered_offset = 0
        self._numbers_said = 0

    @property
    def count(self) -> int:
        """Boundaries accepted from the current source."""
        return self._w - self._base + self._counted

    @count.setter
    def count(self, value: int) -> None:
        self._base = self._w + self._counted - value

    def stop(self) -> None:
        """No boundary from now on (a forked child shares the parent's ring)."""
        self.rank = OFF
        self._counting_opt, self._counting = None, -1  # nor a count

    def forked(self) -> None:
        """In a forked child that may claim a rank of its own: the parent's
        ring and sources are forgotten, and boundaries go into a harmless
        stand-in until the child's own ring is attached (``attach_later``)."""
        self._words, self._mask = [0] * (HEADER_WORDS + 1), 0
        self._w = self._base = 0
        self.rank, self._later, self.timer, self._next_check = -1, None, None, 0
        self._counting_opt, self._counting, self._counted, self._rate_at = None, -1, 0, None
        self._opt_key, self._opt_ref = None, always_alive
        self._call_key, self._call_ref = None, always_alive
        # the child's own boundaries start at 0: its numbers are said afresh
        self._numbered_rank, self._numbered_offset, self._numbers_said = -1, 0, 0

    def attach_ring(self, ring: StepRing) -> None:
        self._words, self._mask = ring.words, ring.mask
        self._w = self._base = int(ring.header[W_INDEX])

    def attach_later(self, ring: StepRing) -> None:
        """Attach ``ring`` from another thread: the job's own thread swaps it
        in at its next boundary, so no boundary ever mixes two rings."""
        self._later = ring
        self._next_check = 0

    # ---- the hot path ----

    def mark(self, rank: int) -> None:
        if self._counting == rank:
            # A counting stretch (fast loops, see _pace): the boundary is
            # counted and its time kept, no store into the ring.
            self._counted += 1
            self._counted_at = _now()
            return
        t = _now()
        if rank < self.rank:
            return
        if self._counted:
            self._end_count(t)
        if t >= self._next_check:
            self._check(t)
            if rank < self.rank:
                return
        if rank != self.rank:
            self._switch(rank)
        w = self._w
        words = self._words
        words[HEADER_WORDS + (w & self._mask)] = t
        self._w = w + 1
        words[W_INDEX] = w + 1  # publish after the slot is written
        timer = self.timer
        if timer is not None:
            timer.boundary(w - self._base, t)

    def _end_count(self, t: int) -> None:
        """The counting stretch into the ring: ``-(GAP + n)``, then its last
        boundary's time (the next interval's start), published at once."""
        n, self._counted = self._counted, 0
        self._counting_opt, self._counting = None, -1
        w = self._w
        words = self._words
        words[HEADER_WORDS + (w & self._mask)] = -(GAP + n)
        words[HEADER_WORDS + ((w + 1) & self._mask)] = self._counted_at
        self._w = w + 2
        self._base -= n - 2  # the count grows by n, the write index by 2
        set_anchor(words, w + 1, w + 1 - self._base)  # a reader that lost these slots still knows the count
        words[W_INDEX] = w + 2
        self._rate_at = (t, self._w - self._base)  # TIMED_NS timed before the next stretch
        if self.timer is not None:
            self.timer.reset(_NAMES[self.rank])  # no device window spans the stretch

    def _pace(self, t: int) -> None:
        """At the check: where boundaries came faster than FAST_STEPS_PER_S
        over the time timed since the last check, count the next COUNT_NS of them instead
        of timing each: a loop that fast is host-bound, and the ring's
        stores are most of what the hook costs it (benchmarks/hook_calls.py cold).
        The sender thread ends the stretch (``end_count``, at each flush,
        held or not). Not in the first WARM_NS: a short run, and a long
        one's start, are timed whole."""
        count = self._w - self._base
        at = self._rate_at
        if at is None:
            self._rate_at = (t, count)
            self._count_since = t + WARM_NS  # no stretch before
            return
        if t - at[0] < TIMED_NS // 2:
            # just after a stretch (its check came due during it): the rate
            # over the next TIMED_NS decides the next
            self._next_check = t + TIMED_NS
            return
        self._rate_at = (t, count)
        rate = (count - at[1]) * 1e9 / (t - at[0])
        if rate > FAST_STEPS_PER_S and t >= self._count_since and self.rank >= 0:
            self._count_since = t  # before _counting: the sender reads them the other way round
            self._counting_opt = self._opt_ref() if self.rank == RANK_OPTIMIZER else None
            self._counting = self.rank

    def counting(self) -> bool:
        """A counting stretch is under way (any thread may ask)."""
        return self._counting >= 0

    def end_count(self) -> list[protocol.Event]:
        """On the sender thread, at each flush: end a counting stretch that
        has run COUNT_NS (the next boundary writes it into the ring)."""
        if self._counting >= 0 and _now() - self._count_since >= COUNT_NS:
            self._counting_opt, self._counting = None, -1
        return []

    def flush_counted(self) -> None:
        """At exit (or exec): a counting stretch under way into the ring."""
        if self._counted and self.rank != OFF:
            self._end_count(_now())

    def _switch(self, rank: int) -> None:
        self.rank = rank
        w = self._w
        words = self._words
        words[HEADER_WORDS + (w & self._mask)] = -(rank + 1)
        words[W_SOURCE] = rank + 1  # survives the slot being overwritten
        words[W_SOURCE_AT] = w
        self._w = self._base = w + 1
        set_anchor(words, w + 1, 0)  # its first boundary, in the next slot
        words[W_INDEX] = w + 1
        if self.timer is not None:
            self.timer.reset(_NAMES[rank])

    def _check(self, t: int) -> None:
        self._next_check = t + CUDA_CHECK_NS
        if self.rank == OFF:
            return
        if self.ch.disabled:
            # Checked here, once a second, not at every boundary: the
            # channel is one more object for the hot path to touch. A forked
            # child, which must not write into the parent's ring, stops at
            # once (stop(), run at the fork).
            self.stop()
            return
        later = self._later
        if later is not None:
            # a rank claimed late (ctmon/agent/pending.py): its steps count
            # from here, in its own ring, under the source marked anew
            self._later = None
            self.attach_ring(later)
            self.rank = -1
        else:
            self._pace(t)
        each_second = self.each_second
        if each_second is not None:
            try:
                each_second(t, self._counting >= 0)
            except Exception:
                pass  # the job's step goes ahead regardless
        if self.timer is None:
            try:
                timer = self.probe_device()
            except Exception:
                timer = None
            if timer is not None:
                timer.reset(_NAMES[self.rank] if self.rank >= 0 else "")
                self.timer = timer
        elif self.timer.failed:
            self.timer = None

    # ---- the sources ----

    def api_step(self, n: object = None) -> None:
        self.mark(RANK_API)
        if n is not None:
            self.number(RANK_API, n)

    def number(self, rank: int, n: Any) -> None:
        """The job's own number of the step the boundary just marked ends
        (``ctmon.step(n)``, an optimizer's step count). Said where the
        numbers begin or jump, not at every step: a loop that passes its
        step to ctmon.step costs a subtraction and two comparisons more."""
        if self.rank != rank:
            return  # no boundary was written (a higher-ranked source is the clock)
        if type(n) is not int:
            if isinstance(n, bool) or hasattr(n, "device"):
                return  # a tensor's value would cost a GPU sync to read
            try:
                n = operator.index(n)
            except TypeError:
                return
        i = self.count - 1
        if (rank, n - i) == (self._numbered_rank, self._numbered_offset) or self._numbers_said >= MAX_NUMBERS_SAID:
            return
        self._numbered_rank, self._numbered_offset = rank, n - i
        self._numbers_said += 1
        event = {"kind": protocol.STEP_NUMBER, "t": time.time(), "src": _NAMES[rank], "i": i, "n": n}
        self.ch.put(("event", event))

    def set_global_hook(self, hooks: dict[object, object] | None, hook_id: object = None) -> None:
        """Where the optimizer hook is registered (torch's global post-hook
        dict and its key), so compiled calls can take it out for their run."""
        self._hooks, self._hook_id = hooks, hook_id
        self._hook_fn = hooks.get(hook_id) if hooks is not None else None
