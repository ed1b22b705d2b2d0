"""One process's part of ``benchmarks/hook_cost.py fine`` (run under ``ctmon
record``): phase 1 switches the step path, or one part of it, in and out
every ``--chunk`` steps, the sender asleep, logging every garbage collection
and CUDA event beside the step times; phase 2 runs stretches of everything
(each wake of the sender and the job thread's occasional work logged) and
of the step path alone. Every step's end, the arms and the logs go to
``--dump`` as JSON, for the driver's statistics.

Here: its phase-1 arms (which parts of ctmon's step path are in), and the
logs of both phases (the sender's wakes, the job thread's occasional work,
the sender's sample and flush, collections and CUDA events, each timed).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import random
import threading
import time
from typing import Any

import torch
from hook_cost_job import Switch, issue_share, sized  # this folder is on the path, as the script's own

from ctmon.agent import graph_calls, steps


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


# ---- phase 1's logs: whether the step path's mean holds a rare cost ----


class _LoggedEvent:
    """A CUDA event whose records are logged (the rest passed through)."""

    __slots__ = ("ev", "log")

    def __init__(self, ev: Any, log: list[int]) -> None:
        self.ev, self.log = ev, log

    def record(self) -> None:
        self.log.append(time.perf_counter_ns())
        self.ev.record()

    def query(self) -> bool:
        return bool(self.ev.query())

    def elapsed_time(self, end: Any) -> float:
        return float(self.ev.elapsed_time(end.ev))


def install_rare_logs(timer: Any) -> tuple[dict[str, list[Any]], Any]:
    """Log what could make a rare large cost in the job's thread: each
    garbage collection (``gc.callbacks``: its start, end and generation) and
    each CUDA event the device timer records (its events wrapped as they are
    made; a query costs what it did). ``timer`` may be None (no device
    timer, no events). Returns the logs and what stops the collections' log."""
    logs: dict[str, list[Any]] = {"gc": [], "events": []}
    started = [0]
    now = time.perf_counter_ns

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = now()
        else:
            logs["gc"].append((started[0], now(), info.get("generation", -1)))

    gc.callbacks.append(on_gc)
    if timer is not None:
        make, events = timer._make, logs["events"]
        timer.reset(timer._src)
        timer._pool.clear()  # events made before: unlogged
        timer._make = lambda: _LoggedEvent(make(), events)
    return logs, lambda: gc.callbacks.remove(on_gc)


# ---- the job ----


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", choices=["host", "gpu"], default="host")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--task", choices=["train", "infer"], default="train")
    ap.add_argument("--mode")
    ap.add_argument("--size", type=int)
    ap.add_argument("--step-ms", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--stretch-s", type=float, default=6.0)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--parts", default="path")
    ap.add_argument("--path-share", type=float, default=0.5)
    ap.add_argument("--dump", required=True)
    args = ap.parse_args()
    # The graphs timed a WINDOW_EVERY-th of the time and the steps counted in
    # stretches, as in a fast loop, whatever the arms leave of the rates
    # that decide it and from the start.
    graph_calls.FAST_CALLS_PER_S = 0
    steps.FAST_STEPS_PER_S, steps.WARM_NS = 0, 0
    torch.set_num_threads(1)
    step, cmodel, size, _ = sized(args.loop, args.device, args.step_ms, args.task, args.mode, args.size)
    switch = Switch(cmodel)
    ch = switch.channel
    clock = time.perf_counter_ns

    # Phase 1: the step path, or one part of it, in and out every chunk,
    # the sender asleep (set() wakes it once to take up its pace; a quiet
    # switch after that).
    switch.set("hooks")
    switch.set("off")
    time.sleep(0.1)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    rare_logs, stop_gc_log = install_rare_logs(switch.timer or switch.clock.timer)
    parts = args.parts.split(",")
    path_arms: list[str] = []
    path_ends: list[int] = []
    rnd = random.Random(1)
    t_end = time.monotonic() + args.seconds * args.path_share
    sync()
    path_ends.append(clock())
    while time.monotonic() < t_end:
        part = rnd.choice(parts)
        for arm in [part, "off"] if rnd.random() < 0.5 else ["off", part]:
            put_arm(switch, arm)
            switch.clock.end_count()  # the sender's part, the sender asleep (a chunk's first steps are left out)
            path_arms.append(arm)
            for _ in range(args.chunk):
                step()
                path_ends.append(clock())
    put_arm(switch, "path")
    sync()
    stop_gc_log()

    # Phase 2: stretches of everything (wakes logged) and of the step path
    # alone (the sender asleep), a few seconds each.
    log: list[tuple[int, int]] = []
    job_log = log_job_moments(switch.clock)
    asleep, ch._wake = ch._wake, TimedWake(None)
    asleep.set()  # the sender leaves its old event's wait and takes up the new one
    stretches: list[dict[str, Any]] = []
    ends: list[int] = []
    sender_parts = timed_parts(switch, ch)
    t_end = time.monotonic() + args.seconds * (1 - args.path_share)
    while time.monotonic() < t_end:
        for arm in ("all", "quiet"):
            switch.set("hooks" if arm == "quiet" else "all")
            ch._wake.log = None if arm == "quiet" else log
            for _ in range(20):  # the sender takes up its pace
                step()
            log.clear()
            job_log.clear()
            lo = len(ends)
            stop = time.monotonic() + args.stretch_s
            while time.monotonic() < stop:
                step()
                ends.append(clock())
            wakes = [(s, e) for s, e in log if ends[lo] < s and e < ends[-1]]
            own = [(s, e, k) for s, e, k in job_log if ends[lo] < s and e < ends[-1]]
            stretches.append({"arm": arm, "lo": lo, "hi": len(ends), "wakes": wakes, "job": own})
    sync()
    switch.set("all")
    out = {
        "loop": args.loop,
        "task": args.task,
        "mode": args.mode,
        "device": args.device,
        "size": size,
        "issue_share": issue_share(step, args.device),
        "hotness": switch.sampler is not None,
        "graphs_timed": len(switch.graphs),
        "job_moments": list(JOB_MOMENTS),
        "path_arms": path_arms,
        "path_ends": path_ends,
        "path_gc": rare_logs["gc"],
        "path_events": rare_logs["events"],
        "ends": ends,
        "stretches": stretches,
        "sender_parts_us": {k: [round(x / 1e3, 1) for x in v] for k, v in sender_parts.items()},
    }
    with open(args.dump, "w") as f:
        json.dump(out, f)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
