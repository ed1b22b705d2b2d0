"""Small text formatters shared by the panels (pure functions, no Textual)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctmon.locations import called_from_text as called_from_text
from ctmon.locations import place as place
from ctmon.locations import short_path as short_path
from ctmon.locations import where as where
from ctmon.words import plural  # noqa: F401 - the panes say counts through fmt

BLOCKS = " ▁▂▃▄▅▆▇█"


def num_ms(v: float | None) -> str:
    """A step time in ms without its unit: 0.54, 12.3, 812, 23104."""
    if v is None or v != v:
        return "-"
    if v < 10:
        return f"{v:.2f}"
    if v < 100:
        return f"{v:.1f}"
    return f"{v:.0f}"


def ms(v: float | None) -> str:
    return "-" if v is None or v != v else f"{num_ms(v)} ms"


def secs(v: float | None) -> str:
    if v is None or v != v:
        return "-"
    if v >= 120:
        return f"{v / 60:.1f} min"
    if v >= 10:
        return f"{v:.1f} s"
    return f"{v:.2f} s"


def elapsed(v: float | None) -> str:
    """Wall-clock style: 00:12:34, or 1d 02:03:04 for long runs."""
    if v is None or v != v or v < 0:
        return "--:--:--"
    total = int(v)
    days, rest = divmod(total, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    text = f"{h:02d}:{m:02d}:{s:02d}"
    return f"{days}d {text}" if days else text


def offset(v: float | None) -> str:
    """Seconds since the job started, for the event log: +12.3s, +1h02m."""
    if v is None or v != v:
        return "?"
    if v < 0:
        v = 0.0
    if v < 100:
        return f"+{v:.1f}s"
    if v < 3600:
        return f"+{int(v // 60)}m{int(v % 60):02d}s"
    return f"+{int(v // 3600)}h{int(v % 3600 // 60):02d}m"


def size(n: float | int | None) -> str:
    """Bytes in binary units: 812 KiB, 13.1 MiB, 32.1 GiB."""
    if n is None or not isinstance(n, (int, float)) or n != n:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(n)} B"
            return f"{n:.1f} {unit}" if abs(n) < 100 else f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.0f} TiB"  # pragma: no cover


def gib(n: float | int | None, digits: int = 1) -> str:
    if n is None or not isinstance(n, (int, float)):
        return "-"
    return f"{n / (1 << 30):.{digits}f}"


def pct(v: Any) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v:
        return "N/A"
    return f"{v:.0f}%"


def count(n: int) -> str:
    return f"{n:,}"


def short_count(n: int) -> str:
    """At most 5 cells: 999, 12.3k, 123k, 1.2M, 12M."""
    for div, unit in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if n >= div:
            v = n / div
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return str(n)


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
