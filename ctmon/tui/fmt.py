"""Small text helpers of the panels (pure functions, no Textual): clipping, bars, sparklines.

Numbers with units and places in code are ctmon/words' (units.py, locations.py),
named here too because every pane writes them through ``fmt``."""

from __future__ import annotations

from collections.abc import Sequence

from ctmon.words.locations import called_from_text as called_from_text
from ctmon.words.locations import place as place
from ctmon.words.locations import short_path as short_path
from ctmon.words.locations import where as where
from ctmon.words.phrases import plural  # noqa: F401 - the panes say counts through fmt
from ctmon.words.units import count as count
from ctmon.words.units import elapsed as elapsed
from ctmon.words.units import gib as gib
from ctmon.words.units import ms as ms
from ctmon.words.units import num_ms as num_ms
from ctmon.words.units import offset as offset
from ctmon.words.units import pct as pct
from ctmon.words.units import seconds as seconds
from ctmon.words.units import short_count as short_count
from ctmon.words.units import size as size

BLOCKS = " ▁▂▃▄▅▆▇█"


def clip(text: str, width: int) -> str:
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width == 1:
        return "…"
    return text[: width - 1] + "…"


def clip_left(text: str, width: int) -> str:
    """Keep the end (for paths: the file name and line matter most)."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width == 1:
        return "…"
    return "…" + text[-(width - 1) :]


def first_line(text: str | None) -> str:
    if not text:
        return ""
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def bar_rows(values: Sequence[float | None], height: int, top: float) -> list[str]:
    """Vertical bars, one column per value, ``height`` rows (top row first),
    eighth-block resolution. Values above ``top`` are drawn full height."""
    n = len(values)
    height = max(1, height)
    rows = [[" "] * n for _ in range(height)]
    if top <= 0 or top != top:
        top = 1.0
    levels = height * 8
    for i, v in enumerate(values):
        if v is None or v != v:
            continue
        k = int(round(min(max(v, 0.0), top) / top * levels))
        if v > 0 and k == 0:
            k = 1
        for r in range(height):
            fill = min(8, max(0, k - r * 8))
            rows[height - 1 - r][i] = BLOCKS[fill]
    return ["".join(r) for r in rows]


def sparkline(values: Sequence[float | None], top: float | None = None) -> str:
    vals = [v for v in values if v is not None and v == v]
    if not values:
        return ""
    if top is None:
        top = max(vals) if vals else 1.0
    return bar_rows(values, 1, top or 1.0)[0]
