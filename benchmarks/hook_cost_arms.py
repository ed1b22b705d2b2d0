"""The job's instruments for hook_cost_fine.py: its phase-1 arms (which
parts of ctmon's step path are in), and the logs of its phase 2 (the
sender's wakes, the job thread's occasional work, the sender's sample and
flush, each timed)."""

from __future__ import annotations

import functools
import threading
import time
from typing import Any


class TimedWake(threading.Event):
    """The sender's wake event, logging when each wake starts (the sender
    has the GIL back) and ends (it waits again)."""

    def __init__(self, log: list[tuple[int, int]] | None) -> None:
        super().__init__()
        self.log = log
        self._start = 0

    def wait(self, timeout: float | None = None) -> bool:
        now = time.perf_counter_ns()
        if self.log is not None and self._start:
            self.log.append((self._start, now))
        got = super().wait(timeout)
        self._start = time.perf_counter_ns()
        return got


PARTS: dict[str, tuple[bool, bool, bool | str]] = {  # each phase-1 arm's parts (Switch.set_path)
    "path": (True, True, True),  # the graphs as ctmon runs them: counted, timed in windows
    "hook": (True, False, False),
    "timer": (True, True, False),
    "graphs": (False, False, "counted"),  # outside a timing window
    "timed": (False, False, "timed"),  # inside one
    "counting": (True, False, False),  # the hook, its clock held in a counting stretch
    "timing": (True, False, False),  # the hook, its clock never in one
    "floor": (False, False, False),  # and an optimizer post-hook that does nothing
    "c_counting": (False, False, False),  # and a count kept in C (put_arm)
    "off": (False, False, False),
}
FLOOR_KEY = -1  # the do-nothing hook's key in torch's global post-hook dict (its own keys count up from 0)


def _nothing(optimizer: Any, args: Any, kwargs: Any) -> None:
    return None


_SAVED: dict[
    str, Any
] = {}  # steps.COUNT_NS as ctmon has it (restored after a ``counting`` chunk); a C counter's handle


def put_arm(switch: Any, arm: str) -> None:
    """The arm's parts in; for ``floor``, what any Python post-hook costs
    the loop: one that does nothing, in ctmon's hook's place."""
    from ctmon.agent import steps

    switch.set_path(*PARTS[arm])
    clock = switch.clock
    count_ns = _SAVED.setdefault("count_ns", steps.COUNT_NS)
    steps.COUNT_NS = 1 << 62 if arm == "counting" else count_ns
    steps.FAST_STEPS_PER_S = 1 << 62 if arm == "timing" else 0
    if arm == "counting" and clock._counting < 0 and clock.rank >= 0:
        clock._count_since = time.perf_counter_ns()
        clock._counting_opt = clock._opt_ref() if clock.rank == steps.RANK_OPTIMIZER else None
        clock._counting = clock.rank
    elif arm == "timing":
        clock._counting_opt, clock._counting = None, -1  # the next boundary writes the stretch
    hooks = clock._hooks
    if arm == "floor":
        hooks[FLOOR_KEY] = _nothing
    elif arm == "c_counting":
        # What a counting stretch would cost counted in C: the clock's
        # optimizer's own post-hook a size-0 lru_cache (its misses the
        # count, no Python frame), and a C callable taking the hook's three
        # arguments (slice) in the global hook's place.
        hooks[FLOOR_KEY] = slice
        opt = clock._opt_ref()
        if opt is not None and "c_counter" not in _SAVED:
            _SAVED["c_counter"] = opt.register_step_post_hook(functools.lru_cache(maxsize=0)(slice))
    else:
        hooks.pop(FLOOR_KEY, None)
    if arm != "c_counting" and "c_counter" in _SAVED:
        _SAVED.pop("c_counter").remove()


JOB_MOMENTS = ("check", "stretch_end", "cuda_event")


def log_job_moments(clock: Any) -> list[tuple[int, int, str]]:
    """Log (start, end, kind) of the job thread's occasional work on the
    step path: the clock's once-a-second check (its pace, the graphs'
    timing windows, the device probe), the end of a counting stretch, and
    the device timer's boundaries that record or ask after a CUDA event
    (its other boundaries return at once, and are not logged)."""
    from ctmon.agent.device_timer import DeviceTimer
    from ctmon.agent.steps import StepClock

    now = time.perf_counter_ns
    log: list[tuple[int, int, str]] = []

    def logged(cls: Any, name: str, kind: str) -> None:
        orig = getattr(cls, name)

        def wrapper(self: Any, *args: Any) -> Any:
            t0 = now()
            try:
                return orig(self, *args)
            finally:
                log.append((t0, now(), kind))

        setattr(cls, name, wrapper)

    logged(StepClock, "_check", "check")
    logged(StepClock, "_end_count", "stretch_end")
    boundary = DeviceTimer.boundary

    def timer_boundary(self: Any, idx: int, t_ns: int) -> None:
        if self._probe is None and t_ns - self._last_ns < self._gap:
            return None  # its fast path, as the unpatched method takes it
        t0 = now()
        try:
            return boundary(self, idx, t_ns)
        finally:
            log.append((t0, now(), "cuda_event"))

    DeviceTimer.boundary = timer_boundary  # type: ignore[method-assign]
    return log


def timed_parts(switch: Any, ch: Any) -> dict[str, list[int]]:
    """The sender's sample and flush, each timed (ns per call)."""
    out: dict[str, list[int]] = {"sample": [], "flush": []}
    sampler, flush = switch.sampler, ch._flush

    def sample() -> float:
        t0 = time.perf_counter_ns()
        try:
            return sampler()
        finally:
            out["sample"].append(time.perf_counter_ns() - t0)

    def timed_flush() -> None:
        t0 = time.perf_counter_ns()
        try:
            flush()
        finally:
            out["flush"].append(time.perf_counter_ns() - t0)

    if sampler is not None:
        switch.sampler = sample
    ch._flush = timed_flush
    return out
