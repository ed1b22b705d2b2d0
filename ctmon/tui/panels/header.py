"""The header: the command, its state and elapsed time, host, torch, devices."""

from __future__ import annotations

from collections import Counter

from rich.text import Text

from ctmon.tui import fmt
from ctmon.tui.context import ViewContext
from ctmon.tui.panels.base import Panel
from ctmon.tui.panels.samples import gpu_error, latest_gpus
from ctmon.tui.ranks_screen import ranks_summary

STATE_STYLE = {
    "starting": "dim",
    "compiling": "bold yellow",
    "running": "bold green",
    "exited": "bold cyan",
}


def device_summary(ctx: ViewContext) -> str:
    s = ctx.session
    names = [d.name or "GPU" for d in s.meta.devices]
    if not names:
        latest = latest_gpus(s)
        if latest:
            names = [g.name or "GPU" for g in latest]
    if names:
        c = Counter(names)
        return ", ".join(f"{n}× {name}" if n > 1 else name for name, n in c.items())
    if gpu_error(ctx):
        return "no GPU"
    return "CPU"


def state_text(ctx: ViewContext) -> tuple[str, str]:
    s = ctx.session
    if s.exit is not None:
        e = s.exit
        if e.signal:
            return f"■ exited ({e.signal})", "bold red"
        if e.code is None:
            return "■ ended", "bold cyan"  # a trace, or a job ctmon did not start: its status is not known
        return (f"■ exited {e.code}", "bold cyan" if e.code == 0 else "bold red")
    if ctx.status:
        return ctx.status, "bold yellow"
    if ctx.feed_done and ctx.live:
        return "? disconnected", "bold red"
    st = s.state
    mark = {"starting": "○", "compiling": "◆", "running": "●"}.get(st, "●")
    return f"{mark} {st}", STATE_STYLE.get(st, "bold")


class HeaderBar(Panel):
    # No step count here: the Steps pane's title says it, of the process it
    # names, at the pace of the steps (a second count here, repainted with the
    # once-a-second clock, lagged behind it and named no rank).
    SECTIONS = ("meta", "compile")

    DEFAULT_CSS = """
    HeaderBar { height: 2; background: $panel; padding: 0 1; }
    """

    def update_key(self) -> tuple[object, ...]:
        ctx = self.ctx
        el = ctx.elapsed()
        r = ctx.replay
        rkey = (r.position, r.total, r.playing, r.speed, r.loading) if r else None
        return (
            *super().update_key(),
            ctx.session.rev["rank_compiles"],
            ctx.rank,
            int(el) if el is not None else None,
            ctx.paused,
            ctx.status,
            ctx.feed_done,
            rkey,
            ctx.gpu_error,
            self.ctx.title,
        )

    def render_text(self) -> Text:
        ctx = self.ctx
        s = ctx.session
        w = self.content_width
        cmd = " ".join(s.meta.command) or ctx.title or "(waiting for the job)"
        state, style = state_text(ctx)
        right = Text.assemble((state, style), "  ", (fmt.elapsed(ctx.elapsed()), "bold"))
        left = Text.assemble(("ctmon", "bold reverse"), " ", (fmt.clip(cmd, max(8, w - right.cell_len - 9)), "bold"))
        line1 = _spread(left, right, w)

        parts: list[Text] = []
        if s.meta.pid is not None:
            host = f" @ {s.meta.host}" if s.meta.host else ""
            parts.append(Text(f"pid {s.meta.pid}{host}"))
        elif s.meta.host:
            parts.append(Text(s.meta.host))
        if s.meta.torch:
            parts.append(Text(f"torch {s.meta.torch}"))
        parts.append(Text(device_summary(ctx)))
        ranks = ranks_summary(ctx)
        if ranks:
            busy = any(w in ranks for w in ("compiling", "waiting", "stalled"))
            parts.append(Text(ranks, style="bold yellow" if busy else ""))
        dropped = s.drops.get("steps", 0) + s.drops.get("events", 0)
        if dropped:
            parts.append(Text(f"{fmt.count(dropped)} dropped", style="bold red"))
        line2 = Text(" · ", style="dim").join(parts)
        badges = Text()
        if ctx.paused:
            badges.append(" PAUSED ", style="bold reverse yellow")
        r = ctx.replay
        if r is not None:
            if badges:
                badges.append(" ")
            if r.loading:
                badges.append(f"loading {fmt.count(r.total)} events", style="bold")
            else:
                pct = 100.0 * r.position / r.total if r.total else 100.0
                mode = f"▶ {r.speed:g}×" if r.playing else "replay"
                where = f" ({fmt.count(r.position)}/{fmt.count(r.total)})" if w >= 100 else ""
                badges.append(f"{mode} {pct:3.0f}%{where}", style="bold magenta")
        line2 = _spread(line2, badges, w)
        return Text("\n").join([line1, line2])


def _spread(left: Text, right: Text, width: int) -> Text:
    room = width - right.cell_len
    if room < 8:
        left.truncate(width, overflow="ellipsis")
        return left
    left.truncate(room - 1, overflow="ellipsis")
    gap = max(1, width - left.cell_len - right.cell_len)
    return Text.assemble(left, " " * gap, right)
