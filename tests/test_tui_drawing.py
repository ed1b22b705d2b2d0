"""How the panels are drawn, and what a backlog costs them.

The panels draw their Text through ctmon.tui.strips instead of Textual's
content path (cheaper on every repaint of a running job): the screen must
look exactly as Textual would have drawn it. And the alerts panel must not
pay for work nobody sees: findings beyond the lines that fit, or re-running
the rules on every repaint while a long history is folded.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os

import pytest
from rich.console import Console
from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from ctmon.findings import current as findings_current
from ctmon.read.feeds import RecordingFeed
from ctmon.store import Session
from ctmon.tui import panels
from ctmon.tui.app import CtmonApp
from ctmon.tui.context import ViewContext
from ctmon.tui.panels import AlertsPanel, current_findings
from ctmon.tui.strips import text_strips
from ctmon.tui.testing import wait_loaded

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "recordings")
BASE = Style(color="#e0e0e0", bgcolor="#121212")


def run_async(fn):  # type: ignore[no-untyped-def]
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


def cells(strip) -> list[tuple[str, Style | None]]:  # type: ignore[no-untyped-def]
    return [(ch, seg.style) for seg in strip for ch in seg.text]


def test_text_strips_fit_each_line_to_the_width() -> None:
    console = Console(width=40, force_terminal=True, color_system="truecolor")
    text = Text.assemble(("ok", "green"), " done\n", ("a line far too long for the panel", "bold"), "\nthird\nfourth")
    strips = text_strips(text, 12, 3, BASE, console)
    assert len(strips) == 3  # cut to the height
    assert all(s.cell_length == 12 for s in strips)
    assert "".join(ch for ch, _ in cells(strips[0])) == "ok done     "
    assert "".join(ch for ch, _ in cells(strips[1])) == "a line far …"  # nowrap, ellipsis
    first = cells(strips[0])
    green = console.get_style("green").color
    assert first[0][1].color == green and first[0][1].bgcolor == BASE.bgcolor  # span over the widget's style
    assert first[3][1].color == BASE.color  # plain text keeps the widget's colour
    assert all(style.meta.get("offset") is not None for _, style in first)  # text selection still works


def test_text_strips_apply_the_texts_own_style() -> None:
    console = Console(width=40, force_terminal=True, color_system="truecolor")
    (strip,) = text_strips(Text("none", style="dim"), 6, 1, BASE, console)
    assert all(style.dim for ch, style in cells(strip)[:4])


async def _screen_cells(case: str, size: tuple[int, int]) -> list[list[tuple[str, object]]]:
    app = CtmonApp(RecordingFeed(os.path.join(FIXTURES, f"{case}.jsonl")), replay=True)
    async with app.run_test(size=size) as pilot:
        await wait_loaded(pilot)
        await pilot.pause(0.1)
        rows = app.screen._compositor.render_strips()
    # what a terminal shows: the character, its colours and attributes (a
    # space's foreground colour is invisible; selection offsets are not drawn)
    out = []
    for strip in rows:
        row: list[tuple[str, object]] = []
        for ch, st in cells(strip):
            look = (st.bgcolor, st.bold, bool(st.dim), st.italic, st.underline, st.reverse) if st else None
            row.append((ch, look if ch == " " else (st.color if st else None, look)))
        out.append(row)
    return out


@pytest.mark.parametrize("case,size", [("healthy", (160, 48)), ("many_breaks", (80, 24)), ("multi_gpu", (160, 48))])
def test_panels_look_as_textual_would_draw_them(
    monkeypatch: pytest.MonkeyPatch, case: str, size: tuple[int, int]
) -> None:
    ours = asyncio.run(_screen_cells(case, size))
    monkeypatch.setattr(panels.Panel, "render_line", Widget.render_line)  # Textual's own content path
    textuals = asyncio.run(_screen_cells(case, size))
    assert ours == textuals


def _events(name: str) -> list[dict]:
    with open(os.path.join(FIXTURES, f"{name}.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_findings_wait_for_the_end_of_a_backlog(monkeypatch: pytest.MonkeyPatch) -> None:
    real_clock = findings_current.monotonic
    # multi_gpu's 19th event brings its first warning (shape recompiles)
    events = _events("multi_gpu")
    ctx = ViewContext(session=Session(), catching_up=True)
    for ev in events[:10]:
        ctx.session.apply(ev)
    assert not [f for f in current_findings(ctx) if f.severity != "info"]
    for ev in events[10:20]:
        ctx.session.apply(ev)
    # still folding the backlog: the rules are not run again, however long it takes
    monkeypatch.setattr(findings_current, "monotonic", lambda: real_clock() + 3600)
    assert not [f for f in current_findings(ctx) if f.severity != "info"]
    ctx.catching_up = False
    # the backlog is folded: the next look runs them at once
    assert [f.id for f in current_findings(ctx) if f.severity != "info"]


@run_async
async def test_alerts_format_only_the_lines_that_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    formatted = []
    real = panels.finding_text

    def counting(f, ctx):  # type: ignore[no-untyped-def]
        formatted.append(f)
        return real(f, ctx)

    app = CtmonApp(RecordingFeed(os.path.join(FIXTURES, "many_breaks.jsonl")), replay=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_loaded(pilot)
        alerts = app.screen.query_one(AlertsPanel)
        found = panels.live_findings(alerts.ctx)
        assert len(found) > alerts.content_height  # more findings than lines
        monkeypatch.setattr(panels.alerting, "finding_text", counting)
        text = alerts.render_text()
        assert len(formatted) == alerts.content_height
        assert len(text.plain.splitlines()) == alerts.content_height
