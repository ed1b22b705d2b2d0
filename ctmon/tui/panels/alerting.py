"""What needs attention now: findings first, then the log's alerts."""

from __future__ import annotations

from itertools import islice
from typing import Any

from rich.text import Text

from ctmon.store import Session
from ctmon.tui import fmt
from ctmon.tui.context import ViewContext, put_title
from ctmon.tui.panels.base import Panel, localize
from ctmon.tui.panels.findings import finding_text, live_findings

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


def alert_text(e: Any, ctx: ViewContext) -> Text:
    sev = "CRIT" if e.severity == "critical" else "WARN"
    text = localize(e.text, ctx.cwd)
    return Text.assemble((f"{sev} ", "bold red" if sev == "CRIT" else "bold yellow"), fmt.first_line(text))


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
            out += [
                alert_text(e, ctx) for e in reversed(alerts(ctx.session, limit)) if e.kind in ("exit", "note", "error")
            ][: limit - len(out)]
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
