"""The supervisor's sampler thread: the job's processes and GPUs as ``sample`` events."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import msgspec

from ctmon.wire import events as E
from ctmon.wire.event_base import Event


def run_samplers(
    pid: int, interval: float, stop: threading.Event, put: Callable[[Event], None], also: Sequence[int] = ()
) -> None:
    """The sampler thread: the job's processes (``pid``'s tree, and ``also``'s:
    a job joined by several pids) and the GPUs, once each ``interval`` until
    ``stop`` is set, each sample handed to ``put``."""
    try:
        from ctmon.samplers.gpu import GpuSampler
        from ctmon.samplers.process import ProcessSampler

        procs = ProcessSampler(pid, also)
        gpus = GpuSampler()
    except Exception as e:  # psutil missing or broken: no samples, job unaffected
        message = f"system sampling disabled: {type(e).__name__}: {e}"
        put(E.Note(t=time.time(), level="warning", source="sampler", message=message))
        return
    first = True
    try:
        while not stop.wait(0.0 if first else interval):
            fields: dict[str, object] = {"kind": "sample", "t": time.time()}
            try:
                fields.update(procs.sample())
            except Exception:
                pass
            if gpus.available:
                fields["gpus"] = gpus.sample(procs.tree_pids())
            elif first:
                fields["gpu_error"] = gpus.error or "no GPU"
            first = False
            ev = sample_event(fields)
            if ev is not None:
                put(ev)
    finally:
        gpus.close()


def sample_event(fields: dict[str, object]) -> E.Sample | None:
    """The samplers' figures as a sample event, checked like any other event:
    a figure of an unexpected type (a driver's odd reply) costs that sample,
    never the recording's readability."""
    try:
        return msgspec.convert(fields, E.Sample)
    except msgspec.ValidationError:
        fields.pop("gpus", None)  # NVML's figures are the usual suspects
        try:
            return msgspec.convert(fields, E.Sample)
        except msgspec.ValidationError:
            return None
