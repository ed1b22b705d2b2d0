"""The text of the detail screens: a frame's compiles, a graph break's site."""

from __future__ import annotations

import os
import textwrap

from rich.text import Text

from ctmon.store import LogEntry, Session
from ctmon.store.compiles import BreakSite, CompileRecord, Frame, split_reason
from ctmon.tui import fmt
from ctmon.tui.compile_panes import budget
from ctmon.tui.context import ViewContext
from ctmon.tui.doc import Doc
from ctmon.tui.panels import localize
from ctmon.wire.events_compile import StackFrame
from ctmon.words.locations import is_library_path

SOURCE_CONTEXT = 5
MAX_SOURCE_BYTES = 8 << 20


def _section(out: Doc, title: str) -> None:
    out.blank()
    out.line((title, "bold underline"))


def _rel(ctx: ViewContext, t: float | None) -> str:
    start = ctx.start_time()
    return fmt.offset(t - start) if (t and start) else "?"


# ------------------------------------------------------------------- frame


def _called_from(out: Doc, called: StackFrame | None, cwd: str | None) -> None:
    """A place in a library's code: the user's own line that leads there."""
    if called is None or not called.file:
        return
    text = fmt.called_from_text({"file": called.file, "line": called.line}, cwd)
    out.para(f": {called.code}" if called.code else "", Text(f"  {text}", "bold cyan"), crop=True)


def frame_title(frame: Frame, ctx: ViewContext) -> str:
    return f"Frame {frame.title} at {fmt.where(frame.loc.file, frame.loc.line, ctx.cwd)}"


def frame_detail(frame: Frame, ctx: ViewContext) -> Doc:
    cwd = ctx.cwd
    out = Doc()
    out.line((frame.title, "bold"), f"  {fmt.where(frame.loc.file, frame.loc.line, cwd)}")
    _called_from(out, frame.called_from, cwd)
    if frame.code.name and (frame.code.file, frame.code.line) != (frame.loc.file, frame.loc.line):
        where = fmt.where(frame.code.file, frame.code.line, cwd)
        out.para(f"compiled code: {frame.code.name} at {where}", "  ", "dim")
    if frame.module:
        out.para(f"module: {frame.module}", "  ", "dim")
    b_text, b_style = budget(frame)
    out.para(
        Text.assemble(
            f"{fmt.plural(len(frame.compiles), 'compile')} ({frame.recompiles} recompiles) · budget ",
            (b_text, b_style or "bold"),
            (" (cache entries / recompile limit)", "dim"),
            f" · {fmt.seconds(frame.time_s)} compiling",
        ),
        "  ",
    )
    rt = ctx.view.hotness.frame_runtime(frame)
    if rt is not None and rt["calls"] is not None:
        out.para(f"its graphs ran {fmt.plural(rt['calls'], 'time')}", "  ")
    if rt is not None and rt["share"] is not None:
        how = "timed and sampled" if rt["timed"] else "sampled"
        out.para(
            Text.assemble(
                (
                    f"step time: {rt['share']:.0%} in its graphs, {rt['glue_share']:.0%} in its eager code between them",
                    "yellow" if rt["glue_share"] >= 0.1 else "",
                ),
                (f" (host time, {how})", "dim"),
            ),
            "  ",
        )
    if frame.limit_hit:
        out.para("! recompile limit hit: Dynamo no longer compiles this frame; it runs eagerly.", "  ", "bold red")
    _section(out, "Compiles")
    if not frame.compiles:
        out.para("none finished yet", "  ", "dim")
    for n, rec in enumerate(frame.compiles, 1):
        _compile_block(out, n, rec, ctx)
    return out


def _compile_block(out: Doc, n: int, rec: CompileRecord, ctx: ViewContext) -> None:
    cwd = ctx.cwd
    out.blank()
    head = Text.assemble(
        (f" #{n} ", "bold"), (f"{rec.compile_id}", "bold cyan"), f"  at {_rel(ctx, rec.t)}  {fmt.seconds(rec.time_s)}"
    )
    if rec.backend_s is not None:
        head.append(f" (backend {fmt.seconds(rec.backend_s)})", "dim")
    head.append("  ")
    if rec.limit_hit:
        head.append("RECOMPILE LIMIT HIT", "bold red")
    elif not rec.ok:
        head.append(f"FAILED ({rec.fail_type})", "bold red")
    elif rec.is_recompile:
        head.append("recompile", "bold yellow")
    else:
        head.append("first compile", "green")
    out.line(head)
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
        out.para(" · ".join(facts), "    ", "dim")
    if rec.recompile_reason:
        version, reason = split_reason(rec.recompile_reason)
        out.para(f"reason{f' (a guard of the cached version {version} failed)' if version else ''}:", "    ", "bold")
        out.para(localize(reason, cwd).rstrip(), "      ", "yellow")
    extra = [g for g in rec.guard_failures if g != rec.recompile_reason]
    if extra or len(rec.guard_failures) > 1:
        out.para("guard failures:", "    ", "bold")
        for g in rec.guard_failures:
            version, reason = split_reason(g)
            text = f"version {version}: {reason}" if version else reason
            out.para(localize(text, cwd).rstrip(), "      - ")
        if rec.versions_failed > len(rec.guard_failures):  # kinds are listed once (ctmon/wire/guard_reasons.py)
            out.para(
                f"({rec.versions_failed} versions failed: the first few, one of each kind listed)", "      ", "dim"
            )
    if rec.fail_reason:
        out.para("fail reason:", "    ", "bold")
        out.para(localize(rec.fail_reason, cwd).rstrip(), "      ", "red")
    for r in rec.restarts[:3]:
        out.para(f"restarted after: {fmt.first_line(r)}", "    ", "dim")
    if rec.cudagraph_skip:
        out.para(f"cudagraphs skipped: {fmt.first_line(rec.cudagraph_skip)}", "    ", "yellow")


# ------------------------------------------------------------- graph break


def break_title(site: BreakSite, ctx: ViewContext) -> str:
    return f"Graph break at {fmt.where(site.file, site.line, ctx.cwd)}"


def break_detail(site: BreakSite, ctx: ViewContext) -> Doc:
    cwd = ctx.cwd
    out = Doc()
    out.para(site.reason, style="bold magenta")
    out.para(
        Text.assemble(
            f"at {fmt.where(site.file, site.line, cwd)} · {fmt.plural(site.count, 'break')}",
            (f" · first {_rel(ctx, site.first_t)}, last {_rel(ctx, site.last_t)}", "dim"),
        ),
        "  ",
    )
    _called_from(out, site.called_from, cwd)
    if len(site.reasons) > 1:
        for reason, n in site.reasons.most_common(5):
            out.para(reason, f"  {n:>5}× ", "dim")
    _section(out, "Source")
    _source(out, site, ctx)
    rest = reason_rest(site)
    if rest:
        _section(out, "Reason")
        out.para(localize(rest, cwd), "  ")
    if site.explanation:
        _section(out, "Explanation")
        out.para(site.explanation.rstrip(), "  ")
    if site.hints:
        _section(out, "Hints")
        for h in site.hints:
            out.para(h.rstrip(), "  • ")
    if site.user_stack:
        _section(out, "User stack (most recent call last)")
        for fr in site.user_stack:
            file, line, name = fr.file, fr.line, fr.name
            internal = is_library_path(file)
            out.para(f"{fmt.where(file, line, cwd)} in {name}", "  ", "dim" if internal else "bold")
            if fr.code:
                out.para(fr.code, "      ", "dim", crop=True)
    ids = []
    if site.compile_ids:
        ids.append("compiles " + ", ".join(site.compile_ids[:12]) + (" …" if len(site.compile_ids) > 12 else ""))
    if site.gb_id:
        ids.append(f"id {site.gb_id}")
    if ids or site.url:
        _section(out, "More")
        if ids:
            out.para(" · ".join(ids), "  ", "dim")
        if site.url:
            out.para(site.url, "  ", "underline")
    return out


_LABELS = ("Explanation:", "Hint:")


def reason_rest(site: BreakSite) -> str:
    """PyTorch's message less what the screen shows on its own: the summary
    (the heading), the explanation and the hints (their own sections)."""
    if not site.detail:
        return ""
    shown = [label for label, there in zip(_LABELS, (site.explanation, site.hints), strict=True) if there]
    kept: list[str] = []
    for line in site.detail.strip().splitlines():
        s = line.strip()
        if s == site.reason.strip() or (shown and s.startswith(tuple(shown))):
            continue
        if not s and (not kept or not kept[-1].strip()):
            continue  # one blank line where lines were taken out
        kept.append(line.rstrip())
    text = "\n".join(kept).strip("\n")
    return textwrap.dedent(text) if text.strip() else ""


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


def _source(out: Doc, site: BreakSite, ctx: ViewContext) -> None:
    path = resolve_source(site.file, ctx.cwd)
    lines = read_source(path, site.line) if (path and site.line) else None
    if lines is None:
        why = "no file" if not path else f"{fmt.short_path(path, ctx.cwd)} is not readable here"
        out.para(f"(source not available: {why})", "  ", "dim")
        return
    width = len(str(lines[-1][0]))
    for n, text in lines:
        here = n == site.line
        # code keeps its layout: a long line is cut at the edge, never wrapped to column 0
        out.line(
            (" ▶ " if here else "   ", "bold magenta" if here else ""),
            (f"{n:>{width}} │ ", "bold" if here else "dim"),
            (text.replace("\t", "    "), "bold" if here else ""),
            crop=True,
        )


# ------------------------------------------------------------------ event


def entry_detail(e: LogEntry, ctx: ViewContext) -> Doc:
    out = Doc()
    out.line((f"{e.kind}", "bold"), (f" · {e.severity} · {_rel(ctx, e.t)}", "dim"))
    out.blank()
    out.para(localize(e.text, ctx.cwd))
    if e.ref is not None:
        out.blank()
        out.para(f"ref: {e.ref}", style="dim")
    return out


def find_frame(session: Session, ref: object) -> Frame | None:
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


def find_break(session: Session, ref: object) -> BreakSite | None:
    if isinstance(ref, tuple) and len(ref) == 2:
        return session.compile.breaks.get(ref)
    return None
