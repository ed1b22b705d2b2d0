"""The user-facing hooks. They cost one global lookup when ctmon is not running."""

from __future__ import annotations

from collections.abc import Callable

_step_impl: Callable[[int | None], None] | None = None


def step(n: int | None = None) -> None:
    """Mark a step boundary. Takes precedence over automatic detection.

    Call it once per iteration of the loop you care about (training step,
    generated token, served batch), when the step's work is done. ``n``:
    your own number of the step just done, as your log says it; ctmon then
    numbers the steps as you do (else it counts them from 1). Without
    ctmon running it does nothing.
    """
    impl = _step_impl
    if impl is not None:
        impl(n)


def active() -> bool:
    """True when this process runs under ctmon with its hook installed."""
    return _step_impl is not None
