"""Screens over the main view: details, help, filter, the stop-the-job question."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Input, SelectionList, Static
from textual.widgets.selection_list import Selection

from ctmon.tui.doc import Doc
from ctmon.tui.safe import clean, safe_text

# Quitting: where a job runs, q and Ctrl-C reach it; a replay has no job to stop.
QUIT_KEYS: list[tuple[str, str]] = [
    ("q", "quit (asks whether to stop the job if ctmon started it)"),
    ("Ctrl-C", "stop the job (SIGINT); again: kill it"),
]
QUIT_REPLAY_KEYS: list[tuple[str, str]] = [("q / Ctrl-C", "quit")]
KEYS: list[tuple[str, str]] = [
    ("?", "this help"),
    ("Tab / Shift-Tab", "next / previous pane (frames, graph breaks, events, output)"),
    ("↑ ↓ PgUp PgDn Home End", "move in the pane (also j / k / g / G)"),
    ("Enter", "details: a frame's compiles, a graph break's source and stack"),
    ("Esc", "close details or dialogs; in a pane: clear its filter"),
    ("/", "filter the pane (text; events also by kind)"),
    ("f", "events: cycle kinds (all, compiles, recompiles, breaks, cache, alerts)"),
    ("a", "all findings: what is wrong, where, the evidence and the fix (the Findings pane lists the first)"),
    ("r", "ranks of a distributed job: what each is doing; Enter shows one rank in the panes"),
    ("space", "pause the view (data keeps being collected)"),
]
# Only where a job runs (attach, watch): a replay has no stdin to type into.
JOB_KEYS: list[tuple[str, str]] = [
    ("i", "type a line into the job's stdin (under attach the job reads its terminal)"),
]
REPLAY_KEYS: list[tuple[str, str]] = [
    ("[ / ]", "step to the previous / next compile, graph break or exit"),
    ("{ / }", "jump back / forward 10% of the run"),
    ("p", "play / pause (from the start when at the end)"),
    ("+ / -", "play faster / slower"),
]
LEGEND = [
    ("!", "under a step bar: that step paid a compile (also magenta)"),
    ("^", "under a step bar: taller than the chart's scale"),
    ("budget n/m", "a frame's compiled versions / recompile limit; '!' when the limit is hit"),
    ("warn, CRIT", "severities; the Findings pane lists what is warn or worse (a: all, with fixes)"),
]


def _table(rows: Iterable[tuple[str, str]], key_width: int = 24) -> Doc:
    """Keys and what they do; a long description wraps under itself, not under the keys."""
    out = Doc()
    for k, v in rows:
        out.para(v, Text(f"  {k:<{key_width}}", "bold"))
    return out


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 96; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    """
    BINDINGS = [
        Binding("escape,question_mark,q", "close", "Close"),
    ]

    def __init__(self, replay: bool = False) -> None:
        super().__init__()
        self.replay = replay

    def compose(self) -> ComposeResult:
        text = Doc().line(("ctmon — keys", "bold"))
        text.extend(_table(QUIT_REPLAY_KEYS if self.replay else QUIT_KEYS))
        text.extend(_table(KEYS))
        if not self.replay:
            text.extend(_table(JOB_KEYS))
        if self.replay:
            text.blank().line(("Replay", "bold"))
            text.extend(_table(REPLAY_KEYS))
        text.blank().line(("Marks", "bold"))
        text.extend(_table(LEGEND, 14))
        text.blank().line(("Esc, ? or q closes this help.", "dim"))
        with VerticalScroll(id="help-body") as v:
            v.border_title = "Help"
            yield Static(text, id="help-text")

    def action_close(self) -> None:
        self.dismiss(None)


class ConfirmStop(ModalScreen[str | None]):
    """q while the job runs: stop it, leave it running, or stay."""

    DEFAULT_CSS = """
    ConfirmStop { align: center middle; }
    ConfirmStop > Vertical {
        width: 64; max-width: 100%; height: auto;
        border: thick $warning; background: $surface; padding: 1 2;
    }
    ConfirmStop #question { margin-bottom: 1; }
    ConfirmStop Horizontal { height: auto; }
    ConfirmStop Button { margin-right: 1; min-width: 12; }
    """
    BINDINGS = [
        Binding("y,s", "choose('stop')", "Stop the job"),
        Binding("d,l", "choose('detach')", "Leave it running"),
        Binding("n,c,escape", "choose('cancel')", "Cancel"),
    ]

    def __init__(self, pid: int | None, grace: float = 30.0) -> None:
        super().__init__()
        self.pid = pid
        self.grace = grace

    def compose(self) -> ComposeResult:
        who = f"pid {self.pid}" if self.pid else "the job"
        how = (
            f"Stop sends SIGTERM now, SIGKILL after {self.grace:g} s if it still runs"
            if self.grace > 0
            else "Stop sends SIGTERM only; no SIGKILL follows"
        )
        with Vertical() as v:
            v.border_title = "Stop the job?"
            yield Static(
                Text.assemble(
                    ("The job is still running ", "bold"),
                    f"({who}).\n",
                    "Stop it, or leave it running and come back with ",
                    ("ctmon watch", "bold"),
                    "?\n",
                    (f"{how} (--stop-grace).", "dim"),
                ),
                id="question",
            )
            with Horizontal():
                yield Button(Text("Stop it (y)"), id="stop", variant="error")
                yield Button(Text("Leave running (d)"), id="detach", variant="primary")
                yield Button(Text("Cancel (n)"), id="cancel")

    def on_mount(self) -> None:
        self.query_one("#stop", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_choose(event.button.id or "cancel")

    def action_choose(self, choice: str) -> None:
        self.dismiss(None if choice == "cancel" else choice)


class FilterScreen(ModalScreen["tuple[str, frozenset[str] | None] | None"]):
    """``/``: a text filter for the focused pane; for events also the kinds shown."""

    DEFAULT_CSS = """
    FilterScreen { align: center middle; }
    FilterScreen > Vertical {
        width: 70; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    FilterScreen SelectionList { height: auto; max-height: 12; margin-top: 1; }
    FilterScreen .hint { color: $text-muted; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("enter", "apply", "Apply", priority=True),
    ]

    def __init__(
        self,
        pane_name: str,
        text: str,
        kinds: list[tuple[str, str]] | None = None,
        selected: frozenset[str] | None = None,
    ) -> None:
        super().__init__()
        self.pane_name = pane_name
        self.text = text
        self.kinds = kinds
        self.selected = selected

    def compose(self) -> ComposeResult:
        with Vertical() as v:
            v.border_title = f"Filter {self.pane_name}"
            yield Input(value=self.text, placeholder="text to match (empty: show all)", id="filter-text")
            if self.kinds is not None:
                yield SelectionList[str](
                    *[
                        Selection(label, kind, self.selected is None or kind in self.selected)
                        for kind, label in self.kinds
                    ],
                    id="filter-kinds",
                )
            yield Static(
                "Enter applies · Esc cancels" + (" · Tab to the kinds, space toggles" if self.kinds else ""),
                classes="hint",
            )

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._apply()

    def action_apply(self) -> None:
        self._apply()

    def _apply(self) -> None:
        text = self.query_one(Input).value
        kinds: frozenset[str] | None = None
        if self.kinds is not None:
            chosen = frozenset(self.query_one(SelectionList).selected)
            kinds = None if len(chosen) == len(self.kinds) else chosen
        self.dismiss((text, kinds))

    def action_cancel(self) -> None:
        self.dismiss(None)


class DetailScreen(Screen[None]):
    DEFAULT_CSS = """
    DetailScreen > VerticalScroll { border: round $accent; padding: 0 1; }
    DetailScreen #detail-keys { dock: bottom; height: 1; background: $panel; }
    """
    BINDINGS = [
        Binding("escape,q,backspace,enter", "close", "Back"),
        Binding("j,down", "scroll(1)", show=False),
        Binding("k,up", "scroll(-1)", show=False),
    ]

    def __init__(self, title: str, body: Text | Doc, name: str) -> None:
        super().__init__(name=name)
        # recorded text, shown literally: no markup, no control characters
        self.title_text = clean(title, tab=" ")
        self.body: Text | Doc = body.map(safe_text) if isinstance(body, Doc) else safe_text(body, tab_size=None)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail-body") as v:
            v.border_title = Content(self.title_text)
            yield Static(self.body, id="detail-text")
        yield Static(
            Text.assemble((" Esc ", "bold reverse"), " back  ", (" ↑↓ PgUp PgDn ", "bold reverse"), " scroll"),
            id="detail-keys",
        )

    def on_mount(self) -> None:
        self.query_one("#detail-body").focus()

    def action_scroll(self, delta: int) -> None:
        body = self.query_one("#detail-body", VerticalScroll)
        body.scroll_relative(y=delta, animate=False)

    def action_close(self) -> None:
        self.dismiss(None)
