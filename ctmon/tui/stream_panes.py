"""The list panes of what streams by: the event log and the job's output."""

from __future__ import annotations

from itertools import islice

from rich.text import Text

from ctmon.store import LogEntry
from ctmon.store.compiles import CompileRecord, Frame
from ctmon.store.output import OutputLine
from ctmon.tui import fmt
from ctmon.tui.compile_panes import Pane, one_line, reason_text
from ctmon.tui.context import ViewContext, job_label, put_title, rank_label
from ctmon.tui.panels import localize
from ctmon.tui.safe import ansi_text

KIND_LABEL = {
    "compile": ("compile", "cyan"),
    "recompile": ("RECOMPILE", "bold yellow"),
    "graph_break": ("BREAK", "magenta"),
    "cache": ("cache", "blue"),
    "limit": ("LIMIT", "bold red"),
    "error": ("FAILED", "bold red"),
    "note": ("note", "dim"),
    "exit": ("exit", "bold"),
    "autotune": ("autotune", "blue"),
    "cudagraph": ("cudagraph", "yellow"),
}
SEVERITY_WORD = {"info": ("", ""), "warning": ("warn", "yellow"), "critical": ("CRIT", "bold red")}

#: What ``f`` cycles through in the events pane.
KIND_PRESETS: list[tuple[str, frozenset[str] | None]] = [
    ("all", None),
    ("compiles", frozenset({"compile", "recompile", "limit", "error"})),
    ("recompiles", frozenset({"recompile", "limit"})),
    ("graph breaks", frozenset({"graph_break"})),
    ("cache", frozenset({"cache", "autotune"})),
    ("alerts", frozenset({"limit", "error", "exit", "note", "cudagraph"})),
]
ALL_KINDS = list(KIND_LABEL)
LOG_VIEW_MAX = 5000


class EventsPane(Pane):
    SCOPED = True
    NAME = "events"
    SECTIONS = ("log",)

    def __init__(self, ctx: ViewContext, id: str | None = None) -> None:
        super().__init__(ctx, self._row, follow=True, empty="no events yet", id=id)
        self.kinds: frozenset[str] | None = None
        self.preset = 0
        self._seen: tuple[object, int] = (-1, -1)  # ((gen, rank), log revision) the list reflects
        self._index_of: object = None
        self._index: dict[str, CompileRecord] = {}
        self._indexed = 0

    def set_kinds(self, kinds: frozenset[str] | None) -> None:
        self.kinds = kinds if kinds else None
        self.preset = next((i for i, (_, k) in enumerate(KIND_PRESETS) if k == self.kinds), -1)
        self._seen = (-1, -1)
        self.maybe_update(force=True)

    def cycle_kinds(self) -> str:
        self.preset = (self.preset + 1) % len(KIND_PRESETS)
        name, kinds = KIND_PRESETS[self.preset]
        self.kinds = kinds
        self._seen = (-1, -1)
        self.maybe_update(force=True)
        return name

    def set_filter(self, text: str) -> None:
        self._seen = (-1, -1)
        super().set_filter(text)

    def kinds_label(self) -> str:
        if self.kinds is None:
            return ""
        if 0 <= self.preset < len(KIND_PRESETS):
            return f" [{KIND_PRESETS[self.preset][0]}]"
        return " [" + ",".join(sorted(KIND_LABEL.get(k, (k,))[0].lower() for k in self.kinds)) + "]"

    def accept(self, e: LogEntry) -> bool:
        if self.kinds is not None and e.kind not in self.kinds:
            return False
        if not self.filter_text:
            return True
        return self.matches(f"{e.kind} {e.text} {self._text(e, False)}")

    def _compile(self, compile_id: object) -> tuple[Frame, CompileRecord] | None:
        """The compile a log entry refers to (index built as compiles arrive)."""
        c = self.ctx.view.compile
        if self._index_of is not c or self._indexed > len(c.compiles):
            self._index_of, self._index, self._indexed = c, {}, 0
        if self._indexed < len(c.compiles):
            for rec in c.compiles[self._indexed :]:
                self._index[rec.compile_id] = rec
            self._indexed = len(c.compiles)
        found = self._index.get(str(compile_id))
        frame = c.frames.get(found.frame_id) if found is not None else None
        return (frame, found) if frame is not None and found is not None else None

    def _text(self, e: LogEntry, narrow: bool) -> str:
        """Recompiles lead with their reason: it is what the reader is after."""
        if e.kind == "recompile" and e.ref is not None:
            found = self._compile(e.ref)
            if found is not None:
                frame, rec = found
                where = fmt.place(
                    frame.loc.file, frame.loc.line, rec.called_from or frame.called_from, self.ctx.cwd, narrow
                )
                reason = reason_text(rec.recompile_reason, self.ctx.cwd)
                return f"{rec.compile_id} {frame.title}: {reason} · {where} · {fmt.seconds(rec.time_s)}"
        if e.kind == "graph_break" and isinstance(e.ref, tuple):
            site = self.ctx.view.compile.breaks.get(e.ref)
            if site is not None and len(site.reasons) == 1:  # else the entry's own words
                return (
                    f"{fmt.place(site.file, site.line, site.called_from, self.ctx.cwd, narrow)} {one_line(site.reason)}"
                )
        return one_line(localize(e.text, self.ctx.cwd, narrow=narrow))

    def _row(self, e: LogEntry, width: int) -> Text:
        start = self.ctx.start_time()
        when = fmt.offset(e.t - start) if start and e.t else ""
        label, style = KIND_LABEL.get(e.kind, (e.kind, ""))
        sev, sev_style = SEVERITY_WORD.get(e.severity, ("", ""))
        text = self._text(e, narrow=width < 120)
        row = Text.assemble((f"{when:>8} ", "dim"), (f"{label:<9} ", style))
        if width >= 70:
            row.append(f"{sev:<4} ", sev_style)
        elif sev:
            row.append("! ", sev_style)
        row.append(text, "red" if e.severity == "critical" else "")
        return row

    def update_view(self) -> None:
        s = self.ctx.view
        rev = s.rev["log"]
        # another rank chosen is another log: start over
        gen = (self.ctx.gen, self.ctx.rank)
        seen_gen, seen_rev = self._seen
        new = rev - seen_rev
        if gen != seen_gen or new < 0 or new > len(s.log) or seen_rev < 0:
            self.set_items([e for e in s.log if self.accept(e)])
        elif new:
            fresh = list(islice(s.log, len(s.log) - new, len(s.log)))
            self.extend([e for e in fresh if self.accept(e)], limit=LOG_VIEW_MAX)
        self._seen = (gen, rev)
        put_title(self, f"Events · {len(self.items):,}{rank_label(self.ctx)}{self.kinds_label()}{self.filter_label()}")


# ------------------------------------------------------------------ output


OUTPUT_VIEW_MAX = 5000


class OutputPane(Pane):
    NAME = "output"
    SECTIONS = ("output",)

    def __init__(self, ctx: ViewContext, id: str | None = None) -> None:
        super().__init__(ctx, self._row, follow=True, empty="no output yet", id=id)
        self._seen = (-1, -1)
        self._partials = 0

    def set_filter(self, text: str) -> None:
        self._seen = (-1, -1)
        super().set_filter(text)

    def _row(self, line: OutputLine, width: int) -> Text:
        return ansi_text(line.text)

    def update_view(self) -> None:
        out = self.ctx.session.output
        gen = self.ctx.gen
        seen_gen, seen_total = self._seen
        new = out.total_lines - seen_total
        if self._partials:
            del self.items[-self._partials :]
            self._partials = 0
        if gen != seen_gen or seen_total < 0 or new < 0 or new > len(out.lines):
            rows = [ln for ln in out.lines if self.matches(ln.text)]
            rows += self._partial_rows()
            self.set_items(rows)
        else:
            fresh = list(islice(out.lines, len(out.lines) - new, len(out.lines))) if new else []
            rows = [ln for ln in fresh if self.matches(ln.text)] + self._partial_rows()
            if rows:
                self.extend(rows, limit=OUTPUT_VIEW_MAX)
            else:
                self._update_size()
                self.refresh()
        self._seen = (gen, out.total_lines)
        put_title(self, f"Output{job_label(self.ctx)}{self.filter_label()}")

    def _partial_rows(self) -> list[OutputLine]:
        rows = []
        out = self.ctx.session.output
        for stream in ("stdout", "stderr"):
            tail = out.partial(stream)
            if tail:
                pieces = [p for p in tail.split("\r") if p]
                if pieces and self.matches(pieces[-1]):
                    rows.append(OutputLine(stream, pieces[-1]))
        self._partials = len(rows)
        return rows
