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


TRACE_MODE = "torch_trace"  # the session header of a PyTorch trace read as a recording (ctmon/read/torch_trace.py)


def absent_samples(s: Session) -> str:
    """Why a samples pane is empty: not yet, or never (a trace, a run that recorded none)."""
    if s.meta.mode == TRACE_MODE:
        return "a PyTorch trace holds no samples"
    if s.exit is not None:
        return "no samples were recorded"
    return "waiting for the first sample"
