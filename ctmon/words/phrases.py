"""Words for the user: counts said right ("1 recompile", "2 recompiles"), and
text cut to a length with an ellipsis where it was cut, never silently."""

from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def cut(text: str, n: int) -> str:
    """``text`` in at most ``n`` characters, an ellipsis where it was cut."""
    return text if len(text) <= n else text[: n - 1] + "…"
