"""The ranks of a distributed job, one line each, and the rank filter.

``r`` opens it over the main view. Each line says what the rank is doing now
-- stepping, compiling which frame for how long, waiting for a rank that
compiles, stalled with nothing compiling -- with its steps, last and median
step, compiles, recompiles, breaks and FX-cache results; the slowest rank is
marked. Enter shows that rank in the panes that follow one process (steps,
compilation, frames, graph breaks, events); "all ranks" goes back to the job
(the Compilation pane's totals summed over the ranks, the lists of the primary
rank, local rank 0; each pane's title names whose figures it shows). The
lines are redrawn twice a second, so a rank that has been compiling for 40 s
says so while it happens.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from ctmon.store.rank_status import RankStatus, rank_statuses
from ctmon.tui import fmt
from ctmon.tui.context import ViewContext
from ctmon.tui.safe import clean

STATE_STYLE = {
    "stepping": "green",
    "compiling": "bold yellow",
    "waiting": "bold magenta",
    "stalled": "bold red",
    "starting": "dim",
    "ended": "cyan",
    "exited": "bold red",
}


HOST_WIDTH = 12


def rank_line(x: RankStatus, width: int, show_host: bool = False) -> Text:
    """One rank: 'r1  compiling forward for 12 s   240 st  last 9.1 ms  p50 9.0 ms  2 c 1 rc 0 b  fx 0/2'
    (narrower terminals drop the last step and the spaces); with ``show_host``
    (ranks on several nodes) its host follows the rank."""
    state = x.state + (f" {x.detail}" if x.detail else "")
    if width >= 130:
        nums = (
            f"{fmt.count(x.steps):>6} st  last {fmt.ms(x.last_ms):>8}  p50 {fmt.ms(x.p50_ms):>8}  "
            f"{x.compiles} c {x.recompiles} rc {x.breaks} b  fx {x.fx_hit}/{x.fx_miss}"
        )
    else:
        nums = (
            f"{fmt.count(x.steps):>5} st p50 {fmt.ms(x.p50_ms):>8} "
            f"{x.compiles} c {x.recompiles} rc {x.breaks} b fx {x.fx_hit}/{x.fx_miss}"
        )
    head = f"{'*' if x.slowest else ' '}r{x.rank:<4}"
    if show_host:
        head += f" {fmt.clip(clean(x.host or '?'), HOST_WIDTH):<{HOST_WIDTH}}"
    room = max(12, width - len(head) - len(nums) - 3)
    line = Text(head, "bold red" if x.slowest else "bold")
    line.append(" ")
    line.append(fmt.clip(clean(state), room).ljust(room), STATE_STYLE.get(x.state, ""))
    line.append("  " + nums)
    line.truncate(width, overflow="ellipsis")
    return line


def ranks_summary(ctx: ViewContext) -> str | None:
    """For the header: '8 ranks: 1 compiling, 7 waiting', and which rank is shown."""
    s = ctx.session
    if not s.ranks:
        return None
    now = ctx.now() or s.last_t or 0.0
    states: dict[str, int] = {}
    for x in rank_statuses(s, now, figures=False):
        states[x.state] = states.get(x.state, 0) + 1
    busy = [f"{n} {st}" for st, n in sorted(states.items()) if st not in ("stepping", "ended")]
    shown = f" · showing rank {ctx.rank} (r)" if ctx.rank is not None else ""
    return fmt.plural(len(s.ranks), "rank") + (f": {', '.join(busy)}" if busy else "") + shown


def all_ranks_line(ctx: ViewContext, width: int) -> Text:
    """The first row: what the job's own view shows, with the totals the
    Compilation pane, the report and the end-of-run summary give."""
    from ctmon.tui.panels.compilation import job_totals

    t = job_totals(ctx.session)
    primary = ctx.session.primary_rank
    lists = f"; steps, frames, breaks, events: rank {primary}" if primary is not None else ""
    line = Text("  all ranks (the job", "bold")
    line.append(f": Compilation sums them{lists})")
    line.append(f"  {t.compiles} c {t.recompiles} rc {t.breaks} b in all", "bold")
    line.truncate(width, overflow="ellipsis")
    return line


class RanksScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    RanksScreen { align: center middle; }
    RanksScreen > Vertical {
        width: 100%; max-width: 140; height: auto; max-height: 100%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    RanksScreen #ranks-keys { height: 1; color: $text-muted; }
    """
    BINDINGS = [
        Binding("escape,q,r", "close", "Close"),
        Binding("up,k", "move(-1)", show=False),
        Binding("down,j", "move(1)", show=False),
        Binding("pageup", "move(-10)", show=False),
        Binding("pagedown", "move(10)", show=False),
        Binding("enter", "choose", "Show this rank"),
    ]

    def __init__(self, ctx: ViewContext) -> None:
        super().__init__()
        self.ctx = ctx
        ranks = sorted(ctx.session.ranks)
        # row 0 is "all ranks"; row i is ranks[i - 1]
        self.cursor = 0 if ctx.rank is None or ctx.rank not in ranks else ranks.index(ctx.rank) + 1

    def compose(self) -> ComposeResult:
        with Vertical() as v:
            v.border_title = f"Ranks · {len(self.ctx.session.ranks)}"
            yield Static(id="ranks-body")
            yield Static(
                "↑↓ choose · Enter show that rank in the panes · Esc close · * slowest (median step)", id="ranks-keys"
            )

    def on_mount(self) -> None:
        self.redraw()
        self.set_interval(0.5, self.redraw)

    def redraw(self) -> None:
        s = self.ctx.session
        now = self.ctx.now() or s.last_t or 0.0
        statuses = rank_statuses(s, now)
        width = max(40, min(self.app.size.width, 140) - 6)  # the border and padding
        height = max(3, self.app.size.height - 6)
        rows = [all_ranks_line(self.ctx, width)]
        several_hosts = len({x.host for x in statuses}) > 1
        rows += [rank_line(x, width, several_hosts) for x in statuses]
        self.cursor = max(0, min(self.cursor, len(rows) - 1))
        first = max(0, min(self.cursor - height // 2, len(rows) - height))
        out = Text()
        for i, row in enumerate(rows[first : first + height], start=first):
            if i == self.cursor:
                row.stylize("reverse")
            out.append_text(row)
            out.append("\n")
        self.query_one("#ranks-body", Static).update(out)

    def action_move(self, delta: int) -> None:
        self.cursor = max(0, min(self.cursor + delta, len(self.ctx.session.ranks)))
        self.redraw()

    def action_choose(self) -> None:
        ranks = sorted(self.ctx.session.ranks)
        self.ctx.rank = None if self.cursor == 0 else ranks[self.cursor - 1]
        self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)
