"""Folding many events at once (a recording read, a viewer's batch): the
same store ``Session.apply`` builds one event at a time, in less time.

Most of a long run's events are step batches: they go in together, a few
thousand at a time (the same work as apply() on each, in one loop). Only
step events read or write the step clock, so folding them a little later
than the output and samples around them gives the same store; device
windows, which name step indices, wait for the steps before them.
Output chunks are split into lines together, the same way: only the exit
(which flushes a partial line) and the general path read the output
buffer, so other events between them wait (in a compile storm, output of
both streams and compiles interleave)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ctmon.store.event_handlers import HANDLERS
from ctmon.wire import events as E
from ctmon.wire.event_base import Event, Unknown

if TYPE_CHECKING:
    from ctmon.store.session import Session

STEPS_RUN = 4096  # step events folded together


def apply_all(s: Session, events: Iterable[Event | Unknown | dict[str, Any]]) -> Session:
    steps_kind, device_kind, output_kind, exit_kind = E.Steps, E.DeviceTime, E.Output, E.Exit
    handlers, apply = HANDLERS, s.apply
    run: list[E.Steps] = []
    outs: list[E.Output] = []
    for ev in events:
        kind = type(ev)
        if s.routes_ranks and (s.ranks or (kind is E.Process and getattr(ev, "rank", None) is not None)):
            # a distributed job: each event to its rank's store, one by one
            if outs:
                fold_output(s, outs)
                outs = []
            if run:
                fold_steps(s, run)
                run = []
            apply(ev)
            continue
        if kind is steps_kind:
            s.events += 1  # counted in stream order, folded with its run
            run.append(ev)  # type: ignore[arg-type]
            if len(run) >= STEPS_RUN:
                fold_steps(s, run)
                run = []
            continue
        first, last = s.first_t, s.last_t
        if kind is output_kind and first is not None and last is not None:
            s.events += 1
            t = ev.t  # type: ignore[union-attr]
            if t > last:
                s.last_t = t
            elif 0 < t < first:
                s.first_t = t
            outs.append(ev)  # type: ignore[arg-type]
            continue
        if run and kind is device_kind:
            fold_steps(s, run)
            run = []
            first, last = s.first_t, s.last_t  # the run may have moved them
        handler = handlers.get(kind)  # type: ignore[arg-type]
        if outs and (kind is exit_kind or handler is None or first is None or last is None):
            fold_output(s, outs)
            outs = []
        if handler is None or first is None or last is None:
            apply(ev)  # the general way: dicts, unknown kinds, the first events
            continue
        # what apply() does, inline: most events are output lines and samples
        s.events += 1
        t = ev.t  # type: ignore[union-attr]
        if t > last:
            s.last_t = t
        elif 0 < t < first:
            s.first_t = t
        try:
            handler(s, ev)
        except (TypeError, ValueError, OverflowError, ZeroDivisionError):
            s.bad_events += 1
    if outs:
        fold_output(s, outs)
    if run:
        fold_steps(s, run)
    return s


def fold_output(s: Session, outs: list[E.Output]) -> None:
    s.output.feed_many([o.stream or "stdout" for o in outs], [o.text() for o in outs])
    s.rev["output"] += len(outs)


def fold_steps(s: Session, run: list[E.Steps]) -> None:
    times = [ev.t for ev in run if ev.t > 0]
    if times:
        lo, hi = min(times), max(times)
        if s.first_t is None or lo < s.first_t:
            s.first_t = lo
        if s.last_t is None or hi > s.last_t:
            s.last_t = hi
    try:
        taken = s.steps.on_steps_run(run)
    except (TypeError, ValueError, OverflowError):
        s.bad_events += 1
        return
    s.rev["steps"] += taken
