"""The main screen: the summary panels above, the four long lists below,
one list at a time (with a tab strip) in small terminals. The app feeds it;
the screen lays out the views and answers the keys that act on them."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, Horizontal
from textual.screen import Screen
from textual.widget import Widget

from ctmon.tui.compile_panes import BreaksPane, FramesPane, Pane
from ctmon.tui.context import StoreView, ViewContext
from ctmon.tui.details import (
    break_detail,
    break_title,
    entry_detail,
    find_break,
    find_frame,
    frame_detail,
    frame_title,
)
from ctmon.tui.failure import FailurePanel
from ctmon.tui.linelist import LineList
from ctmon.tui.panels import (
    AlertsPanel,
    CompilePanel,
    GpuPanel,
    HeaderBar,
    KeyBar,
    ProcessPanel,
    StepsPanel,
)
from ctmon.tui.safe import ansi_text
from ctmon.tui.screens import DetailScreen, FilterScreen, HelpScreen
from ctmon.tui.stream_panes import KIND_LABEL, EventsPane, OutputPane

COMPACT_WIDTH = 120
COMPACT_HEIGHT = 36
LOWER_MIN = 5  # a small screen keeps at least these rows for the list below (its column heads and 4 rows)
PANES = ("frames", "breaks", "events", "output")
PANE_TITLES = {"frames": "Frames", "breaks": "Graph breaks", "events": "Events", "output": "Output"}


@runtime_checkable
class ScreenHost(Protocol):
    """What the screen asks of the app that hosts it."""

    def start_reading(self) -> None: ...

    def toggle_pause(self) -> None: ...


class TabStrip(Widget):
    """In small terminals one list pane shows at a time; this says which, and
    is that pane's title (its count, whose figures, its filter): the pane
    itself then needs no title line."""

    DEFAULT_CSS = """
    TabStrip { height: 1; background: $panel; }
    """

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.current = PANES[0]
        self._key: tuple[str, tuple[str, ...], int] | None = None

    def _titles(self) -> dict[str, str]:
        screen = self.screen
        titles = {}
        for name in PANES:
            pane = screen.query_one(f"#{name}", Pane) if isinstance(screen, MainScreen) else None
            titles[name] = (pane.title_plain if pane is not None else "") or PANE_TITLES[name]
        return titles

    def maybe_update(self) -> None:
        key = (self.current, tuple(self._titles().values()), self.size.width)
        if key != self._key:
            self._key = key
            self.refresh()

    def render(self) -> Text:
        titles = self._titles()
        width = max(1, self.size.width)
        hint = Text(" Tab ⇥", "dim")
        out = Text(" ")
        for name in PANES:
            if name == self.current:
                out.append(f" {titles[name]} ", "bold reverse")
            else:
                out.append(f" {PANE_TITLES[name]} ", "dim")
            out.append(" ")
        if out.cell_len + hint.cell_len <= width:
            out.append_text(hint)
        out.truncate(width, overflow="ellipsis")
        return out


class MainScreen(Screen[None]):
    DEFAULT_CSS = """
    MainScreen { layout: vertical; }
    #top { height: 9; }
    #steps { width: 5fr; height: 100%; }
    #sys { width: 6fr; height: 100%; layout: horizontal; }
    #gpu { width: 3fr; height: 100%; }
    #proc { width: 2fr; height: 100%; }
    #mid { height: 6; }
    #compile { width: 3fr; height: 100%; }
    #alerts { width: 2fr; height: 100%; }
    #failure { border: round $error; padding: 0 1; }
    #tabs { display: none; }
    #header { border: none; padding: 0 1; }
    #lower { layout: grid; grid-size: 2 2; grid-columns: 3fr 2fr; height: 1fr; }
    Panel, Pane {
        border: round $panel-lighten-2;
        border-title-color: $text;
        border-title-style: bold;
        padding: 0 1;
    }
    Pane { height: 1fr; padding: 0; }
    Pane:focus { border: round $accent; }
    #alerts { border: round $error 60%; }

    MainScreen.-compact #top { height: 6; }
    MainScreen.-compact #steps { width: 1fr; }
    MainScreen.-compact #sys { width: 38; layout: vertical; }
    MainScreen.-compact #gpu { width: 100%; height: 3; }
    MainScreen.-compact #proc { width: 100%; height: 3; }
    MainScreen.-compact.-tall #top { height: 8; }
    MainScreen.-compact.-tall #gpu { height: 4; }
    MainScreen.-compact.-tall #proc { height: 4; }
    MainScreen.-compact #mid { height: auto; layout: vertical; }
    MainScreen.-compact #compile { width: 100%; height: 4; }
    MainScreen.-compact #alerts { width: 100%; }
    MainScreen.-compact #tabs { display: block; }
    MainScreen.-compact #lower { layout: vertical; }
    MainScreen.-compact Panel, MainScreen.-compact Pane {
        border: none;
        border-top: solid $panel-lighten-2;
        padding: 0;
    }
    MainScreen.-compact #alerts { border: none; border-top: solid $warning 70%; padding: 0; }
    MainScreen.-compact #failure { border: none; border-top: solid $error; padding: 0; }
    MainScreen.-compact.-failed #top { display: none; }
    MainScreen.-compact Pane, MainScreen.-compact Pane:focus { border: none; }
    MainScreen.-compact #steps { padding-right: 1; }
    MainScreen.-compact Pane { display: none; }
    MainScreen.-compact Pane.-current { display: block; }
    """

    BINDINGS = [
        Binding("q", "app.request_quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("slash", "filter", "Filter"),
        Binding("space", "pause", "Pause"),
        Binding("tab", "pane(1)", "Next pane", priority=True),
        Binding("shift+tab", "pane(-1)", "Previous pane", priority=True),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("f", "cycle_kinds", "Event kinds", show=False),
        Binding("a", "findings", "Findings", show=False),
        Binding("r", "ranks", "Ranks", show=False),
        Binding("i", "app.job_input", "Input to the job", show=False),
        Binding("left_square_bracket", "app.replay_step(-1)", "Step back", show=False),
        Binding("right_square_bracket", "app.replay_step(1)", "Step forward", show=False),
        Binding("left_curly_bracket", "app.replay_jump(-1)", "Jump back", show=False),
        Binding("right_curly_bracket", "app.replay_jump(1)", "Jump forward", show=False),
        Binding("p", "app.replay_play", "Play", show=False),
        Binding("plus,equals_sign", "app.replay_speed(2.0)", "Faster", show=False),
        Binding("minus", "app.replay_speed(0.5)", "Slower", show=False),
    ]

    def __init__(self, ctx: ViewContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.current_pane = PANES[0]
        self.compact = False
        self._views: list[StoreView] | None = None

    def compose(self) -> ComposeResult:
        ctx = self.ctx
        yield HeaderBar(ctx, id="header")
        yield FailurePanel(ctx, id="failure")
        with Horizontal(id="top"):
            yield StepsPanel(ctx, id="steps")
            with Container(id="sys"):
                yield GpuPanel(ctx, id="gpu")
                yield ProcessPanel(ctx, id="proc")
        with Horizontal(id="mid"):
            yield CompilePanel(ctx, id="compile")
            yield AlertsPanel(ctx, id="alerts")
        yield TabStrip(id="tabs")
        with Container(id="lower"):
            yield FramesPane(ctx, id="frames")
            yield EventsPane(ctx, id="events")
            yield BreaksPane(ctx, id="breaks")
            yield OutputPane(ctx, id="output")
        yield KeyBar(ctx, id="keys")

    def on_mount(self) -> None:
        self.query_one("#frames", Pane).add_class("-current")
        self.query_one("#frames", Pane).focus()
        self._apply_size(self.size.width, self.size.height)
        self.call_after_refresh(self._ready)

    def _ready(self) -> None:
        app = self.app
        if isinstance(app, ScreenHost):
            app.start_reading()

    def views(self) -> list[StoreView]:
        if self._views is None:
            self._views = [w for w in self.walk_children() if isinstance(w, StoreView)]
        return self._views

    def pane(self, name: str) -> Pane:
        return self.query_one(f"#{name}", Pane)

    def on_resize(self, event: events.Resize) -> None:
        self._apply_size(event.size.width, event.size.height)

    def _apply_size(self, width: int, height: int) -> None:
        compact = width < COMPACT_WIDTH or height < COMPACT_HEIGHT
        self.compact = compact
        self.set_class(compact, "-compact")
        self.set_class(height >= 30, "-tall")  # a small screen with rows to spare: a taller steps chart
        # small screens: the findings are a strip as tall as what it lists,
        # up to two lines at 24 rows, three from 30
        alerts = self.query_one("#alerts", AlertsPanel)
        alerts.max_lines = (2 if height < 30 else 3) if compact else None
        if not compact:
            alerts.styles.height = "100%"
            alerts.display = True
        # a failed job's traceback: a third of the screen; on a small one it
        # takes the place of the steps and resources (the job is over)
        self.query_one("#failure", FailurePanel).max_lines = max(4, height // 3)
        for view in self.views():
            if isinstance(view, (AlertsPanel, FailurePanel)):
                view.maybe_update(force=True)

    def place_failure(self, rows: int) -> None:
        """A failed job's traceback is ``rows`` lines (0: none shown). On a
        small screen it takes the place of the steps and resources (the job
        is over) when both would leave the list below fewer than LOWER_MIN rows."""
        h = self.size.height
        top = 8 if h >= 30 else 6
        strip = (self.query_one("#alerts", AlertsPanel).max_lines or 0) + 1
        lower = h - (2 + rows + 1 + top + 4 + strip + 1 + 1)  # header, traceback, top, compile, findings, tabs, keys
        self.set_class(self.compact and rows > 0 and lower < LOWER_MIN, "-failed")

    # ---- panes ----

    def focused_pane(self) -> Pane:
        f = self.focused
        if isinstance(f, Pane):
            return f
        return self.pane(self.current_pane)

    def set_current(self, name: str, focus: bool = True) -> None:
        for n in PANES:
            self.pane(n).set_class(n == name, "-current")
        self.current_pane = name
        tabs = self.query_one(TabStrip)
        tabs.current = name
        tabs.refresh()
        if focus:
            self.pane(name).focus()

    def action_pane(self, delta: int) -> None:
        i = PANES.index(self.current_pane)
        self.set_current(PANES[(i + delta) % len(PANES)])

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        w = event.widget
        if isinstance(w, Pane) and w.NAME in PANES and w.NAME != self.current_pane:
            self.set_current(w.NAME, focus=False)

    # ---- keys that act on the view ----

    def action_findings(self) -> None:
        from ctmon.tui.panels import findings_body
        from ctmon.tui.panels.findings import current_findings

        n = len(current_findings(self.ctx))
        self.app.push_screen(DetailScreen(f"Findings · {n}", findings_body(self.ctx), "findings"))

    def action_ranks(self) -> None:
        from ctmon.tui.ranks_screen import RanksScreen

        if not self.ctx.session.ranks:
            self.notify("not a distributed job: no ranks have reported", timeout=2)
            return

        def chosen(_: None) -> None:
            for view in self.views():  # another rank: every pane that follows one redraws
                view.maybe_update(force=True)

        self.app.push_screen(RanksScreen(self.ctx), chosen)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(replay=self.ctx.replay is not None))

    def action_pause(self) -> None:
        app = self.app
        assert isinstance(app, ScreenHost)
        app.toggle_pause()

    def action_filter(self) -> None:
        pane = self.focused_pane()
        if isinstance(pane, EventsPane):
            kinds = [(k, f"{label.lower()} ({k})") for k, (label, _) in KIND_LABEL.items()]
            screen = FilterScreen(PANE_TITLES[pane.NAME], pane.filter_text, kinds, pane.kinds)
        else:
            screen = FilterScreen(PANE_TITLES.get(pane.NAME, pane.NAME), pane.filter_text)

        def done(result: tuple[str, frozenset[str] | None] | None) -> None:
            if result is None:
                return
            text, kinds = result
            if isinstance(pane, EventsPane):
                pane.kinds = kinds
                pane.preset = -1 if kinds is not None else 0
            pane.set_filter(text)

        self.app.push_screen(screen, done)

    def action_clear_filter(self) -> None:
        pane = self.focused_pane()
        if isinstance(pane, EventsPane) and pane.kinds is not None:
            pane.set_kinds(None)
        if pane.filter_text:
            pane.set_filter("")

    def action_cycle_kinds(self) -> None:
        pane = self.query_one("#events", EventsPane)
        if self.compact and self.current_pane != "events":
            self.set_current("events")
        name = pane.cycle_kinds()
        self.notify(f"events: {name}", timeout=1.5)

    def on_line_list_selected(self, event: LineList.Selected) -> None:
        ctx = self.ctx
        item = event.item
        pane = event.line_list
        screen: Screen[Any] | None = None
        if isinstance(pane, FramesPane):
            screen = DetailScreen(frame_title(item, ctx), frame_detail(item, ctx), name="frame-detail")
        elif isinstance(pane, BreaksPane):
            screen = DetailScreen(break_title(item, ctx), break_detail(item, ctx), name="break-detail")
        elif isinstance(pane, EventsPane):
            frame = find_frame(ctx.view, item.ref) if item.kind in ("compile", "recompile", "limit", "error") else None
            site = find_break(ctx.view, item.ref) if item.kind == "graph_break" else None
            if frame is not None:
                screen = DetailScreen(frame_title(frame, ctx), frame_detail(frame, ctx), name="frame-detail")
            elif site is not None:
                screen = DetailScreen(break_title(site, ctx), break_detail(site, ctx), name="break-detail")
            else:
                screen = DetailScreen(f"Event: {item.kind}", entry_detail(item, ctx), name="event-detail")
        elif isinstance(pane, OutputPane):
            screen = DetailScreen("Output line", ansi_text(item.text), name="output-detail")
        if screen is not None:
            self.app.push_screen(screen)
