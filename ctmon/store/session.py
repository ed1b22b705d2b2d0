"""The session store: every event folds into one state object.

Pure Python -- no torch, no textual, no I/O. Live view, replay, report and
the CI gate all read this object, so they cannot disagree. Events arrive
typed (ctmon/wire/events.py), validated where their bytes entered the
process; an event built in memory as a dict is validated the same way on its
way in. ``apply`` never raises, which the fuzz tests check.

How each kind folds is ctmon/store/event_handlers.py's; many at once,
ctmon/store/bulk_fold.py's; snapshots for replay, ctmon/store/snapshots.py's.

``rev`` counts changes per section ("steps", "compile", "samples", "output",
"log", "meta") so a viewer repaints only what changed.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from typing import Any, cast

from ctmon.store import bulk_fold
from ctmon.store.compile_state import CompileState
from ctmon.store.cudagraphs import CudagraphState
from ctmon.store.event_handlers import HANDLERS
from ctmon.store.generation import GenerationState
from ctmon.store.hotness import HotnessState
from ctmon.store.joined import JoinedBefore
from ctmon.store.output import OutputBuffer
from ctmon.store.rank_stores import RankState, route
from ctmon.store.records import ExitInfo, LogEntry, Meta
from ctmon.store.step_sources import StepSources
from ctmon.wire import events as E
from ctmon.wire.decode import from_dict
from ctmon.wire.event_base import Event, Ranked, Unknown

LOG_MAX = 5000
SAMPLES_MAX = 3600
CUT_OFF = "cut_off"  # the state of a recording that ends without the job's exit, no ctmon writing it


class Session:
    def __init__(self) -> None:
        self.meta = Meta()
        self.steps = StepSources()
        self.generation = GenerationState()
        self.compile = CompileState()
        self.cudagraphs = CudagraphState()  # reduce-overhead's warm-ups, recordings and replays
        self.hotness = HotnessState()  # where step time went: compiled graphs, their eager glue, elsewhere
        self.output = OutputBuffer()
        self.log: deque[LogEntry] = deque(maxlen=LOG_MAX)
        self.log_counts: Counter[str] = Counter()
        self.samples: deque[E.Sample] = deque(maxlen=SAMPLES_MAX)
        self.last_live_sample: E.Sample | None = None  # the last sample with the job's memory in it
        self.notes: list[E.Note] = []
        self.exit: ExitInfo | None = None
        # The recording was read to its end, no exit in it, and no ctmon
        # writes it any more (its reader says so: report/load.py): the job's
        # end is not known, and it is not running either.
        self.cut_off = False
        self.uncaught: E.Uncaught | None = None  # the exception that ended its process, as it said
        self.joined: JoinedBefore | None = None  # --pid: what Dynamo had done before ctmon joined
        self.processes = 0  # agents' hellos: processes of the job that reported
        self.drops = {"steps": 0, "events": 0}
        self.events = 0
        self.bad_events = 0
        self.unknown: Counter[str] = Counter()
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.newer_protocol = False
        self.header_seen = False  # the first session header folded: a second one is a note
        self.rev: Counter[str] = Counter()
        # a distributed job's ranks, each with its own store (ctmon/store/rank_stores.py)
        self.ranks: dict[int, RankState] = {}
        self.primary_rank: int | None = None
        self.routes_ranks = True  # False in a rank's own store: it takes its events as they come
        # what the job's own process compiled before it knew it was a rank
        # (ctmon/store/rank_stores.py: kept_until_ranked)
        self.unranked: list[Ranked] | None = []

    # ---- folding ----

    def apply(self, ev: Event | Unknown | dict[str, Any]) -> None:
        """Fold one event. A dict (built in memory: tests, tools) is validated
        first, like a line read off the wire."""
        self.events += 1
        if type(ev) is dict:
            typed = self._typed(ev)
            if typed is None:
                return
            ev = typed
        rank = getattr(ev, "rank", None)
        if rank is not None and self.routes_ranks and self._to_rank(cast(Ranked, ev), rank):
            return
        handler = HANDLERS.get(type(ev))  # type: ignore[arg-type]
        if handler is None:
            self.unknown[str(getattr(ev, "kind", None))[:40]] += 1
            return
        t = cast(Event, ev).t
        if t > 0:
            if self.first_t is None or t < self.first_t:
                self.first_t = t
            if self.last_t is None or t > self.last_t:
                self.last_t = t
        try:
            handler(self, ev)
        except (TypeError, ValueError, OverflowError, ZeroDivisionError):
            # typed, yet out of range (an int too large for a float, ...)
            self.bad_events += 1

    def _to_rank(self, ev: Ranked, rank: int) -> bool:
        """A rank's event to that rank's store (ctmon/store/rank_stores.py); True
        when the job's own session is to leave it there."""
        return route(self, ev, rank, _rank_store)

    def _typed(self, obj: dict[str, Any]) -> Event | None:
        kind = obj.get("kind")
        if not isinstance(kind, str) or kind not in E.KINDS:
            self.unknown[str(kind)[:40]] += 1
            return None
        ev = from_dict(obj)
        if ev is None:
            self.bad_events += 1
        return ev

    def apply_all(self, events: Iterable[Event | Unknown | dict[str, Any]]) -> Session:
        """Fold many events (ctmon/store/bulk_fold.py): the store ``apply``
        builds one by one, sooner."""
        return bulk_fold.apply_all(self, events)

    # ---- derived ----

    @property
    def state(self) -> str:
        if self.exit is not None:
            return "exited"
        if self.cut_off:
            return CUT_OFF
        if self.compile.active:
            return "compiling"
        if self.steps.count > 0 or self.compile.compile_count > 0:
            return "running"
        return "starting"

    @property
    def duration_s(self) -> float | None:
        start = self.meta.start_t or self.first_t
        end = self.exit.t if self.exit else self.last_t
        if start is None or end is None:
            return None
        return max(0.0, end - start)

    def latest_sample(self) -> E.Sample | None:
        return self.samples[-1] if self.samples else None


def _rank_store() -> Session:
    """A rank's own store: it takes its events as they come."""
    child = Session()
    child.routes_ranks = False
    child.unranked = None
    return child
