"""The findings as the screen shows them, and how often the rules run."""

from __future__ import annotations

import textwrap
from time import monotonic
from typing import Any

from rich.text import Text

from ctmon.tui import fmt
from ctmon.tui.context import ViewContext
from ctmon.tui.panels.base import localize

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
    where = f" {fmt.place(f.file, f.line, f.called_from, ctx.cwd, True)}" if f.file else ""
    return Text.assemble(
        (f"{sev}", "bold red" if sev == "CRIT" else "bold yellow"),
        (where, "cyan"),
        " ",
        fmt.first_line(localize(f.title, ctx.cwd)),
    )


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
        called = f.called_from
        if called is not None and called.file:  # the user's own line first
            text = fmt.called_from_text({"file": called.file, "line": called.line}, ctx.cwd)
            out.append(f"  {text}" + (f": {called.code}" if called.code else "") + "\n", "bold cyan")
        if f.file:
            out.append(f"  at {fmt.short_path(f.file, ctx.cwd, False)}:{f.line}\n", "cyan")
        if f.detail:
            out.append(textwrap.indent(textwrap.fill(f.detail, 100), "  ") + "\n")
        for e in f.evidence[:10]:
            out.append(
                textwrap.indent(textwrap.fill(localize(e, ctx.cwd), 100, subsequent_indent="    "), "  - ") + "\n",
                "dim",
            )
        if f.fix:
            out.append("  fix: ", "bold green")
            out.append(textwrap.fill(f.fix, 100, subsequent_indent="       ")[0:] + "\n")
        out.append("\n")
    return out
