"""The step-time chart: one bar per step, compile-paying steps marked ``!``."""

from __future__ import annotations

from bisect import bisect_left

from rich.text import Text

from ctmon.store import Session
from ctmon.store.compiles import CompileRecord
from ctmon.store.generation import GenerationStats
from ctmon.store.step_stats import StepStats
from ctmon.store.steps import StepSeries
from ctmon.tui import fmt
from ctmon.tui.context import put_title, rank_label
from ctmon.tui.panels.base import Panel
from ctmon.tui.panels.samples import TRACE_MODE

STATS_WINDOW = 1000
GENERATION_WINDOW = 200  # recent generate() calls the token line speaks of


class StepsPanel(Panel):
    SCOPED = True
    SECTIONS = ("steps", "compile")

    _stats: tuple[object, StepStats] = (None, StepStats(count=0))

    def update_key(self) -> tuple[object, ...]:
        return (*super().update_key(), self.ctx.session.exit is not None)  # its empty state names the exit

    def stats(self, series: StepSeries) -> StepStats:
        """The window's statistics of ``series`` (the view's current), computed once per change of the steps."""
        key = (id(series), len(series), series.device_windows)
        if self._stats[0] != key:
            self._stats = (key, series.stats(window=STATS_WINDOW))
        return self._stats[1]

    def set_title(self) -> None:
        s = self.ctx.view
        series = s.steps.current
        if series is None or not len(series):
            put_title(self, f"Steps{rank_label(self.ctx)}")
            return
        st = self.stats(series)
        rate = f" · {st.steps_per_s:.1f}/s" if st.steps_per_s else ""
        # the job's own step numbers, where they are not ctmon's count from 1 (a resumed run's)
        last = series.last_number()
        upto = f", to step {fmt.count(last)}" if last != len(series) else ""
        put_title(self, f"Steps · {fmt.count(len(series))} ({series.source}{upto}){rate}{rank_label(self.ctx)}")

    def render_text(self) -> Text:
        s = self.ctx.view
        w, h = self.content_width, self.content_height
        series = s.steps.current
        if series is None and self.ctx.session.meta.mode == TRACE_MODE:
            return Text("a PyTorch trace holds no step times", style="dim italic")
        if series is None or len(series) < 2:
            if self.ctx.session.exit is not None:  # not "waiting": no step will come
                msg = "no step completed before the job exited" if series is None else "1 step, then the job exited"
            else:
                msg = "waiting for steps" if series is None else "1 step so far"
            return Text.assemble(
                (msg, "dim italic"), ("\n(optimizer.step(), a compiled model's calls, or ctmon.step())", "dim")
            )
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
        gen = s.generation.stats(s.steps, _all_spans(s), last=GENERATION_WINDOW) if len(s.generation) else None
        chart_h = max(1, h - (3 if gen is not None else 2))
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
        marks = "".join(
            "!" if k in marked else ("^" if v == v and v > top * 1.0001 else " ")
            for k, v in zip(ks, vals, strict=False)
        )
        out.append(marks.rstrip() or " ", style="bold magenta")
        out.append("\n")
        st = self.stats(series)
        full = f"last {fmt.ms(st.last_ms)}  p50 {fmt.ms(st.p50_ms)}  p90 {fmt.ms(st.p90_ms)}  max {fmt.ms(st.max_ms)}"
        if len(full) > w:
            full = f"last {fmt.num_ms(st.last_ms)} p50 {fmt.num_ms(st.p50_ms)} p90 {fmt.num_ms(st.p90_ms)} max {fmt.num_ms(st.max_ms)} ms"
        stats = Text(full)
        stats.highlight_regex(r"\b(last|p50|p90|max)\b", "dim")
        legend = "   ! = paid a compile"
        if marked and len(full) + len(legend) <= w:
            stats.append(legend, style="dim")
        out.append_text(stats)
        if gen is not None:
            out.append("\n")
            out.append_text(_generation_line(gen, w))
        return out


def _generation_line(g: GenerationStats, width: int) -> Text:
    """Tokens, time to first token and per-token latency of the recent generate() calls."""
    head = f"generate ×{fmt.count(g.calls)} · {fmt.count(g.tokens)} tok"
    ttft = f" · 1st {fmt.ms(g.ttft_ms)}" if g.ttft_ms is not None else ""
    tok = f" · tok p50 {fmt.ms(g.token_p50_ms)} p90 {fmt.ms(g.token_p90_ms)}" if g.token_p50_ms is not None else ""
    text = head + ttft + tok
    for short in (
        f"gen ×{fmt.count(g.calls)} · {fmt.count(g.tokens)} tok{ttft} · p50 {fmt.num_ms(g.token_p50_ms)} p90 {fmt.num_ms(g.token_p90_ms)} ms",
        f"gen {fmt.count(g.tokens)} tok{ttft} · p50 {fmt.num_ms(g.token_p50_ms)} ms",
    ):
        if len(text) <= width:
            break
        text = short
    line = Text(text[:width])
    line.highlight_regex(r"\b(generate|gen|tok|1st|p50|p90)\b", "dim")
    return line


def _all_spans(s: Session) -> list[tuple[float, float]]:
    return [c.span for c in s.compile.compiles]


def _recent_spans(s: Session, since: float) -> list[tuple[float, float]]:
    """Spans of the compiles that may overlap steps after ``since``.

    Compiles are kept in completion order and a compile ends when it
    completes, so a binary search finds the first one that can matter."""
    compiles = s.compile.compiles
    i = bisect_left(compiles, since - 1.0, key=_completed)
    return [c.span for c in compiles[i:]]


def _completed(c: CompileRecord) -> float:
    return c.t
