"""What every view reads: the store being shown, and how to show it.

Views get this object instead of reaching into the app, so they can be
rendered from any ``Session`` (live, replayed, or built by a script).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctmon.findings.since_base import SinceBase
from ctmon.store import Session


@dataclass
class ReplayInfo:
    position: int = 0
    total: int = 0
    playing: bool = False
    speed: float = 1.0
    loading: bool = True

    @property
    def at_end(self) -> bool:
        return self.position >= self.total


@dataclass
class ViewContext:
    session: Session
    live: bool = False  # a running job, through its supervisor
    launched: bool = False  # this viewer started the job
    clock: Callable[[], float] = time.time
    gen: int = 0  # bumped whenever ``session`` is replaced by another object
    paused: bool = False
    status: str | None = None  # "stopping…", "disconnected", ...
    replay: ReplayInfo | None = None
    feed_done: bool = False
    title: str | None = None
    gpu_error: str | None = None  # remembered: only the first sample says it
    catching_up: bool = False  # a backlog is being folded (a late attach, a replay's load)
    rank: int | None = None  # a distributed job: the rank the per-process panes show (None: the job)
    since: SinceBase | None = None  # --baseline BASE: findings new since it are marked

    @property
    def view(self) -> Session:
        """The store the per-process panes show: the chosen rank's, else the job's."""
        if self.rank is not None:
            rs = self.session.ranks.get(self.rank)
            if rs is not None:
                return rs.session
        return self.session

    @property
    def cwd(self) -> str | None:
        return self.session.meta.cwd

    def start_time(self) -> float | None:
        s = self.session
        return s.meta.start_t or s.first_t

    def now(self) -> float | None:
        """The moment the screen shows: the clock while a live job runs,
        otherwise the store's own last time (recordings replay their clock)."""
        s = self.session
        if s.exit is not None:
            return s.exit.t or s.last_t
        if self.replay is not None:
            return s.last_t
        if self.live and not self.feed_done:
            return self.clock()
        return s.last_t

    def elapsed(self) -> float | None:
        start, now = self.start_time(), self.now()
        if start is None or now is None:
            return None
        return max(0.0, now - start)

    @property
    def job_running(self) -> bool:
        return self.live and not self.feed_done and self.session.exit is None


def shown_rank(ctx: ViewContext) -> int | None:
    """The rank whose figures the panes that follow one process show: the
    chosen one, else in a distributed job its primary rank (the job's own
    session holds that rank's steps, frames, breaks and events); None for a
    job of one process."""
    ranks = ctx.session.ranks
    if ctx.rank is not None and ctx.rank in ranks:
        return ctx.rank
    return ctx.session.primary_rank if ranks else None


def rank_label(ctx: ViewContext) -> str:
    """' · rank 1' on the titles of panes that follow one process of a
    distributed job, so that no pane's figures read as the whole job's."""
    rank = shown_rank(ctx)
    return f" · rank {rank}" if rank is not None else ""


def job_label(ctx: ViewContext) -> str:
    """' · all ranks' on the titles of panes that show the whole job (its
    process tree, the host's GPUs, its output, its findings) when it has ranks."""
    return " · all ranks" if ctx.session.ranks else ""


def put_title(widget: Any, text: str) -> None:
    """A border title taken literally (it may hold filter text or brackets)."""
    from textual.content import Content

    from ctmon.tui.safe import clean

    text = clean(text, tab=" ")
    if getattr(widget, "title_plain", None) == text:
        return
    widget.border_title = Content(text)
    widget.title_plain = text


class StoreView:
    """Mixin for widgets drawn from the store: ``maybe_update`` does the work
    only when one of the ``SECTIONS`` it reads has a new revision."""

    SECTIONS: tuple[str, ...] = ()
    # True for the panes that follow one process (steps, compilation, frames,
    # breaks, events): they read ``ctx.view``, the rank chosen in a distributed job
    SCOPED = False
    ctx: ViewContext
    _view_key: object = None
    updates: int = 0
    title_plain: str = ""

    def update_key(self) -> tuple[object, ...]:
        ctx = self.ctx
        s = ctx.view if self.SCOPED else ctx.session
        # the rank shown is in the key: a title names it as soon as the job turns out to have ranks
        scope = (ctx.rank, shown_rank(ctx)) if self.SCOPED else None
        return (ctx.gen, scope, *(s.rev[name] for name in self.SECTIONS))

    def maybe_update(self, force: bool = False) -> bool:
        key = self.update_key()
        if not force and key == self._view_key:
            return False
        self._view_key = key
        self.updates += 1
        self.update_view()
        return True

    def update_view(self) -> None:
        raise NotImplementedError
