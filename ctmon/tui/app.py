"""The live TUI: one screen that says whether compilation is healthy and
where the time goes.

Data path (the app never parses events; the store does):

    Feed.batches()  --reader thread-->  Handoff  --Ingest message-->  Pump.fold  -->  Session.apply
                                                                       (UI thread)
    Session.rev[...] changed?  --when the Pump says a repaint is due-->  views refresh

* the feed (a live job's socket, a recording, a list) is injected;
* a plain daemon thread reads it, so a blocked socket can never hold up
  the app's exit; it hands batches over through ``Handoff``, which keeps at
  most one wake-up message in flight however fast events come;
* the UI thread folds batches into its ``Session`` through the ``Pump``
  (ctmon/tui/pump.py), the one fold path and the one place that decides
  when to repaint; between slices of a backlog, when a repaint is due, the
  app updates the views and waits for the screen to be drawn, so repaints
  go on during a firehose (see docs/PERFORMANCE.md, "The viewer");
* each view compares the revisions of the store sections it reads with the
  ones it last drew, and only those that changed are repainted: an idle
  screen costs a one-second clock tick.

Pause (space) stops repainting, not ingesting. In replay the app also keeps
every event in a ``Timeline`` and can show the store at any earlier point.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from textual.app import App
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer

from ctmon.read.feeds import Feed, FileBatch, RecordingFeed
from ctmon.store import ExitInfo, Session
from ctmon.tui.compile_panes import Pane
from ctmon.tui.context import ReplayInfo, ViewContext
from ctmon.tui.ingest import Handoff
from ctmon.tui.main_screen import MainScreen, TabStrip
from ctmon.tui.panels import HeaderBar, KeyBar
from ctmon.tui.pump import INGEST_BUDGET_S, REFRESH_MIN_S, Pump
from ctmon.tui.replay_control import ReplayControl
from ctmon.tui.safe import CLEAN_EVENTS, clean, clean_event
from ctmon.tui.screens import ConfirmStop
from ctmon.tui.timeline import Timeline
from ctmon.tui.viewer_process import LEAVE_SIGNALS, tune_gc
from ctmon.wire import protocol

PAINT_WAIT_S = 0.25  # longest wait for the screen to be drawn between ingest slices
CLOCK_S = 1.0
STOP_GIVE_UP_AFTER_KILL_S = 7.0  # the viewer waits this long for the exit once SIGKILL is due


__all__ = ["AppResult", "CtmonApp", "FeedEnded", "Ingest"]


class Ingest(Message):
    """Batches are waiting in the hand-off."""


class FeedEnded(Message):
    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error


@dataclass
class AppResult:
    how: str  # "quit" | "detached" | "stopped"
    exit: ExitInfo | None
    session: Session


class CtmonApp(App[AppResult]):
    TITLE = "ctmon"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("ctrl+c", "ctrl_c", "Stop the job", priority=True, show=False),
        Binding("ctrl+q", "request_quit", "Quit", priority=True, show=False),
    ]

    def __init__(
        self,
        feed: Feed,
        *,
        launched: bool = False,
        replay: bool = False,
        clock: Callable[[], float] = time.time,
        title: str | None = None,
        recording: str | None = None,
        ingest_budget_s: float = INGEST_BUDGET_S,
        refresh_min_s: float = REFRESH_MIN_S,
        stop_grace: float = protocol.DEFAULT_STOP_GRACE_S,
    ) -> None:
        super().__init__()
        self.feed = feed
        self.stop_grace = stop_grace  # Stop: SIGTERM, SIGKILL this long after (0: never)
        self.full = Session()  # everything read so far
        # a recording is read again from the file when the replay moves back
        # (see Timeline), with the cleaning applied as it is read here
        path = feed.path if isinstance(feed, RecordingFeed) else None
        self.timeline = Timeline(path=path, fix=CLEAN_EVENTS) if replay else None
        self.ctx = ViewContext(
            self.full,
            live=bool(feed.live) and not replay,
            launched=launched,
            clock=clock,
            replay=ReplayInfo() if replay else None,
            title=title,
        )
        self.recording = recording
        self.pump = Pump(
            self.full, self.timeline, self._wake, ingest_budget_s=ingest_budget_s, refresh_min_s=refresh_min_s
        )
        self.view_refreshes = 0
        self.feed_error: str | None = None
        self._refresh_timer: Timer | None = None
        self._reader: threading.Thread | None = None
        self._stop_reading = False
        self._interrupts = 0
        self._quit_on_exit = False
        self._finished = False
        self.main: MainScreen | None = None
        self.replay_control = ReplayControl(self.ctx, self.full, self.timeline, self.refresh_views, self.set_interval)

    # ------------------------------------------------------------- set-up

    def get_default_screen(self) -> Screen[Any]:
        self.main = MainScreen(self.ctx)
        return self.main

    def on_mount(self) -> None:
        if self.ctx.live:
            self.set_interval(CLOCK_S, self._on_clock, name="clock")
        if not self.is_headless:
            try:
                loop = asyncio.get_running_loop()
                # SIGTERM, and every other signal that would end the viewer
                # outright: an orderly exit (the terminal restored; a launched
                # job runs on under its supervisor). SIGHUP stays with
                # run_app's handler (leave at once): its terminal is gone, and
                # an orderly shutdown writing to a dead tty was seen to hang.
                for sig in LEAVE_SIGNALS:
                    loop.add_signal_handler(sig, self.finish, "detached")
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def start_reading(self) -> None:
        """Called once the main screen is up: the first paint comes before
        the first event (a long history must not hold up the screen)."""
        if self._reader is None:
            tune_gc()
            self._reader = threading.Thread(target=self._read_feed, name="ctmon-feed", daemon=True)
            self._reader.start()
            self.refresh_views(True)

    def on_unmount(self) -> None:
        self._close_feed()

    # ------------------------------------------------------------ reading

    def _read_feed(self) -> None:
        error = None
        # recorded strings are cleaned off the UI thread (ctmon.words.textsafe): by
        # the feed as it decodes, where it can judge the bytes, else here
        feed_cleans = self.feed.fixes(CLEAN_EVENTS)
        try:
            for batch in self.feed.batches():
                if self._stop_reading:
                    break
                if not feed_cleans:
                    cleaned = [clean_event(ev) for ev in batch]
                    batch = FileBatch(cleaned, batch.end) if isinstance(batch, FileBatch) else cleaned
                self.handoff.put(batch)
        except Exception as e:  # a broken socket or file: say so, keep showing what we have
            error = f"{type(e).__name__}: {e}"
        self._post(FeedEnded(error))

    def _wake(self) -> None:
        self._post(Ingest())

    def _post(self, message: Message) -> None:
        try:
            self.post_message(message)
        except RuntimeError:  # the event loop is gone: the app has exited
            pass

    async def on_ingest(self, _: Ingest) -> None:
        n, out_of_time = self.pump.fold(self.pump.deadline())
        if out_of_time:
            self._after_fold()
            await self._make_way()
            self._post(Ingest())  # the rest, after the screen has had its turn
        elif n:
            self._after_fold()

    async def _make_way(self) -> None:
        """Out of budget with events still waiting: let the screen repaint.

        Going straight on would starve it: a message queue that is never
        empty never yields to the other tasks (widgets, the screen's update
        timer). So, when a repaint is due, update the views and wait until
        the screen has been drawn (bounded, in case it has nothing to draw).
        """
        if self._finished:
            return
        if not self.pump.paint_due(self.ctx.paused):
            await asyncio.sleep(0)
            return
        if self._refresh_timer is not None:
            self._refresh_timer.stop()
            self._refresh_timer = None
        t0 = perf_counter()
        if not self.refresh_views():
            await asyncio.sleep(0)
            return
        await asyncio.sleep(0.002)  # widgets tell the screen what is dirty
        try:
            await asyncio.wait_for(self.screen.wait_for_refresh(), PAINT_WAIT_S)
        except (asyncio.TimeoutError, AssertionError):
            pass
        self.pump.painted(perf_counter() - t0)

    def _after_fold(self, schedule: bool = True) -> None:
        """Events were folded: follow them in replay, see whether the feed is
        done or the job has exited, and (unless a repaint is running) ask for one."""
        if self._finished:
            return
        r = self.ctx.replay
        if r is not None:
            r.total = self.applied
            if self.ctx.session is self.full:
                r.position = r.total
        self._check_loaded()
        if self._quit_on_exit and (self.full.exit is not None or self._drained):
            self.finish("stopped")
            return
        if schedule:
            self._schedule_refresh()

    def on_feed_ended(self, message: FeedEnded) -> None:
        self.ctx.feed_done = True
        if message.error:
            self.feed_error = message.error
            self.notify(clean(f"feed stopped: {message.error}"), severity="error", timeout=8, markup=False)
        self._check_loaded()
        if self._quit_on_exit and self._drained:  # else the last events decide, once folded
            self.finish("stopped")
            return
        self._schedule_refresh()

    @property
    def applied(self) -> int:
        return self.pump.applied

    @property
    def handoff(self) -> Handoff:
        return self.pump.handoff

    @property
    def _drained(self) -> bool:
        return self.ctx.feed_done and self.pump.empty

    def _check_loaded(self) -> None:
        r = self.ctx.replay
        if r is not None and r.loading and self._drained:
            r.loading = False

    @property
    def loaded(self) -> bool:
        """Everything the feed will send has been folded and drawn (tests wait on it)."""
        return self._drained and self._refresh_timer is None and self.main is not None and self.main.is_mounted

    # ---------------------------------------------------------- repainting

    def _schedule_refresh(self) -> None:
        if self.ctx.paused or self._refresh_timer is not None:
            return
        delay = self.pump.refresh_delay(always_urgent=self.ctx.replay is not None)
        self._refresh_timer = self.set_timer(delay, self._do_refresh, name="refresh")

    def _do_refresh(self) -> None:
        self._refresh_timer = None
        folded, wake = self.pump.before_refresh()
        if folded:
            self._after_fold(schedule=False)  # this repaint shows them
        if wake:
            self._wake()  # a backlog is left: fold it through the budgeted path
        if not self.ctx.paused:
            self.refresh_views()

    def refresh_views(self, force: bool = False) -> int:
        backlog, lists_due = self.pump.refreshing(force)
        main = self.main
        if main is None or not main.is_mounted or self._closing or self._finished:
            return 0
        # a file (report view or replay) catches up until it is read to the
        # end, also when the reader falls behind the fold for a moment: the
        # findings would otherwise run over a half-read file
        self.ctx.catching_up = backlog or (not self.feed.live and not self._drained)
        changed = 0
        with self.batch_update():
            for view in main.views():
                if not lists_due and isinstance(view, Pane):
                    continue
                if view.maybe_update(force):
                    changed += 1
            for bar in main.query(KeyBar):
                bar.maybe_update()
            for tabs in main.query(TabStrip):
                tabs.maybe_update()  # it carries the current pane's title
        if changed:
            self.view_refreshes += 1
        return changed

    def _on_clock(self) -> None:
        self._schedule_refresh()

    def toggle_pause(self) -> None:
        ctx = self.ctx
        ctx.paused = not ctx.paused
        if self.main is None:
            return
        if ctx.paused:
            for w in self.main.query(HeaderBar):
                w.maybe_update(force=True)
            for bar in self.main.query(KeyBar):
                bar.maybe_update()
        else:
            self.refresh_views()

    # --------------------------------------------------------- job control

    def action_job_input(self) -> None:
        from ctmon.tui.stdin_prompt import open_stdin_prompt

        open_stdin_prompt(self)

    def action_ctrl_c(self) -> None:
        if not self.ctx.job_running:
            self.action_request_quit()
            return
        if self._interrupts == 0:
            ok = self.feed.control("interrupt")
            self.notify(
                "sent SIGINT to the job; Ctrl-C again kills it" if ok else "could not reach the job",
                severity="warning",
                timeout=4,
            )
        else:
            ok = self.feed.control("kill")
            self.notify("sent SIGKILL to the job" if ok else "could not reach the job", severity="error", timeout=4)
        self._interrupts += 1

    def action_request_quit(self) -> None:
        ctx = self.ctx
        if ctx.job_running and ctx.launched:
            if isinstance(self.screen, ConfirmStop):
                return
            self.push_screen(ConfirmStop(self.full.meta.pid, self.stop_grace), self._on_confirm)
            return
        self.finish("detached" if ctx.job_running else "quit")

    def _on_confirm(self, choice: str | None) -> None:
        if choice == "stop":
            self.stop_job()
        elif choice == "detach":
            self.finish("detached")

    def stop_job(self) -> None:
        if not self.ctx.job_running:
            self.finish("quit")
            return
        grace = self.stop_grace
        self.ctx.status = f"■ stopping… (SIGKILL in {grace:g} s)" if grace > 0 else "■ stopping…"
        self._quit_on_exit = True
        # The supervisor escalates to SIGKILL after the grace, so the job is
        # stopped even if this viewer quits or loses its connection meanwhile.
        self.feed.control("stop", grace=grace)
        if grace > 0:
            self.set_timer(grace + STOP_GIVE_UP_AFTER_KILL_S, lambda: self.finish("stopped"))
        self.refresh_views()  # the user's own action shows at once, not at the steady cadence

    def finish(self, how: str) -> None:
        if self._finished:
            return
        self._finished = True
        self._close_feed()
        self.exit(AppResult(how, self.full.exit, self.full))

    def _close_feed(self) -> None:
        self._stop_reading = True
        self.handoff.close()
        try:
            self.feed.close()
        except OSError:
            pass

    # -------------------------------------------------------------- replay

    def replay_goto(self, position: int) -> None:
        self.replay_control.goto(position)

    def action_replay_step(self, direction: int) -> None:
        self.replay_control.step(direction)

    def action_replay_jump(self, direction: int) -> None:
        self.replay_control.jump(direction)

    def action_replay_play(self) -> None:
        self.replay_control.play()

    def action_replay_speed(self, factor: float) -> None:
        self.replay_control.speed(factor)
