"""Reading the latest resource samples (header, GPU and process panels)."""

from __future__ import annotations

from itertools import islice
from typing import Any

from ctmon.store import Session
from ctmon.tui.context import ViewContext


def recent_samples(s: Session, n: int) -> list[dict[str, Any]]:
    out = list(islice(reversed(s.samples), n))
    out.reverse()
    return out


def latest_gpus(s: Session) -> list[dict[str, Any]] | None:
    for ev in islice(reversed(s.samples), 5):
        g = ev.get("gpus")
        if isinstance(g, list):
            return [x for x in g if isinstance(x, dict)]
    return None


def gpu_error(ctx: ViewContext) -> str | None:
    if ctx.gpu_error:
        return ctx.gpu_error
    for ev in islice(ctx.session.samples, 3):
        err = ev.get("gpu_error")
        if isinstance(err, str) and err:
            ctx.gpu_error = err
            return err
    return None
