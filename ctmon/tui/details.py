"""The text of the detail screens: a frame's compiles, a graph break's site."""

from __future__ import annotations

import os
from typing import Any

from rich.text import Text

from ctmon.store import LogEntry, Session
from ctmon.store.compiles import BreakSite, CompileRecord, Frame, split_reason
from ctmon.tui import fmt
from ctmon.tui.context import ViewContext
from ctmon.tui.panels import localize
from ctmon.tui.panes import budget
from ctmon.wire.events import StackFrame

SOURCE_CONTEXT = 5
MAX_SOURCE_BYTES = 8 << 20


def _section(out: Text, title: str) -> None:
    out.append("\n")
    out.append(title, "bold underline")
    out.append("\n")


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.rstrip().splitlines())


def _rel(ctx: ViewContext, t: float | None) -> str:
    start = ctx.start_time()
    return fmt.offset(t - start) if (t and start) else "?"


# ------------------------------------------------------------------- frame


def _called_from(out: Text, called: StackFrame | None, cwd: str | None) -> None:
    """A place in a library's code: the user's own line that leads there."""
    if called is None or not called.file:
        return
    out.append(f"  {fmt.called_from_text({'file': called.file, 'line': called.line}, cwd)}", "bold cyan")
    out.append(f": {called.code}\n" if called.code else "\n")


def frame_title(frame: Frame, ctx: ViewContext) -> str:
    return f"Frame {frame.title} at {fmt.where(frame.loc.file, frame.loc.line, ctx.cwd)}"


def frame_detail(frame: Frame, ctx: ViewContext) -> Text:
    cwd = ctx.cwd
    out = Text()
    out.append(frame.title, "bold")
    out.append(f"  {fmt.where(frame.loc.file, frame.loc.line, cwd)}\n")
    _called_from(out, frame.called_from, cwd)
    if frame.code.name and (frame.code.file, frame.code.line) != (frame.loc.file, frame.loc.line):
        out.append(f"  compiled code: {frame.code.name} at {fmt.where(frame.code.file, frame.code.line, cwd)}\n", "dim")
    if frame.module:
        out.append(f"  module: {frame.module}\n", "dim")
    b_text, b_style = budget(frame)
    out.append(f"  {fmt.plural(len(frame.compiles), 'compile')} ({frame.recompiles} recompiles) · budget ")
    out.append(b_text, b_style or "bold")
    out.append(" (cache entries / recompile limit)", "dim")
    out.append(f" · {fmt.secs(frame.time_s)} compiling\n")
    rt = ctx.view.hotness.frame_runtime(frame)
    if rt is not None and rt["calls"] is not None:
        out.append(f"  its graphs ran {fmt.plural(rt['calls'], 'time')}\n")
    if rt is not None and rt["share"] is not None:
        out.append(
            f"  step time: {rt['share']:.0%} in its graphs, {rt['glue_share']:.0%} in its eager code between them",
            "yellow" if rt["glue_share"] >= 0.1 else "",
        )
        how = "timed and sampled" if rt["timed"] else "sampled"
        out.append(f" (host time, {how})\n", "dim")
    if frame.limit_hit:
        out.append("  ! recompile limit hit: Dynamo no longer compiles this frame; it runs eagerly.\n", "bold red")
    _section(out, "Compiles")
    if not frame.compiles:
        out.append("  none finished yet\n", "dim")
    for n, rec in enumerate(frame.compiles, 1):
        _compile_block(out, n, rec, ctx)
    return out


def _compile_block(out: Text, n: int, rec: CompileRecord, ctx: ViewContext) -> None:
    cwd = ctx.cwd
    out.append(f"\n #{n} ", "bold")
    out.append(f"{rec.compile_id}", "bold cyan")
    out.append(f"  at {_rel(ctx, rec.t)}  {fmt.secs(rec.time_s)}")
    if rec.backend_s is not None:
        out.append(f" (backend {fmt.secs(rec.backend_s)})", "dim")
    out.append("  ")
    if rec.limit_hit:
        out.append("RECOMPILE LIMIT HIT", "bold red")
    elif not rec.ok:
        out.append(f"FAILED ({rec.fail_type})", "bold red")
    elif rec.is_recompile:
        out.append("recompile", "bold yellow")
    else:
        out.append("first compile", "green")
    out.append("\n")
    facts = []
    if rec.graph_ops is not None:
        facts.append(f"{rec.graph_ops} ops")
    if rec.guards is not None:
        facts.append(f"{rec.guards} guards")
    if rec.graph_breaks:
        facts.append(f"{rec.graph_breaks} graph breaks")
    if rec.cache_size is not None:
        facts.append(f"{rec.cache_size} earlier entries")
    if facts:
        out.append("    " + " · ".join(facts) + "\n", "dim")
    if rec.recompile_reason:
        version, reason = split_reason(rec.recompile_reason)
        out.append(f"    reason{f' (a guard of the cached version {version} failed)' if version else ''}:\n", "bold")
        out.append(_indent(localize(reason, cwd), "      ") + "\n", "yellow")
    extra = [g for g in rec.guard_failures if g != rec.recompile_reason]
    if extra or len(rec.guard_failures) > 1:
        out.append("    guard failures:\n", "bold")
        for g in rec.guard_failures:
            version, reason = split_reason(g)
            text = f"version {version}: {reason}" if version else reason
            out.append(_indent(localize(text, cwd), "      - ").replace("\n      - ", "\n        ") + "\n")
        if rec.versions_failed > len(rec.guard_failures):  # kinds are listed once (ctmon/wire/guard_reasons.py)
            out.append(
                f"      ({rec.versions_failed} versions failed: the first few, one of each kind listed)\n", "dim"
            )
    if rec.fail_reason:
        out.append("    fail reason:\n", "bold")
        out.append(_indent(localize(rec.fail_reason, cwd), "      ") + "\n", "red")
    for r in rec.restarts[:3]:
        out.append(f"    restarted after: {fmt.first_line(r)}\n", "dim")
    if rec.cudagraph_skip:
        out.append(f"    cudagraphs skipped: {fmt.first_line(rec.cudagraph_skip)}\n", "yellow")


# ------------------------------------------------------------- graph break


def break_title(site: BreakSite, ctx: ViewContext) -> str:
    return f"Graph break at {fmt.where(site.file, site.line, ctx.cwd)}"


def break_detail(site: BreakSite, ctx: ViewContext) -> Text:
    cwd = ctx.cwd
    out = Text()
    out.append(site.reason, "bold magenta")
    out.append(f"\n  at {fmt.where(site.file, site.line, cwd)} · {fmt.plural(site.count, 'break')}")
    out.append(f" · first {_rel(ctx, site.first_t)}, last {_rel(ctx, site.last_t)}\n", "dim")
    _called_from(out, site.called_from, cwd)
    if len(site.reasons) > 1:
        for reason, n in site.reasons.most_common(5):
            out.append(f"  {n:>5}× {reason}\n", "dim")
    _section(out, "Source")
    _source(out, site, ctx)
    if site.detail:
        _section(out, "Reason")
        out.append(_indent(localize(site.detail, cwd)) + "\n")
    if site.explanation:
        _section(out, "Explanation")
        out.append(_indent(site.explanation) + "\n")
    if site.hints:
        _section(out, "Hints")
        for h in site.hints:
            out.append(_indent(h, "  • ").replace("\n  • ", "\n    ") + "\n")
    if site.user_stack:
        _section(out, "User stack (most recent call last)")
        for fr in site.user_stack:
            file, line, name = fr.file, fr.line, fr.name
            internal = (
                not file or str(file).startswith("<") or "/site-packages/" in str(file) or "/ctmon/agent/" in str(file)
            )
            out.append(f"  {fmt.where(file, line, cwd)} in {name}\n", "dim" if internal else "bold")
            code = fr.code
            if code:
                out.append(f"      {code}\n", "dim")
    ids = []
    if site.compile_ids:
        ids.append("compiles " + ", ".join(site.compile_ids[:12]) + (" …" if len(site.compile_ids) > 12 else ""))
    if site.gb_id:
        ids.append(f"id {site.gb_id}")
    if ids or site.url:
        _section(out, "More")
        if ids:
            out.append("  " + " · ".join(ids) + "\n", "dim")
        if site.url:
            out.append(f"  {site.url}\n", "underline")
    return out


def resolve_source(file: str | None, cwd: str | None) -> str | None:
    if not file or file.startswith("<"):
        return None
    if not os.path.isabs(file) and cwd:
        file = os.path.join(cwd, file)
    return file


def read_source(path: str, line: int, context: int = SOURCE_CONTEXT) -> list[tuple[int, str]] | None:
    """Lines around ``line`` (1-based), or None if the file cannot be read."""
    try:
        if os.path.getsize(path) > MAX_SOURCE_BYTES:
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except (OSError, ValueError):
        return None
    if line < 1 or line > len(lines):
        return None
    lo, hi = max(1, line - context), min(len(lines), line + context)
    return [(n, lines[n - 1]) for n in range(lo, hi + 1)]


def _source(out: Text, site: BreakSite, ctx: ViewContext) -> None:
    path = resolve_source(site.file, ctx.cwd)
    lines = read_source(path, site.line) if (path and site.line) else None
    if lines is None:
        why = "no file" if not path else f"{fmt.short_path(path, ctx.cwd)} is not readable here"
        out.append(f"  (source not available: {why})\n", "dim")
        return
    width = len(str(lines[-1][0]))
    for n, text in lines:
        here = n == site.line
        out.append(" ▶ " if here else "   ", "bold magenta" if here else "")
        out.append(f"{n:>{width}} │ ", "bold" if here else "dim")
        out.append(text.replace("\t", "    ") + "\n", "bold" if here else "")


# ------------------------------------------------------------------ event


def entry_detail(e: LogEntry, ctx: ViewContext) -> Text:
    out = Text()
    out.append(f"{e.kind}", "bold")
    out.append(f" · {e.severity} · {_rel(ctx, e.t)}\n\n", "dim")
    out.append(localize(e.text, ctx.cwd) + "\n")
    if e.ref is not None:
        out.append(f"\nref: {e.ref}\n", "dim")
    return out


def find_frame(session: Session, ref: Any) -> Frame | None:
    """The frame a log entry (compile id) points at."""
    if ref is None:
        return None
    cid = str(ref)
    for frame in session.compile.frames.values():
        for rec in frame.compiles:
            if rec.compile_id == cid:
                return frame
    prefix = cid.split("/")[0]
    for frame in session.compile.frames.values():
        if str(frame.frame_id) == prefix:
            return frame
    return None


def find_break(session: Session, ref: Any) -> BreakSite | None:
    if isinstance(ref, tuple) and len(ref) == 2:
        return session.compile.breaks.get(ref)
    return None
