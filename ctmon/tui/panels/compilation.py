"""The compilation panel: totals, the compile in progress, the caches."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from ctmon.tui import fmt
from ctmon.tui.context import put_title, rank_label
from ctmon.tui.panels.alerting import alert_text, alerts
from ctmon.tui.panels.base import Panel


class CompilePanel(Panel):
    SCOPED = True
    SECTIONS = ("compile", "log")

    def update_key(self) -> Any:
        ctx = self.ctx
        active = ctx.view.compile.active
        el = int(ctx.elapsed() or 0) if active and ctx.job_running else None
        return (*super().update_key(), el)

    def set_title(self) -> None:
        put_title(self, f"Compilation{rank_label(self.ctx)}")

    def render_text(self) -> Text:
        ctx = self.ctx
        s = ctx.view
        c = s.compile
        w, h = self.content_width, self.content_height
        totals = Text()
        _count(totals, c.compile_count, "compile", None)
        _count(totals, c.recompile_count, "recompile", "yellow")
        _count(totals, c.graph_break_count, "graph break", "magenta")
        if c.limit_hits:
            _count(totals, c.limit_hits, "limit hit", "bold red")
        if c.failures:
            _count(totals, c.failures, "failed", "red", plural=False)
        totals.append(f"{fmt.secs(c.total_time_s)} compiling")
        if c.bwd_compiles:
            totals.append(f" (+{fmt.secs(c.bwd_time_s)} bwd)", style="dim")
        active = None
        if c.active:
            cid, start = next(reversed(c.active.items()))
            name = start.name or "?"
            where = fmt.where(start.file, start.line, ctx.cwd, narrow=w < 90)
            since = ""
            now = ctx.now()
            if ctx.job_running and now and start.t:
                since = f" for {fmt.secs(max(0.0, now - start.t))}"
            active = Text.assemble(("compiling ", "bold yellow"), f"{cid} {name} at {where}{since}")
        cache = Text("cache ", style="bold")
        parts = []
        for key, label in (("fx_graph", "FX graph"), ("aot_autograd", "AOTAutograd")):
            cc = c.cache.get(key)
            hit, miss, byp = (cc.hit, cc.miss, cc.bypass) if cc else (0, 0, 0)
            t = Text(f"{label} ")
            t.append(f"{hit} hit", style="green" if hit else "")
            t.append(" / ")
            t.append(f"{miss} miss", style="yellow" if miss else "")
            if byp:
                t.append(f" / {byp} bypass", style="red")
            parts.append(t)
        at = Text("autotune ")
        at.append(f"{c.autotune_cached}/{c.autotune_kernels} cached" if c.autotune_kernels else "0 kernels")
        parts.append(at)
        cache.append_text(Text(" · ", style="dim").join(parts))
        if c.time_saved_s and cache.cell_len + 18 <= w:
            cache.append(f" · saved {fmt.secs(c.time_saved_s)}", style="dim")
        facts = []
        if c.frames:
            facts.append(f"{fmt.plural(len(c.frames), 'frame')} compiled")
        if c.recompile_limit is not None:
            facts.append(f"recompile limit {c.recompile_limit}")
        if c.cudagraph_skips:
            facts.append(f"cudagraphs skipped {sum(c.cudagraph_skips.values())}×")
        alert = None
        if self.has_class("-with-alert"):
            al = alerts(s, 1)
            if al:
                alert = alert_text(al[-1], ctx)
        # what to keep when lines run short: totals and caches, then the
        # alert (small terminals only), the compile in progress, the facts
        facts_t = Text(" · ".join(facts), style="dim") if facts else None
        optional = [x for x in (alert, active, facts_t) if x is not None][: max(0, h - 2)]

        def kept(x: Text | None) -> bool:
            return x is not None and any(x is y for y in optional)

        lines = [totals]
        lines += [x for x in (active, facts_t) if kept(x)]  # type: ignore[misc]
        lines.append(cache)
        if kept(alert):
            lines.append(alert)  # type: ignore[arg-type]
        return Text("\n").join(lines[:h])


def _count(t: Text, n: int, word: str, style: str | None, plural: bool = True) -> None:
    t.append(f"{n:,}", style=(style or "") + " bold" if n else "dim")
    t.append(f" {word}{'s' if plural and n != 1 else ''} · ")
