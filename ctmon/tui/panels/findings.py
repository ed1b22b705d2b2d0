"""The findings as the screen shows them, and how often the rules run."""

from __future__ import annotations

from time import monotonic
from typing import Any

from rich.text import Text

from ctmon.tui import fmt
from ctmon.tui.context import ViewContext
from ctmon.tui.doc import Doc
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
    """One line: what is wrong first, then where (a narrow line keeps the what)."""
    sev = "CRIT" if f.severity == "critical" else "warn"
    where = f" · {fmt.place(f.file, f.line, f.called_from, ctx.cwd, True)}" if f.file else ""
    return Text.assemble(
        (f"{sev} ", "bold red" if sev == "CRIT" else "bold yellow"),
        fmt.first_line(localize(f.title, ctx.cwd)),
        (where, "cyan"),
    )


def findings_body(ctx: ViewContext) -> Doc:
    """Every finding: title, where, why, the evidence and the fix; wrapped
    once, to the screen's width, each part under its own label."""
    found = current_findings(ctx, force=True)
    out = Doc()
    if not found:
        return out.line(("No findings: compilation looks healthy.", "dim"))
    for f in found:
        style = {"critical": "bold red", "warning": "bold yellow"}.get(f.severity, "bold")
        out.para(localize(f.title, ctx.cwd), (f"{f.severity.upper():<9}", style), "bold")
        called = f.called_from
        if called is not None and called.file:  # the user's own line first
            text = fmt.called_from_text({"file": called.file, "line": called.line}, ctx.cwd)
            out.para(text + (f": {called.code}" if called.code else ""), "  ", "bold cyan")
        if f.file:
            out.para(f"at {fmt.short_path(f.file, ctx.cwd, False)}:{f.line}", "  ", "cyan")
        if f.detail:
            out.para(f.detail.strip(), "  ")
        for e in f.evidence[:10]:
            out.para(localize(e, ctx.cwd).strip(), "  - ", "dim")
        if f.fix:
            out.para(f.fix.strip(), ("  fix: ", "bold green"))
        out.blank()
    return out
