"""The compilation panel: totals, the compile in progress, the caches.

Whose totals: one process's, or in a distributed job's own view every
rank's, summed as the report and the end-of-run summary sum them (the job's
session, which holds the primary rank and the launcher, plus every other
rank: ctmon/report/rank_sections.py), with each rank's counts on a line of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from rich.text import Text

from ctmon.store import Session
from ctmon.store.compile_state import CompileState
from ctmon.tui import fmt
from ctmon.tui.context import ViewContext, put_title, rank_label
from ctmon.tui.panels.base import Panel
from ctmon.words.labels import CACHE_NAMES


@dataclass
class Totals:
    """What the panel counts, of one process or summed over ranks."""

    compiles: int = 0
    recompiles: int = 0
    breaks: int = 0
    limit_hits: int = 0
    failures: int = 0
    time_s: float = 0.0  # forward frames
    bwd_compiles: int = 0
    bwd_time_s: float = 0.0
    autotune_kernels: int = 0
    autotune_cached: int = 0
    time_saved_s: float = 0.0
    cache: dict[str, list[int]] = field(default_factory=dict)  # name -> [hit, miss, bypass]

    def add(self, other: Totals) -> None:
        for f in fields(self):
            if f.name == "cache":
                for name, counts in other.cache.items():
                    mine = self.cache.setdefault(name, [0, 0, 0])
                    self.cache[name] = [a + b for a, b in zip(mine, counts, strict=True)]
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def totals_of(c: CompileState) -> Totals:
    return Totals(
        compiles=c.compile_count,
        recompiles=c.recompile_count,
        breaks=c.graph_break_count,
        limit_hits=c.limit_hits,
        failures=c.failures,
        time_s=c.total_time_s,
        bwd_compiles=c.bwd_compiles,
        bwd_time_s=c.bwd_time_s,
        autotune_kernels=c.autotune_kernels,
        autotune_cached=c.autotune_cached,
        time_saved_s=c.time_saved_s,
        cache={name: [cc.hit, cc.miss, cc.bypass] for name, cc in c.cache.items()},
    )


def job_totals(s: Session) -> Totals:
    """The job's totals: its session's (the primary rank and processes that
    are no rank) plus every other rank's, the rule of ctmon/report/rank_sections.py."""
    total = totals_of(s.compile)
    for r, rs in sorted(s.ranks.items()):
        if r != s.primary_rank:
            total.add(totals_of(rs.session.compile))
    return total


def all_ranks(ctx: ViewContext) -> bool:
    """The job's own view of a distributed job: the panel sums the ranks."""
    return ctx.rank is None and bool(ctx.session.ranks)


class CompilePanel(Panel):
    SCOPED = True
    SECTIONS = ("compile", "log")

    def update_key(self) -> tuple[object, ...]:
        ctx = self.ctx
        active = ctx.view.compile.active
        el = int(ctx.elapsed() or 0) if active and ctx.job_running else None
        # another rank's compiles change the sums
        ranks = (ctx.session.rev["rank_compiles"], ctx.session.rev["ranks"]) if all_ranks(ctx) else None
        return (*super().update_key(), el, ranks, ctx.session.joined is not None)

    def set_title(self) -> None:
        ctx = self.ctx
        if all_ranks(ctx):
            n = len(ctx.session.ranks)
            put_title(
                self, f"Compilation · {'all ' if n > 1 else ''}{fmt.plural(n, 'rank')}{' summed' if n > 1 else ''}"
            )
        else:
            put_title(self, f"Compilation{rank_label(ctx)}")

    def render_text(self) -> Text:
        ctx = self.ctx
        s = ctx.view
        c = s.compile
        w, h = self.content_width, self.content_height
        tot = job_totals(ctx.session) if all_ranks(ctx) else totals_of(c)
        totals = Text()
        # a compile the recompile limit refused did not compile: said apart,
        # as the report and the summary say it ("7 recompiles + 1 refused")
        _count(totals, tot.compiles - tot.limit_hits, "compile", None)
        if tot.limit_hits:
            n = max(0, tot.recompiles - tot.limit_hits)
            totals.append(f"{n:,}", style="yellow bold" if n else "dim")
            totals.append(f" recompile{'s' if n != 1 else ''}")
            totals.append(f" + {tot.limit_hits:,} refused at the limit", style="bold red")
            totals.append(" · ")
        else:
            _count(totals, tot.recompiles, "recompile", "yellow")
        _count(totals, tot.breaks, "graph break", "magenta")
        if tot.failures:
            _count(totals, tot.failures, "failed", "red", plural=False)
        # forward and backward together, as the report and the summary say it
        totals.append(f"{fmt.seconds(tot.time_s + tot.bwd_time_s)} compiling")
        if tot.bwd_compiles:
            totals.append(f" ({fmt.seconds(tot.bwd_time_s)} backward)", style="dim")
        active = None
        if c.active:
            cid, start = next(reversed(c.active.items()))
            name = start.name or "?"
            where = fmt.where(start.file, start.line, ctx.cwd, narrow=w < 90)
            since = ""
            now = ctx.now()
            if ctx.job_running and now and start.t:
                since = f" for {fmt.seconds(max(0.0, now - start.t))}"
            active = Text.assemble(("compiling ", "bold yellow"), f"{cid} {name} at {where}{since}")
        cache = Text("cache ", style="bold")
        parts = []
        for key, label in CACHE_NAMES.items():
            hit, miss, byp = tot.cache.get(key) or (0, 0, 0)
            t = Text(f"{label} ")
            t.append(f"{hit} hit", style="green" if hit else "")
            t.append(" / ")
            t.append(f"{miss} miss", style="yellow" if miss else "")
            if byp:
                t.append(f" / {byp} bypass", style="red")
            parts.append(t)
        at = Text("autotune ")
        at.append(f"{tot.autotune_cached}/{tot.autotune_kernels} cached" if tot.autotune_kernels else "0 kernels")
        parts.append(at)
        cache.append_text(Text(" · ", style="dim").join(parts))
        if tot.time_saved_s and cache.cell_len + 18 <= w:
            cache.append(f" · saved {fmt.seconds(tot.time_saved_s)}", style="dim")
        if all_ranks(ctx):
            facts_t: Text | None = _by_rank(ctx.session)
        else:
            facts = []
            if c.frames:
                facts.append(f"{fmt.plural(len(c.frames), 'frame')} compiled")
            if c.recompile_limit is not None:
                facts.append(f"recompile limit {c.recompile_limit}")
            if c.cudagraph_skips:
                facts.append(f"cudagraphs skipped {sum(c.cudagraph_skips.values())}×")
            facts_t = Text(" · ".join(facts), style="dim") if facts else None
        # --pid: what Dynamo had done before ctmon joined, read from PyTorch's
        # own state and never in the counts above
        joined = ctx.session.joined
        before_t = Text(joined.summary(), style="italic cyan") if joined is not None else None
        # what to keep when lines run short: totals and caches, then the
        # compile in progress, what came before a join, then the facts (or each rank's counts)
        optional = [x for x in (active, before_t, facts_t) if x is not None][: max(0, h - 2)]
        lines = [totals, *optional, cache]
        return Text("\n").join(lines[:h])


def _by_rank(s: Session) -> Text:
    """Each rank's own counts: 'r0 1 compile · r1 2 compiles, 1 recompile'."""
    out = Text("by rank: ", style="dim")
    for i, (r, rs) in enumerate(sorted(s.ranks.items())):
        t = totals_of(rs.session.compile)
        if i:
            out.append(" · ", style="dim")
        out.append(f"r{r} ", style="bold")
        words = [fmt.plural(t.compiles, "compile")]
        if t.recompiles:
            words.append(fmt.plural(t.recompiles, "recompile"))
        if t.breaks:
            words.append(fmt.plural(t.breaks, "break"))
        out.append(", ".join(words), style="yellow" if t.recompiles else "")
    out.append("  (r: each rank)", style="dim")
    return out


def _count(t: Text, n: int, word: str, style: str | None, plural: bool = True) -> None:
    t.append(f"{n:,}", style=(style or "") + " bold" if n else "dim")
    t.append(f" {word}{'s' if plural and n != 1 else ''} · ")
