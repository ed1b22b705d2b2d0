"""The user-facing hooks. They cost one global lookup when ctmon is not running."""

from __future__ import annotations

from collections.abc import Callable

_step_impl: Callable[[], None] | None = None


def step() -> None:
    """Mark a step boundary. Takes precedence over automatic detection.

    Call it once per iteration of the loop you care about (training step,
    generated token, served batch). Without ctmon running it does nothing.
    """
    impl = _step_impl
    if impl is not None:
        impl()


def active() -> bool:
    """True when this process runs under ctmon with its hook installed."""
    return _step_impl is not None
