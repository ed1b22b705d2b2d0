"""Numbers with their units, written the one way the screen and the reports share.

Two spellings of a time in milliseconds, on purpose:

* ``ms``: always in ms (0.54 ms, 12.3 ms, 23104 ms). The screen's step times
  stand in columns and sparklines beside each other: a unit that changed
  from row to row would hide a slow step among fast ones.
* ``ms_or_s``: a single duration in a sentence switches to seconds from 1 s
  (1.23 s), as the reports write it.

``ms_sig`` (three significant digits) is for two figures compared side by
side (bench, diff). Everything else has one spelling.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "count",
    "elapsed",
    "gib",
    "gib_or_mib",
    "ms",
    "ms_or_s",
    "ms_sig",
    "num_ms",
    "offset",
    "pct",
    "seconds",
    "short_count",
    "size",
]


def _missing(v: float | None) -> bool:
    return v is None or v != v  # None or NaN


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
    """A step time, always in ms: ``12.3 ms``, ``23104 ms``."""
    return "-" if _missing(v) else f"{num_ms(v)} ms"


def ms_or_s(v: float | None) -> str:
    """A duration in a sentence: ``812 ms``, ``1.23 s``."""
    if v is None or v != v:
        return "-"
    if v >= 1000:
        return f"{v / 1000:.2f} s"
    if v >= 100:
        return f"{v:.0f} ms"
    if v >= 10:
        return f"{v:.1f} ms"
    return f"{v:.2f} ms"


def ms_sig(v: float | None) -> str:
    """Three significant digits, for figures compared side by side: ``31.4 ms``."""
    return "?" if v is None else f"{v:.3g} ms"


def seconds(v: float | None) -> str:
    """``0.42 s``, ``12.3 s``, ``4.5 min``."""
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


def gib_or_mib(n: float) -> str:
    """A memory peak in a report: ``812 MiB``, ``31.75 GiB``."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"
