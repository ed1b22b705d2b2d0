"""Field coercion for events read off the wire: a value of the wrong type is
absent, never an exception (the store folds whatever a recording holds)."""

from __future__ import annotations


def finite(v: object) -> float | None:
    """A finite int/float field as float (bools, NaN and infinities are absent)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if f == f and abs(f) != float("inf") else None


def nonempty(v: object) -> str | None:
    """A non-empty string field."""
    return v if isinstance(v, str) and v else None
