"""The findings as the screen shows them, and how often the rules run."""

from __future__ import annotations

from rich.text import Text

from ctmon.findings.current import paced_findings
from ctmon.findings.model import Finding
from ctmon.tui import fmt
from ctmon.tui.context import ViewContext
from ctmon.tui.doc import Doc
from ctmon.tui.panels.base import localize

NEW_TAG = "NEW "  # before the title of a finding new since BASE (--baseline)


def current_findings(ctx: ViewContext, force: bool = False) -> list[Finding]:
    """The session's findings as the screen shows them (paced: see ctmon/findings/current.py)."""
    return paced_findings(ctx.session, gen=ctx.gen, catching_up=ctx.catching_up, force=force)


def live_findings(ctx: ViewContext) -> list[Finding]:
    """Findings of severity warning and above, most severe first."""
    return [f for f in current_findings(ctx) if f.severity in ("critical", "warning")]


def new_since_base(f: Finding, ctx: ViewContext, found: list[Finding] | None = None) -> list[str]:
    """What is new since BASE at the finding, one of ``found`` (default: the
    findings as the screen has them); empty without ``--baseline``. The
    marks are found with the findings, once a run of the rules."""
    if ctx.since is None:
        return []
    return ctx.since.marks_of(f, current_findings(ctx) if found is None else found, ctx.session)


def new_since_key(found: list[Finding], ctx: ViewContext) -> tuple[bool, ...]:
    """Which findings are marked new: a finding whose place turns new keeps its id."""
    return tuple(bool(new_since_base(f, ctx, found)) for f in found) if ctx.since is not None else ()


def finding_text(f: Finding, ctx: ViewContext) -> Text:
    """One line: what is wrong first, then where (a narrow line keeps the what)."""
    sev = "CRIT" if f.severity == "critical" else "warn"
    where = f" · {fmt.place(f.file, f.line, f.called_from, ctx.cwd, True)}" if f.file else ""
    return Text.assemble(
        (f"{sev} ", "bold red" if sev == "CRIT" else "bold yellow"),
        (NEW_TAG, "bold reverse") if new_since_base(f, ctx) else "",
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
        for what in new_since_base(f, ctx, found):
            out.para(
                localize(what, ctx.cwd), (f"  new since {ctx.since.name if ctx.since else 'BASE'}: ", "bold reverse")
            )
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
