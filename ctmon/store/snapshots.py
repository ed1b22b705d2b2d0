"""Snapshots of a Session, for replay's seeking: taken every few thousand
events of a day-long replay, so they must be cheap."""

from __future__ import annotations

import copy
from itertools import chain
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctmon.store.session import Session


def snapshot(s: Session) -> Session:
    """The store as it is now: step series are kept as marks (their arrays
    only grow: see StepSeries.mark), and entries of the rolling buffers,
    never changed once made, are shared. ``restored`` gives a store to fold
    on from."""
    return copy.deepcopy(s, _sharing(s, {id(series): series.mark() for series in s.steps.series.values()}))


def restored(snap: Session) -> Session:
    """A working store from a snapshot (which stays as it is)."""
    return copy.deepcopy(snap, _sharing(snap, {}))


def _sharing(s: Session, memo: dict[int, object]) -> dict[int, object]:
    # compile records too: folding never changes one once made (the
    # findings' cache of its parsed guard is the same in every copy)
    for entry in chain(s.log, s.output.lines, s.samples, s.notes, s.compile.compiles):
        memo[id(entry)] = entry
    return memo
