"""The viewer's pump: folding event batches into the store, and deciding
when the screen repaints.

Every event reaches the store through ``Pump.fold`` (on the UI thread), and
every "is a repaint due, and of what" question is answered here; the app only
asks, then runs the timers and draws. Two ways in, one fold path:

* ``fold(deadline)``: the budgeted path, woken by the hand-off. It folds in
  small slices and carries the unfolded rest of a batch over to the next
  call, so a firehose never holds the UI thread past its budget;
* ``fold(None)`` right before a scheduled repaint: what trickled in while the
  repaint was waiting (the hand-off held its wake-ups meanwhile).

Two cadences: compiles, alerts and the exit show within ``refresh_min_s``;
the steady stream (steps, samples, output) at most every ``steady_refresh_s``,
which keeps an idle live screen cheap. While a backlog is folded the long
lists repaint only every ``LISTS_BACKLOG_S``.
"""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic, perf_counter

from ctmon.read.feeds import FileBatch
from ctmon.store import Session
from ctmon.tui.ingest import Batch, Handoff
from ctmon.tui.timeline import Timeline

REFRESH_MIN_S = 0.08  # at most 12.5 repaints a second
STEADY_REFRESH_S = 0.5  # steps, samples and output alone: at most 2 repaints a second
INGEST_BUDGET_S = 0.03  # UI-thread time spent folding events before yielding
CYCLE_S = 1 / 11  # while a backlog is folded: one repaint per cycle
LISTS_BACKLOG_S = 0.5  # while a backlog is folded: how often the long lists repaint
BACKLOG_EVENTS = 2000
MIN_BUDGET_S = 0.005
# folded between looks at the clock: ~1 ms of a storm's events, well inside
# the smallest budget; smaller slices cost the store's batched paths (steps,
# output) more than they save in overrun
SLICE_EVENTS = 256


class Pump:
    def __init__(
        self,
        store: Session,
        timeline: Timeline | None,
        wake: Callable[[], None],
        *,
        ingest_budget_s: float = INGEST_BUDGET_S,
        refresh_min_s: float = REFRESH_MIN_S,
    ) -> None:
        self.store = store
        self.timeline = timeline
        self.handoff = Handoff(wake)
        self.ingest_budget_s = ingest_budget_s
        self.budget_s = ingest_budget_s  # this slice's budget: shrinks when painting is slow
        self.refresh_min_s = refresh_min_s
        self.steady_refresh_s = max(refresh_min_s, STEADY_REFRESH_S)
        self.applied = 0
        self._carry: Batch = []  # the unfolded rest of a batch
        self._urgent_key: tuple[int, int, int, int] = (-1, -1, -1, -1)
        self._last_refresh = 0.0
        self._last_lists = 0.0

    # ------------------------------------------------------------- folding

    def deadline(self) -> float:
        """The end of the next budgeted slice of folding: no later than the
        next repaint is due while a backlog is folded (a slice that ran past
        it would stretch every cycle by up to a budget)."""
        until_paint = self._last_refresh + CYCLE_S - monotonic()
        return perf_counter() + max(MIN_BUDGET_S, min(self.budget_s, until_paint))

    def fold(self, deadline: float | None) -> tuple[int, bool]:
        """Fold waiting batches into the store: until ``deadline`` (then the
        rest of a batch is carried over), or, without one, what is waiting
        now. Returns how many events were folded and whether the deadline
        passed (events may then still be waiting)."""
        store, tl, handoff = self.store, self.timeline, self.handoff
        apply_all = store.apply_all
        n = 0
        while True:
            if self._carry:
                batch, self._carry = self._carry, []
            else:
                # without a deadline, an empty hand-off is not asked: asking
                # re-arms its wake-up while one may still be in flight
                if deadline is None and not handoff.pending:
                    break
                taken = handoff.take()
                if taken is None:
                    break
                batch = taken
                if tl is not None:
                    tl.extend(batch, batch.end if isinstance(batch, FileBatch) else None)
            done = len(batch)
            if deadline is None:
                apply_all(batch)
            else:
                # fold in small steps, so one slow batch cannot overrun the slice
                for i in range(0, len(batch), SLICE_EVENTS):
                    apply_all(batch[i : i + SLICE_EVENTS])
                    if perf_counter() >= deadline and i + SLICE_EVENTS < len(batch):
                        done = i + SLICE_EVENTS
                        self._carry = batch[done:]
                        break
            n += done
            self.applied += done
            if tl is not None:
                tl.offer_checkpoint(self.applied, store)
            if deadline is not None and perf_counter() >= deadline:
                return n, True
        return n, False

    @property
    def backlog(self) -> bool:
        return bool(self._carry) or self.handoff.pending > BACKLOG_EVENTS

    @property
    def empty(self) -> bool:
        """Nothing is waiting to be folded."""
        return self.handoff.pending == 0 and not self._carry

    # ---------------------------------------------------------- repainting

    def _urgent(self) -> bool:
        """Something a user waits to see changed: a compile, an alert, the exit."""
        rev = self.store.rev
        key = (rev["compile"], rev["log"], rev["meta"], rev["rank_compiles"])
        if key != self._urgent_key:
            self._urgent_key = key
            return True
        return False

    def refresh_delay(self, always_urgent: bool = False) -> float:
        """How long until the next repaint; meanwhile the hand-off holds its
        wake-ups unless something urgent or a backlog is waiting."""
        urgent = self._urgent() or always_urgent
        gap = self.refresh_min_s if urgent else self.steady_refresh_s
        self.handoff.hold = not urgent and not self.backlog
        return max(0.001, self._last_refresh + gap - monotonic())  # a 0 s timer divides by zero

    def before_refresh(self) -> tuple[int, bool]:
        """A scheduled repaint is due: fold what queued meanwhile (a backlog
        is left to the budgeted path) and end the hold. Returns how many
        events were folded and whether the hand-off needs waking (batches
        are still waiting)."""
        n = 0
        if 0 < self.handoff.pending <= BACKLOG_EVENTS and not self._carry:
            n, _ = self.fold(None)
        return n, self.handoff.release()

    def paint_due(self, paused: bool) -> bool:
        """Between slices of a backlog: is it the screen's turn?"""
        return not paused and monotonic() - self._last_refresh >= self.refresh_min_s

    def painted(self, seconds: float) -> None:
        # keep a repaint every CYCLE_S: the slower the paint, the shorter the
        # next slice of folding (busy machines, big terminals)
        self.budget_s = min(self.ingest_budget_s, max(MIN_BUDGET_S, CYCLE_S - seconds))

    def refreshing(self, force: bool) -> tuple[bool, bool]:
        """The views are about to repaint: (catching up on a backlog, the long
        lists repaint too). Catching up (a late attach to a long session, a
        replay), the panels repaint every cycle and the four long lists,
        which cost most to draw and would only scroll past, every
        LISTS_BACKLOG_S. Nothing is skipped for good."""
        now = self._last_refresh = monotonic()
        backlog = self.backlog
        lists_due = force or not backlog or now - self._last_lists >= LISTS_BACKLOG_S
        if lists_due:
            self._last_lists = now
        return backlog, lists_due
