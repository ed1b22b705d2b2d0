"""The summary panels: header, steps, GPU, process, compilation, alerts.

Each panel renders from a ``ViewContext`` and says which store sections it
depends on (``SECTIONS``); the app calls ``update_view`` only when one of
those sections' revision changed, so an idle screen repaints nothing.
Colour is never the only signal: compile-paying steps carry a ``!`` mark,
alerts and states carry words.
"""

from __future__ import annotations

import re
import textwrap
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable
from itertools import islice
from time import monotonic
from typing import Any

from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

from ctmon.store import Session
from ctmon.tui import fmt
from ctmon.tui.context import StoreView, ViewContext, put_title
from ctmon.tui.strips import text_strips

STATS_WINDOW = 1000

STATE_STYLE = {
    "starting": "dim",
    "compiling": "bold yellow",
    "running": "bold green",
    "exited": "bold cyan",
}


class Panel(StoreView, Widget):
    """Base: a widget drawn from the store, refreshed only when its sections change."""

    DEFAULT_CSS = """
    Panel { height: auto; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, ctx: ViewContext, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.ctx = ctx

    _strips: list[Strip] | None = None
    _strips_size: Any = None

    def update_view(self) -> None:
        self.set_title()
        self._strips = None
        self.refresh()

    def notify_style_update(self) -> None:
        self._strips = None  # a theme or class change restyles the text
        super().notify_style_update()

    def render_line(self, y: int) -> Strip:
        # drawn through ctmon.tui.strips, not Textual's content path: the
        # panels redraw on every repaint of a running job (see that module)
        size = self.size
        if self._strips is None or self._strips_size != size:
            base = self.visual_style.rich_style
            self._strips = text_strips(self.render(), size.width, size.height, base, self.app.console)
            self._strips_size = size
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(size.width, self.visual_style.rich_style)

    def set_title(self) -> None:
        pass

    def render(self) -> Text:
        text = self.render_text()
        if text.no_wrap is None:
            text.no_wrap = True
            text.overflow = "ellipsis"
        return text

    def render_text(self) -> Text:
        return Text()

    @property
    def content_width(self) -> int:
        return max(1, self.size.width)

    @property
    def content_height(self) -> int:
        return max(1, self.size.height)


# ------------------------------------------------------------------ header


def device_summary(ctx: ViewContext) -> str:
    s = ctx.session
    names = [str(d.get("name") or "GPU") for d in s.meta.devices]
    if not names:
        latest = latest_gpus(s)
        if latest:
            names = [str(g.get("name") or "GPU") for g in latest]
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
        return (f"■ exited {e.code}", "bold cyan" if e.code == 0 else "bold red")
    if ctx.status:
        return ctx.status, "bold yellow"
    if ctx.feed_done and ctx.live:
        return "? disconnected", "bold red"
    st = s.state
    mark = {"starting": "○", "compiling": "◆", "running": "●"}.get(st, "●")
    return f"{mark} {st}", STATE_STYLE.get(st, "bold")


class HeaderBar(Panel):
    # Not "steps": the header's step count moves with its once-a-second clock
    # (the Steps panel is the live view); a live job then repaints the full-width
    # header once a second instead of on every batch of steps.
    SECTIONS = ("meta", "compile")

    DEFAULT_CSS = """
    HeaderBar { height: 2; background: $panel; padding: 0 1; }
    """

    def update_key(self) -> Any:
        ctx = self.ctx
        el = ctx.elapsed()
        r = ctx.replay
        rkey = (r.position, r.total, r.playing, r.speed, r.loading) if r else None
        steps = ctx.session.steps.count if (el is None or ctx.session.exit is not None or not ctx.live) else None
        return (*super().update_key(), int(el) if el is not None else None, ctx.paused, ctx.status,
                ctx.feed_done, rkey, ctx.gpu_error, self.ctx.title, steps)

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
        parts.append(Text(f"step {fmt.count(s.steps.count)}"))
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


# ------------------------------------------------------------------- steps


class StepsPanel(Panel):
    SECTIONS = ("steps", "compile")

    _stats: tuple[Any, Any] = (None, None)

    def stats(self) -> Any:
        """The window's statistics, computed once per change of the steps."""
        series = self.ctx.session.steps.current
        key = (id(series), len(series) if series is not None else 0,
               series.device_windows if series is not None else 0)
        if self._stats[0] != key:
            self._stats = (key, series.stats(window=STATS_WINDOW) if series is not None else None)
        return self._stats[1]

    def set_title(self) -> None:
        s = self.ctx.session
        series = s.steps.current
        if series is None or not len(series):
            put_title(self, "Steps")
            return
        st = self.stats()
        rate = f" · {st.steps_per_s:.1f}/s" if st.steps_per_s else ""
        put_title(self, f"Steps · {fmt.count(len(series))} ({series.source}){rate}")

    def render_text(self) -> Text:
        s = self.ctx.session
        w, h = self.content_width, self.content_height
        series = s.steps.current
        if series is None or len(series) < 2:
            msg = "waiting for steps" if series is None else "1 step so far"
            return Text.assemble((msg, "dim italic"), ("\n(optimizer.step(), a compiled model's calls, or ctmon.step())", "dim"))
        n = len(series)
        label_w = 9 if w >= 40 else 0
        chart_w = max(1, w - label_w)
        start = max(1, n - chart_w)
        ks = range(start, n)
        vals = [series.interval_ms(k) for k in ks]
        marked = series.compile_marked(_recent_spans(s, series.times[start - 1]))
        plain = [v for k, v in zip(ks, vals, strict=False) if v == v and k not in marked]
        pool = plain or [v for v in vals if v == v] or [1.0]
        top, low = max(pool), min(pool)
        # start the axis a little below the fastest step, so variation shows;
        # the axis labels say where it starts
        floor = max(0.0, low - 0.25 * (top - low)) if top > low else 0.0
        chart_h = max(1, h - 2)
        rows = fmt.bar_rows([v - floor if v == v else v for v in vals], chart_h, max(top - floor, 1e-9))
        out = Text()
        for r, row in enumerate(rows):
            line = Text()
            run_start, run_marked = 0, None
            for i, k in enumerate(ks):  # one span per run of same-coloured bars
                m = k in marked
                if m != run_marked and i:
                    line.append(row[run_start:i], "magenta" if run_marked else "green")
                    run_start = i
                run_marked = m
            line.append(row[run_start:], "magenta" if run_marked else "green")
            if label_w:
                label = fmt.ms(top) if r == 0 else (fmt.ms(floor) if r == chart_h - 1 else "")
                line.append(" " * (chart_w - len(row)))
                line.append(f" {label:>{label_w - 1}}", "dim")
            out.append_text(line)
            out.append("\n")
        marks = "".join("!" if k in marked else ("^" if v == v and v > top * 1.0001 else " ") for k, v in zip(ks, vals, strict=False))
        out.append(marks.rstrip() or " ", style="bold magenta")
        out.append("\n")
        st = self.stats()
        full = f"last {fmt.ms(st.last_ms)}  p50 {fmt.ms(st.p50_ms)}  p90 {fmt.ms(st.p90_ms)}  max {fmt.ms(st.max_ms)}"
        if len(full) > w:
            full = f"last {fmt.num_ms(st.last_ms)} p50 {fmt.num_ms(st.p50_ms)} p90 {fmt.num_ms(st.p90_ms)} max {fmt.num_ms(st.max_ms)} ms"
        stats = Text(full)
        stats.highlight_regex(r"\b(last|p50|p90|max)\b", "dim")
        legend = "   ! = paid a compile"
        if marked and len(full) + len(legend) <= w:
            stats.append(legend, style="dim")
        out.append_text(stats)
        return out


def _recent_spans(s: Session, since: float) -> list[tuple[float, float]]:
    """Spans of the compiles that may overlap steps after ``since``.

    Compiles are kept in completion order and a compile ends when it
    completes, so a binary search finds the first one that can matter."""
    compiles = s.compile.compiles
    i = bisect_left(compiles, since - 1.0, key=_completed)
    return [c.span for c in compiles[i:]]


def _completed(c: Any) -> float:
    return c.t


# --------------------------------------------------------------- samples


def recent_samples(s: Session, n: int) -> list[dict[str, Any]]:
    out = list(islice(reversed(s.samples), n))
    out.reverse()
    return out


def latest_gpus(s: Session) -> list[dict[str, Any]] | None:
    for ev in islice(reversed(s.samples), 5):
        g = ev.get("gpus")
        if isinstance(g, list):
            return [x for x in g if isinstance(x, dict)]
    return None


def gpu_error(ctx: ViewContext) -> str | None:
    if ctx.gpu_error:
        return ctx.gpu_error
    for ev in islice(ctx.session.samples, 3):
        err = ev.get("gpu_error")
        if isinstance(err, str) and err:
            ctx.gpu_error = err
            return err
    return None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class GpuPanel(Panel):
    SECTIONS = ("samples", "meta")

    def set_title(self) -> None:
        gpus = latest_gpus(self.ctx.session)
        put_title(self, f"GPU · {len(gpus)}" if gpus and len(gpus) > 1 else "GPU")

    def gpu_rows(self) -> list[dict[str, Any]]:
        """The numbers the panel shows, per GPU (also used by benchmarks/gpu_panel_check.py)."""
        gpus = latest_gpus(self.ctx.session) or []
        rows = []
        for g in gpus:
            rows.append({
                "index": g.get("index"),
                "name": g.get("name"),
                "util": _num(g.get("util")),
                "mem_used": _num(g.get("mem_used")),
                "mem_total": _num(g.get("mem_total")),
                "power_w": _num(g.get("power_w")),
                "power_limit_w": _num(g.get("power_limit_w")),
                "temp_c": _num(g.get("temp_c")),
                "proc_mem": _num(g.get("proc_mem")),
            })
        return rows

    def render_text(self) -> Text:
        ctx = self.ctx
        s = ctx.session
        w, h = self.content_width, self.content_height
        rows = self.gpu_rows()
        if not rows:
            err = gpu_error(ctx)
            if err:
                lines = textwrap.wrap(f"no GPU: {err}", max(10, w)) or ["no GPU"]
                t = Text("\n".join(lines), style="dim")
                t.stylize("bold", 0, len("no GPU:"))
                return t
            if not s.samples:
                return Text("waiting for the first sample", style="dim italic")
            return Text("no GPU data in the samples", style="dim")
        per = 3 if len(rows) * 3 <= h else (2 if len(rows) * 2 <= h else 1)
        if len(rows) > h:
            return self._gpu_table(rows, w, h)
        history = recent_samples(s, max(8, w))
        out: list[Text] = []
        for g in rows:
            out += self._gpu_lines(g, per, w, history)
        return Text("\n").join(out)

    def _gpu_table(self, rows: list[dict[str, Any]], w: int, h: int) -> Text:
        """More GPUs than lines: one line per quantity, one column per GPU."""
        def col(v: float | None, digits: int = 0) -> str:
            return f"{v:>3.{digits}f}" if v is not None else "N/A"

        utils = Text("util% ")
        for g in rows:
            utils.append(col(g["util"]) + " ", _util_style(g["util"]))
        total = next((g["mem_total"] for g in rows if g["mem_total"]), None)
        mems = Text("mem G ")
        for g in rows:
            mems.append(col(g["mem_used"] / (1 << 30) if g["mem_used"] is not None else None) + " ")
        if total:
            mems.append(f"of {total / (1 << 30):.0f}", "dim")
        lines = [utils, mems]
        if h >= 3:
            power = sum(g["power_w"] or 0.0 for g in rows)
            temps = [g["temp_c"] for g in rows if g["temp_c"] is not None]
            lines.append(Text(f"{power / 1000:.1f} kW · max {max(temps):.0f}°C" if temps else f"{power:.0f} W", style="dim"))
        return Text("\n").join(lines[:h])

    def _gpu_lines(self, g: dict[str, Any], per: int, w: int, history: list[dict[str, Any]]) -> list[Text]:
        idx = g["index"]
        util_t = Text(f"{fmt.pct(g['util']):>4}", style=_util_style(g["util"]))
        used, total = g["mem_used"], g["mem_total"]
        mem = f"{fmt.gib(used)}/{fmt.gib(total)} GiB"
        power = f"{g['power_w']:.0f}" if g["power_w"] is not None else "N/A"
        plimit = f"/{g['power_limit_w']:.0f}" if g["power_limit_w"] is not None else ""
        temp = f"{g['temp_c']:.0f}°C" if g["temp_c"] is not None else "N/A"
        job = f"job {fmt.gib(g['proc_mem'])} GiB" if g["proc_mem"] is not None else "job N/A"
        name = str(g["name"] or "GPU").replace("NVIDIA ", "")

        def spark(room: int, field: str = "util") -> Text:
            room = max(0, room)
            vals = [_gpu_field(ev, idx, field) for ev in history[-room:]] if room else []
            return Text(fmt.sparkline(vals, 100.0) if vals else "", style="green")

        if per == 1:
            line = Text.assemble((f"{idx} ", "bold"), util_t, f" {fmt.gib(used, 0)}/{fmt.gib(total, 0)}G {power}W {temp}")
            if line.cell_len + 3 <= w:
                line.append(" ")
                line.append_text(spark(w - line.cell_len))
            return [line]
        head = Text.assemble((f"{idx} ", "bold"), fmt.clip(name, max(4, w - 24)), f"  {temp}  {power}{plimit} W")
        if per == 2:
            l2 = Text.assemble("  ", util_t, " ", f"{mem} ", (job, "dim"))
            if l2.cell_len + 3 <= w:
                l2.append(" ")
                l2.append_text(spark(w - l2.cell_len))
            return [head, l2]
        l2 = Text.assemble("  util ", util_t, " ")
        l2.append_text(spark(w - l2.cell_len))
        mem_pct = used / total if isinstance(used, float) and isinstance(total, float) and total > 0 else None
        l3 = Text.assemble("  mem  ", (f"{mem_pct * 100:3.0f}%" if mem_pct is not None else " N/A", "bold"), f" {mem}  ", (job, "dim"))
        return [head, l2, l3]


def _gpu_field(ev: dict[str, Any], index: Any, name: str) -> float | None:
    gpus = ev.get("gpus")
    if not isinstance(gpus, list):
        return None
    for g in gpus:
        if isinstance(g, dict) and g.get("index") == index:
            return _num(g.get(name))
    return None


def _util_style(v: float | None) -> str:
    if v is None:
        return "dim"
    if v >= 80:
        return "bold green"
    if v >= 30:
        return "yellow"
    return "red"


class ProcessPanel(Panel):
    SECTIONS = ("samples",)

    def set_title(self) -> None:
        put_title(self, "Process")

    def render_text(self) -> Text:
        s = self.ctx.session
        w, h = self.content_width, self.content_height
        latest = None
        for ev in islice(reversed(s.samples), 5):
            if "cpu_percent" in ev:
                latest = ev
                break
        if latest is None:
            return Text("waiting for the first sample", style="dim italic")
        cpu = _num(latest.get("cpu_percent"))
        cpus = latest.get("cpus")
        hist = [_num(ev.get("cpu_percent")) for ev in recent_samples(s, max(4, min(30, w - 22)))]
        top = max(100.0, max((v for v in hist if v is not None), default=100.0))
        of = f" of {cpus}" if isinstance(cpus, int) else ""
        l1 = Text.assemble("CPU ", (f"{cpu:.0f}%" if cpu is not None else "N/A", "bold"), f"{of} ", (fmt.sparkline(hist, top), "cyan"))
        rss, tree = latest.get("rss"), latest.get("tree_rss")
        threads, procs = latest.get("threads"), latest.get("procs")
        tree_t = f" (tree {fmt.size(tree)})" if isinstance(tree, int) and isinstance(rss, int) and tree > rss else ""
        l2 = Text.assemble("RSS ", (fmt.size(tree if isinstance(tree, int) else rss), "bold"))
        extra = f" · {fmt.plural(threads, 'thread')}" if isinstance(threads, int) else ""
        if isinstance(procs, int) and procs > 1:
            extra += f" · {procs} procs"
        l2.append(extra)
        lines = [l1, l2]
        if h >= 3:
            if tree_t and l2.cell_len + len(tree_t) <= w:
                l2.append(tree_t, style="dim")
            used, total, sys_cpu = latest.get("sys_mem_used"), latest.get("sys_mem_total"), _num(latest.get("sys_cpu_percent"))
            if isinstance(used, int) and isinstance(total, int):
                sc = f"{sys_cpu:.0f}% CPU · " if sys_cpu is not None else ""
                lines.append(Text(f"host {sc}{fmt.gib(used)}/{fmt.gib(total)} GiB", style="dim"))
        return Text("\n").join(lines)


# ------------------------------------------------------------ compilation


ALERTS_KEPT = 200
_alerts_cache: dict[int, tuple[Session, int, list[Any]]] = {}


def is_alert(e: Any) -> bool:
    return e.severity == "critical" or e.kind in ("limit", "error") or (e.kind == "note" and e.severity == "warning")


def alerts(s: Session, limit: int = 20) -> list[Any]:
    """Entries worth interrupting someone for. Findings (when the store has
    them) will be listed here too; today: recompile-limit hits, failed
    compiles, a job that died, and ctmon's own warnings. Kept up to date
    from the new log entries only."""
    rev = s.rev["log"]
    hit = _alerts_cache.get(id(s))
    if hit is None or hit[0] is not s or rev < hit[1] or rev - hit[1] > len(s.log):
        found = [e for e in s.log if is_alert(e)][-ALERTS_KEPT:]
    elif rev == hit[1]:
        found = hit[2]
    else:
        new = rev - hit[1]
        found = (hit[2] + [e for e in islice(s.log, len(s.log) - new, len(s.log)) if is_alert(e)])[-ALERTS_KEPT:]
    if len(_alerts_cache) > 8 and id(s) not in _alerts_cache:
        _alerts_cache.clear()
    _alerts_cache[id(s)] = (s, rev, found)
    return found[-limit:] if limit else []


class CompilePanel(Panel):
    SECTIONS = ("compile", "log")

    def update_key(self) -> Any:
        ctx = self.ctx
        active = ctx.session.compile.active
        el = int(ctx.elapsed() or 0) if active and ctx.job_running else None
        return (*super().update_key(), el)

    def set_title(self) -> None:
        put_title(self, "Compilation")

    def render_text(self) -> Text:
        ctx = self.ctx
        s = ctx.session
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
            name = start.get("name") or "?"
            where = fmt.where(start.get("file"), start.get("line"), ctx.cwd, narrow=w < 90)
            since = ""
            now = ctx.now()
            if ctx.job_running and now and isinstance(start.get("t"), (int, float)):
                since = f" for {fmt.secs(max(0.0, now - start['t']))}"
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


def alert_text(e: Any, ctx: ViewContext) -> Text:
    sev = "CRIT" if e.severity == "critical" else "WARN"
    text = localize(e.text, ctx.cwd)
    return Text.assemble((f"{sev} ", "bold red" if sev == "CRIT" else "bold yellow"), fmt.first_line(text))


_ABS_PY = re.compile(r"(?<![\w.])(/[^\s:'\"()\[\],]+\.py)\b")


def localize(text: str, cwd: str | None, narrow: bool = False) -> str:
    """Absolute source paths in free text, written as the tables write them:
    relative to the job's directory when below it, the base name when narrow."""
    if "/" not in text:
        return text
    return _ABS_PY.sub(lambda m: fmt.short_path(m.group(1), cwd, narrow and not _below(m.group(1), cwd)), text)


def _below(path: str, cwd: str | None) -> bool:
    return bool(cwd) and path.startswith(cwd.rstrip("/") + "/")  # type: ignore[union-attr]


FINDINGS_EVERY_S = 2.0  # live: findings that depend on steps or samples are refreshed this often
FINDINGS_SHARE = 0.1  # and never more often than keeps the rules under this share of the UI's time


_findings_cache: dict[int, tuple[Any, float, Any, list[Any], float, bool]] = {}


def current_findings(ctx: ViewContext, force: bool = False) -> list[Any]:
    """The session's findings, recomputed at most every FINDINGS_EVERY_S
    (a compile storm changes the store many times a second; the rules need
    not run that often), not while a backlog is folded, and at once after a
    replay jump, the job's exit, or the end of a backlog."""
    s = ctx.session
    key = (ctx.gen, s.exit is not None)
    revs = (s.rev["compile"], s.rev["steps"], s.rev["samples"], s.rev["meta"])
    hit = _findings_cache.get(id(ctx))
    now = monotonic()
    if hit is not None and hit[0] == key and not force:
        _, t, old_revs, found, cost, in_backlog = hit
        if old_revs == revs:
            return found
        # While a backlog is folded the rules would judge a past moment, and
        # the first run over a history of tens of thousands of compiles takes
        # a large fraction of a second (each guard is classified once): hold
        # them until it is folded, then run them at once.
        if ctx.catching_up:
            return found
        # Live, a storm makes one run cost more as the store grows: space the
        # runs by their own cost as well.
        if not in_backlog and now - t < max(FINDINGS_EVERY_S, cost / FINDINGS_SHARE):
            return found
    found = s.findings()
    cost = monotonic() - now
    if len(_findings_cache) > 8 and id(ctx) not in _findings_cache:
        _findings_cache.clear()
    _findings_cache[id(ctx)] = (key, monotonic(), revs, found, cost, ctx.catching_up)
    return found


def live_findings(ctx: ViewContext) -> list[Any]:
    """Findings of severity warning and above, most severe first."""
    return [f for f in current_findings(ctx) if f.severity in ("critical", "warning")]


def finding_text(f: Any, ctx: ViewContext) -> Text:
    sev = "CRIT" if f.severity == "critical" else "warn"
    where = f" {fmt.short_path(f.file, ctx.cwd, True)}:{f.line}" if f.file else ""
    return Text.assemble((f"{sev}", "bold red" if sev == "CRIT" else "bold yellow"), (where, "cyan"), " ",
                         fmt.first_line(localize(f.title, ctx.cwd)))


class AlertsPanel(Panel):
    """What needs attention now: the findings (recompile limit hit or near,
    storms of recompiles, graph breaks in the loop, cache misses, skipped CUDA
    graphs, an idle GPU), then the job dying or failing compiles. ``a`` opens
    every finding with its evidence and fix."""

    SECTIONS = ("log",)

    DEFAULT_CSS = """
    AlertsPanel { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def update_key(self) -> Any:
        # the findings shown (recomputed at most every FINDINGS_EVERY_S) decide
        return (*super().update_key(), tuple(f.id for f in live_findings(self.ctx)))

    def _items(self, limit: int) -> list[Text]:
        # only the lines that fit are formatted: a compile storm can raise
        # hundreds of findings, and formatting them all on every repaint
        # costs more than the rest of the screen
        ctx = self.ctx
        out = [finding_text(f, ctx) for f in live_findings(ctx)[:limit]]
        if len(out) < limit:
            out += [alert_text(e, ctx) for e in reversed(alerts(ctx.session, limit))
                    if e.kind in ("exit", "note", "error")][: limit - len(out)]
        return out

    def set_title(self) -> None:
        n = len(live_findings(self.ctx))
        put_title(self, f"Alerts · {n} (a: all)" if n else "Alerts")

    def render_text(self) -> Text:
        h = self.content_height
        items = self._items(max(1, h))
        if not items:
            return Text("none", style="dim")
        out = Text("\n").join(items[: max(1, h)])
        out.no_wrap = True
        out.overflow = "ellipsis"
        return out


def findings_body(ctx: ViewContext) -> Text:
    """Every finding: title, where, why, the evidence and the fix."""
    found = current_findings(ctx, force=True)
    if not found:
        return Text("No findings: compilation looks healthy.", style="dim")
    out = Text()
    for f in found:
        style = {"critical": "bold red", "warning": "bold yellow"}.get(f.severity, "bold")
        out.append(f"{f.severity.upper():<9}", style)
        out.append(localize(f.title, ctx.cwd) + "\n", "bold")
        if f.file:
            out.append(f"  at {fmt.short_path(f.file, ctx.cwd, False)}:{f.line}\n", "cyan")
        if f.detail:
            out.append(textwrap.indent(textwrap.fill(f.detail, 100), "  ") + "\n")
        for e in f.evidence[:10]:
            out.append(textwrap.indent(textwrap.fill(localize(e, ctx.cwd), 100, subsequent_indent="    "), "  - ") + "\n",
                       "dim")
        if f.fix:
            out.append("  fix: ", "bold green")
            out.append(textwrap.fill(f.fix, 100, subsequent_indent="       ")[0:] + "\n")
        out.append("\n")
    return out


# --------------------------------------------------------------- key bar


class KeyBar(Widget):
    DEFAULT_CSS = """
    KeyBar { height: 1; dock: bottom; background: $panel; }
    """

    def __init__(self, ctx: ViewContext, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ctx = ctx
        self._key: Any = None

    def maybe_update(self) -> None:
        key = tuple(self.keys())
        if key != self._key:
            self._key = key
            self.refresh()

    def keys(self) -> Iterable[tuple[str, str]]:
        ctx = self.ctx
        yield "q", "quit"
        yield "?", "help"
        yield "Tab", "pane"
        yield "⏎", "details"
        yield "/", "filter"
        yield "space", "resume" if ctx.paused else "pause"
        if ctx.replay is not None:
            yield "[ ]", "step"
            yield "p", "pause" if ctx.replay.playing else "play"
            yield "{ }", "±10%"
        elif ctx.job_running:
            yield "^C", "stop job"

    def render(self) -> Text:
        w = max(1, self.size.width)
        out = Text()
        for key, label in self.keys():
            piece = Text.assemble((f" {key} ", "bold reverse"), f" {label} ")
            if out.cell_len + piece.cell_len > w:
                break
            out.append_text(piece)
        return out
