"""The Perfetto export drawn as an SVG: the same tracks, for a README or a
pull request where no trace viewer runs. Drawn from the export itself
(ctmon/report/perfetto.py), so the picture is what Perfetto would show:
per process, a row of steps (height: the step's time), a row of compiles
(phases darker inside), a row of instants (graph breaks red, cache hits
green, misses orange), and the counters as lines."""

from __future__ import annotations

from html import escape
from typing import Any

from ctmon.words.textsafe import clean_markup

WIDTH = 1000
LEFT = 110
ROW = 34
COUNTER_ROW = 46


def draw(timeline: dict[str, Any]) -> str:
    evs = timeline.get("traceEvents") or []
    names = {e["pid"]: e["args"]["name"] for e in evs if e.get("ph") == "M" and e.get("name") == "process_name"}
    timed = [e for e in evs if e.get("ph") != "M"]
    end = max((e["ts"] + e.get("dur", 0) for e in timed), default=1.0) or 1.0
    span = WIDTH - LEFT - 10

    def x(ts: float) -> float:
        return LEFT + ts / end * span

    rows: list[str] = []
    y = 24
    for pid in sorted(names):
        mine = [e for e in timed if e["pid"] == pid]
        if not mine:
            continue
        rows.append(f'<text x="4" y="{y + 12}" class="p">{_text(names[pid], 60)}</text>')
        y += 16
        steps = [e for e in mine if e["ph"] == "X" and e.get("tid") == 1]
        if steps:
            top = max(e["dur"] for e in steps) or 1.0
            rows.append(_label(y, "steps"))
            for e in steps:
                h = max(1.0, e["dur"] / top * (ROW - 8))
                w = max(0.6, x(e["ts"] + e["dur"]) - x(e["ts"]))
                rows.append(
                    f'<rect x="{x(e["ts"]):.1f}" y="{y + ROW - 4 - h:.1f}" width="{w:.1f}" height="{h:.1f}" class="s"/>'
                )
            y += ROW
        compiles = [e for e in mine if e["ph"] == "X" and e.get("tid") == 2]
        if compiles:
            rows.append(_label(y, "compiles"))
            for e in compiles:
                phase = not e["name"].startswith(("compile", "recompile", "backward"))
                cls = "ph" if phase else ("r" if e["name"].startswith("recompile") else "c")
                w = max(1.0, x(e["ts"] + e["dur"]) - x(e["ts"]))
                inset = 6 if phase else 2
                rows.append(
                    f'<rect x="{x(e["ts"]):.1f}" y="{y + inset}" width="{w:.1f}" height="{ROW - 4 - 2 * inset}" '
                    f'class="{cls}"><title>{_text(e["name"])}</title></rect>'
                )
            y += ROW
        instants = [e for e in mine if e["ph"] == "i"]
        if instants:
            rows.append(_label(y, "events"))
            for e in instants:
                n = e["name"]
                cls = "gb" if n.startswith("graph break") else ("hit" if n.endswith(" hit") else "miss")
                if n.startswith("exit"):
                    cls = "ex"
                xx = x(e["ts"])
                rows.append(
                    f'<line x1="{xx:.1f}" y1="{y + 4}" x2="{xx:.1f}" y2="{y + ROW - 6}" class="{cls}">'
                    f"<title>{_text(n)}</title></line>"
                )
            y += ROW
        counters: dict[str, list[tuple[float, float]]] = {}
        for e in mine:
            if e["ph"] == "C":
                (value,) = list(e["args"].values())[:1] or [0.0]
                counters.setdefault(e["name"], []).append((e["ts"], float(value)))
        for name, pts in sorted(counters.items()):
            top = max(v for _, v in pts) or 1.0
            if "%" in name:
                top = max(top, 100.0)
            rows.append(_label(y, name, 16))
            path = " ".join(f"{x(t):.1f},{y + COUNTER_ROW - 6 - v / top * (COUNTER_ROW - 12):.1f}" for t, v in pts)
            rows.append(f'<polyline points="{path}" class="k"/>')
            rows.append(f'<text x="{WIDTH - 8}" y="{y + 10}" class="v">max {top:g}</text>')
            y += COUNTER_ROW
        y += 8
    axis = [f'<line x1="{LEFT}" y1="{y}" x2="{WIDTH - 10}" y2="{y}" class="ax"/>']
    for i in range(6):
        ts = end * i / 5
        axis.append(f'<text x="{x(ts):.1f}" y="{y + 14}" class="t">{ts / 1e6:.1f} s</text>')
    style = (
        "<style>text{font:11px monospace;fill:#ddd}.p{font-weight:bold}.l{fill:#999}.t{text-anchor:middle;fill:#999}"
        ".v{text-anchor:end;fill:#999}.s{fill:#4e9a06}.c{fill:#3465a4}.r{fill:#cc0000}.ph{fill:#204a87}"
        ".gb{stroke:#ef2929;stroke-width:1.5}.hit{stroke:#8ae234}.miss{stroke:#fcaf3e}.ex{stroke:#fff;stroke-width:2}"
        ".k{fill:none;stroke:#729fcf;stroke-width:1.2}.ax{stroke:#666}</style>"
    )
    height = y + 24
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">'
        f'{style}<rect width="100%" height="100%" fill="#1e1e1e"/>'
        f'<text x="4" y="14" class="l">ctmon timeline ({len(timed)} events; Perfetto: ctmon export --perfetto)</text>'
        + "".join(rows)
        + "".join(axis)
        + "</svg>\n"
    )


def _label(y: float, text: str, limit: int | None = None) -> str:
    return f'<text x="{LEFT - 6}" y="{y + 20}" class="l" text-anchor="end">{_text(text, limit)}</text>'


def _text(value: object, limit: int | None = None) -> str:
    """A name from the recording as XML character data: whatever it holds
    (control characters, lone surrogates), the SVG stays well-formed. Cleaned
    before it is cut, so an escape sequence is never split into visible text."""
    return escape(clean_markup(str(value))[:limit])
