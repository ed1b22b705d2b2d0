"""What needs attention now: findings first, then the log's alerts."""

from __future__ import annotations

from collections import Counter
from itertools import islice

from rich.text import Text

from ctmon.findings.model import Finding
from ctmon.store import LogEntry, Session
from ctmon.tui import fmt
from ctmon.tui.context import ViewContext, job_label, put_title
from ctmon.tui.panels.base import Panel, localize
from ctmon.tui.panels.findings import current_findings, finding_text, live_findings, new_since_key

ALERTS_KEPT = 200
TB_HEADER = "Traceback (most recent call last):"
_alerts_cache: dict[int, tuple[Session, int, list[LogEntry]]] = {}


def is_alert(e: LogEntry) -> bool:
    return e.severity == "critical" or e.kind in ("limit", "error") or (e.kind == "note" and e.severity == "warning")


def alerts(s: Session, limit: int = 20) -> list[LogEntry]:
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


def alert_text(e: LogEntry, ctx: ViewContext) -> Text:
    sev = "CRIT" if e.severity == "critical" else "WARN"
    text = localize(e.text, ctx.cwd)
    return Text.assemble((f"{sev} ", "bold red" if sev == "CRIT" else "bold yellow"), fmt.first_line(text))


def severity_counts(found: list[Finding]) -> str:
    """'1 CRIT, 2 warn, 3 info': how many findings of each severity."""
    n = Counter(f.severity for f in found)
    parts = [
        f"{n[sev]} {word}" for sev, word in (("critical", "CRIT"), ("warning", "warn"), ("info", "info")) if n[sev]
    ]
    return ", ".join(parts)


class AlertsPanel(Panel):
    """What needs attention now, and the way to the fixes: the findings of
    severity warning and above, most severe first (recompile limit hit or
    near, storms of recompiles, graph breaks in the loop, cache misses,
    skipped CUDA graphs, an idle GPU, the job failing), then the log's alerts
    (failed compiles, ctmon's own warnings). Its title counts every finding
    by severity and names the key (``a``) that opens them all with their
    evidence and fixes; when not all fit, the last line says how many more.

    On a wide screen it sits beside the Compilation pane; on a small one it
    is a strip under it, as tall as what it lists (up to ``max_lines``), and
    gone when there is nothing to list."""

    SECTIONS = ("log",)

    DEFAULT_CSS = """
    AlertsPanel { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    max_lines: int | None = None  # the strip's cap (small screens); None: as many as the panel holds

    def update_key(self) -> tuple[object, ...]:
        # the findings shown (recomputed at most every FINDINGS_EVERY_S) decide
        found = current_findings(self.ctx)
        marked = new_since_key(found, self.ctx)  # --baseline: a finding turned new since BASE is redrawn
        return (*super().update_key(), tuple(f.id for f in found), marked, self.max_lines, bool(self.ctx.session.ranks))

    def on_resize(self) -> None:
        self.set_title()  # the title's hint fits the width

    def _sources(self, limit: int) -> tuple[list[Finding], list[LogEntry]]:
        """The findings to list, and up to ``limit`` of ctmon's own warnings
        (newest first). The log's other alerts each have a finding that
        says more: a failed compile, the recompile limit, the job's exit."""
        ctx = self.ctx
        # (a note that is only a traceback's first line is Dynamo's error for a failed compile: its finding says it)
        notes = [e for e in reversed(alerts(ctx.session, limit)) if e.kind == "note" and e.text.strip() != TB_HEADER]
        return live_findings(ctx), notes

    def _items(self, limit: int) -> tuple[list[Text], int]:
        """The lines that fit in ``limit`` and how many items were left out.
        Only those lines are formatted: a compile storm can raise hundreds of
        findings, and formatting them all on every repaint costs more than
        the rest of the screen."""
        ctx = self.ctx
        found, extra = self._sources(limit + 1)
        total = len(found) + len(extra)
        shown = min(limit, total)
        out = [finding_text(f, ctx) for f in found[:shown]]
        out += [alert_text(e, ctx) for e in extra[: shown - len(out)]]
        return out, total - len(out)

    def wanted_lines(self) -> int:
        """How many lines the strip takes (small screens): what it lists, up to its cap."""
        if self.max_lines is None:
            return self.content_height
        found, extra = self._sources(self.max_lines)
        return min(self.max_lines, len(found) + len(extra))

    def update_view(self) -> None:
        if self.max_lines is not None:  # a strip: as tall as what it lists, with its title line
            n = self.wanted_lines()
            self.display = n > 0
            self.styles.height = n + self.styles.gutter.height  # its title line
        super().update_view()

    def set_title(self) -> None:
        found = current_findings(self.ctx)
        head = f"Findings · {severity_counts(found)}" if found else "Findings"
        room = self.outer_size.width - 5  # the border's corners and the spaces around the title
        job = job_label(self.ctx)
        if not found:
            put_title(self, head + job)
            return
        # the way to the fixes first: a narrow title gives up its other words before the key
        titles = (
            f"{head}{job} · a: all, with fixes",
            f"{head}{job} · a: fixes",
            f"{head} · a: fixes",
            f"{head} · a",
            "Findings · a",
        )
        put_title(self, next((t for t in titles if len(t) <= room), titles[-1]))

    def render_text(self) -> Text:
        h, w = self.content_height, self.content_width
        items, more = self._items(max(1, h))
        if not items:
            found = current_findings(self.ctx)
            if found:
                return Text(f"{severity_counts(found)}: nothing that needs attention", style="dim")
            return Text("no findings: compilation looks healthy", style="dim")
        if more:  # the last line ends with how many more, and the key that lists them
            mark = Text.assemble((f" +{more} more ", "bold"), ("a", "bold reverse"))
            last = items[-1]
            last.truncate(max(1, w - mark.cell_len), overflow="ellipsis", pad=True)
            last.append_text(mark)
        out = Text("\n").join(items[: max(1, h)])
        out.no_wrap = True
        out.overflow = "ellipsis"
        return out
