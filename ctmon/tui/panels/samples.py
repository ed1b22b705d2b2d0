"""Reading the latest resource samples (header, GPU and process panels)."""

from __future__ import annotations

from itertools import islice

from ctmon.store import Session
from ctmon.tui.context import ViewContext
from ctmon.wire.events import GpuSample, Sample


def recent_samples(s: Session, n: int) -> list[Sample]:
    out = list(islice(reversed(s.samples), n))
    out.reverse()
    return out


def latest_gpus(s: Session) -> list[GpuSample] | None:
    for ev in islice(reversed(s.samples), 5):
        if ev.gpus is not None:
            return ev.gpus
    return None


def gpu_error(ctx: ViewContext) -> str | None:
    if ctx.gpu_error:
        return ctx.gpu_error
    for ev in islice(ctx.session.samples, 3):
        if ev.gpu_error:
            ctx.gpu_error = ev.gpu_error
            return ev.gpu_error
    return None
