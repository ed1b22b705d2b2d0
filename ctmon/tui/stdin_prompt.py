"""``i``: type a line for the job's stdin.

Under ``ctmon attach`` the TUI owns the keyboard, so the job's stdin is the
pseudo-terminal its output goes to (``isatty()`` is true, as in a terminal).
A line typed here is sent to the supervisor, which writes it to that
terminal; the terminal's echo shows it in the Output pane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

if TYPE_CHECKING:
    from ctmon.tui.app import CtmonApp

MAX_LINE = 3000  # the supervisor passes at most 4000 bytes of input at once


class StdinPrompt(ModalScreen["str | None"]):
    DEFAULT_CSS = """
    StdinPrompt { align: center middle; }
    StdinPrompt > Vertical {
        width: 80; max-width: 100%; height: auto;
        border: round $accent; background: $surface; padding: 0 1;
    }
    StdinPrompt .hint { color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical() as v:
            v.border_title = "Input to the job's stdin"
            yield Input(
                placeholder="a line for the job (Enter sends it with a newline)", max_length=MAX_LINE, id="stdin-line"
            )
            yield Static("Enter sends · Esc cancels", classes="hint")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


def open_stdin_prompt(app: CtmonApp) -> None:
    """Ask for a line and send it; only for a running job this viewer can reach."""
    if not app.ctx.job_running or not app.feed.live:
        app.notify("the job is not running: no stdin to type into", severity="warning", timeout=3)
        return

    def send(line: str | None) -> None:
        if line is None:
            return
        ok = app.feed.send_stdin(line + "\n")
        app.notify(
            "sent to the job's stdin" if ok else "could not reach the job",
            severity="information" if ok else "error",
            timeout=3,
        )

    app.push_screen(StdinPrompt(), send)
