"""One process's part of ``benchmarks/hook_cost.py rounds`` (run under ``ctmon record``),
and the loops and switches ``hook_cost.py fine`` (jobs/hook_cost_fine_job.py) builds on.

A compiled training loop, sized to about ``--step-ms`` a step, times many
short rounds in interleaved arms (``--arms``), in a fresh random order per
block:

  off      nothing of ctmon runs in this process: the optimizer post-hook
           and the compiled call's enter hook are out, the device timer is
           detached, the sender thread sleeps, the hotness sampler is stopped;
  graphs   ``off`` with only the compiled graphs' counters (and timing
           wrappers, where a window is open) in (ctmon/agent/graph_calls.py);
  hooks    both hooks in, the graphs' counters and timing windows in and
           CUDA-event device timing, the sender asleep;
  steps    ``hooks`` with the sender thread waking at its own pace
           (4 Hz: as with CTMON_HOTNESS=0);
  all      ``steps`` plus the hotness sampler (stack samples taken by the
           sender thread on its wakes): what a job under ``ctmon record``
           pays;
  wake     ``steps`` with the sender waking at the sampler's pace, doing
           nothing more (what the wakes alone cost);
  walk     ``wake`` plus a walk of the main thread's frames per wake, not
           filed (what a sample costs beyond its wake).

A round is ``round-ms`` of steps, synchronised with the device at its ends
only (as a real loop runs). Between rounds the arm is switched and a few
untimed steps run, for a random part of the sender's cycle (switching wakes
it), so a timed round holds its arm's share of wakes. Prints one ``RESULT``
line of JSON with every round's ms per step (wall and this thread's CPU),
per arm, and the sender thread's CPU, for the driver's statistics.

Loops: ``host`` is a narrow MLP on tiny tensors, its depth sized to the
step time (on CUDA the GPU waits for the host's launches: the hook's host
time lands on the step time);
``gpu`` is a few wide bf16 layers on a large batch (the host runs ahead of
the GPU: host time is hidden unless it exceeds the slack).
Tasks: ``train`` (forward, backward, AdamW: the optimizer is the step clock)
or ``infer`` (the compiled forward alone under ``no_grad``: each top-level
compiled call is a step, the path a serving loop takes). ``--mode`` is the
``torch.compile`` mode (``reduce-overhead`` takes the launch cost off the
host, which a GPU-bound training step on a slow host needs).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import threading
import time
from typing import Any

import torch

import ctmon._api
from ctmon.agent import channel as channel_mod
from ctmon.agent.torch_hooks import dynamo_enter_hooks


def build(kind: str, device: str, size: int, task: str = "train", mode: str | None = None) -> tuple[Any, Any]:
    """A compiled step and its compiled model: ``size`` is the depth (host
    loop) or the batch (gpu loop)."""
    torch.manual_seed(0)
    width, depth, batch = (64, size, 16) if kind == "host" else (2048, 4, size)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).to(device)
    fused = {"fused": True} if device == "cuda" and kind == "gpu" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, **fused)
    cmodel = torch.compile(model, backend="inductor" if device == "cuda" else "aot_eager", mode=mode)
    x = torch.randn(batch, width, device=device)
    bf16 = device == "cuda" and kind == "gpu"

    def train() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = cmodel(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def infer() -> None:
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            cmodel(x)

    return (train if task == "train" else infer), cmodel


def timed(step: Any, n: int, device: str) -> float:
    """ms per step over n steps, synchronised at the ends only."""
    return timed_both(step, n, device)[0]


def timed_both(step: Any, n: int, device: str) -> tuple[float, float]:
    """ms per step of wall time, and of this thread's CPU time until the last
    step was issued (not the final synchronize, which spins while the GPU
    finishes). CPU time leaves out what a busy virtual machine adds to wall
    time (the thread preempted, the host's other tenants); it also leaves
    out time spent waiting for the GIL, which wall time has."""
    if device == "cuda":
        torch.cuda.synchronize()
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(n):
        step()
    c1 = time.thread_time()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1000, (c1 - c0) / n * 1000


def thread_cpu_s(thread: Any) -> float:
    """A thread's CPU seconds so far (0 where there is none)."""
    if thread is None or thread.ident is None:
        return 0.0
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except OSError:
        return 0.0


def sized(
    kind: str, device: str, step_ms: float, task: str, mode: str | None, size: int | None
) -> tuple[Any, Any, int, float]:
    """Build the loop, then once more scaled toward step_ms if it is far off
    (the depth for the host loop, the batch for the gpu loop), unless
    ``size`` fixes it."""
    fixed = size is not None
    size = size or (16 if kind == "host" else 8192)
    for _ in range(3):
        step = cmodel = None
        gc.collect()  # the loop before is gone: its optimizer hands ctmon's step clock to the next
        step, cmodel = build(kind, device, size, task, mode)
        for _ in range(10):
            step()
        t = timed(step, 50, device)
        if fixed or 0.75 * step_ms <= t <= 1.33 * step_ms:
            break
        size = max(1, round(size * step_ms / t)) if kind == "host" else max(64, round(size * step_ms / t / 64) * 64)
    return step, cmodel, size, t


def issue_share(step: Any, device: str) -> float | None:
    """Host time to issue 5 steps over their time to finish: ~1 when the
    host sets the pace (host-bound), well below 1 when the GPU does."""
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        step()
    issued = time.perf_counter() - t0
    torch.cuda.synchronize()
    return issued / (time.perf_counter() - t0)


def graph_calls(clock: Any) -> Any:
    """ctmon's counted and timed compiled graphs (ctmon/agent/graph_calls.py:
    GraphCalls, whose windows the step clock moves), or None (hotness off)."""
    each_second = clock.each_second
    return getattr(each_second, "__self__", None)


class Switch:
    """Puts everything ctmon runs in this process in or out."""

    def __init__(self, cmodel: Any) -> None:
        self.clock = ctmon._api._step_impl.__self__  # type: ignore[union-attr]
        self.channel = self.clock.ch
        self.sampler = self.channel.tick  # the hotness sampler, run by the sender thread
        hooks = dynamo_enter_hooks(cmodel)
        ours = [h for h in hooks or [] if "call_hook" in getattr(h, "__qualname__", "")]
        if self.clock._hook_fn is None or self.clock.rank < 0:
            raise SystemExit("hook_cost_job: ctmon's hooks are not in this process (run it under ctmon record)")
        # Where the optimizer is the clock the compiled module's enter hook
        # has retired (steps.StepClock.call_hook): nothing of it to switch.
        self.enter_hooks, self.enter = hooks or [], ours[0] if ours else None
        self.timer = self.clock.timer
        if self.timer is not None:  # else an arm without the timer would find CUDA and start one
            self.clock.probe_device = lambda: None
        self.flush_s = channel_mod.FLUSH_INTERVAL_S  # the sender's own pace
        # ctmon's counters and timing wrappers in the compiled graphs' places
        # (ctmon/agent/graph_calls.py), in the compiled frames' module globals:
        # on the job's thread, so in every arm but off
        self.each_second = self.clock.each_second
        self.calls = graph_calls(self.clock)
        self.graphs = list(self.calls.graphs) if self.calls is not None else []

    def pace(self, arm: str) -> float:
        """Seconds between the sender's wakes in this arm (0: it sleeps)."""
        from ctmon.agent import hotness

        return {"steps": self.flush_s, "off": 0.0, "graphs": 0.0, "hooks": 0.0}.get(arm, hotness.INTERVAL_S)

    def set(self, arm: str) -> None:
        on = arm not in ("off", "graphs")
        self.set_path(hook=on, timer=on, graphs=arm != "off")
        if arm in ("steps", "all", "wake", "walk"):
            channel_mod.FLUSH_INTERVAL_S = self.flush_s
        else:
            channel_mod.FLUSH_INTERVAL_S = 1e6  # the sender parks
        self.channel.tick = {"all": self.sampler, "wake": _wake, "walk": _walk}.get(arm)
        self.channel._wake.set()  # the sender takes up its new pace (or parks) now

    def set_path(self, hook: bool, timer: bool, graphs: bool | str) -> None:
        """The step path's parts in or out, the sender left as it is: the
        step hooks, the device timer, the graphs' counters and timing
        wrappers. ``graphs``: True, as ctmon runs them (the counters, and the
        timing wrappers in its windows, which the step clock opens and
        closes); ``"counted"`` or ``"timed"``, one of them for good; False, none."""
        clock = self.clock
        live = graphs is True
        clock.each_second = self.each_second if live else None  # windows move only when live
        timing = self.calls is not None and self.calls.timing
        for g in self.graphs:
            if graphs is False:
                g.scope[g.name] = g.counted.__wrapped__
            elif graphs == "timed" or (live and timing):
                g.scope[g.name] = g.timed
            else:
                g.scope[g.name] = g.counted
        if hook:
            clock._hooks[clock._hook_id] = clock._hook_fn
            if self.enter is not None and self.enter not in self.enter_hooks:
                self.enter_hooks.append(self.enter)
        else:
            clock._hooks.pop(clock._hook_id, None)
            if self.enter is not None and self.enter in self.enter_hooks:
                self.enter_hooks.remove(self.enter)
        if timer and clock.timer is None and self.timer is not None:
            self.timer.reset(self.timer._src)  # no device time spans a round without it
            clock.timer = self.timer
        elif not timer:
            self.timer = clock.timer or self.timer
            clock.timer = None


def _wake() -> float:
    from ctmon.agent import hotness

    return hotness.INTERVAL_S


def _walk() -> float:
    frames = sys._current_frames()
    frames.pop(threading.get_ident(), None)  # no cycle through this frame
    f = frames.get(threading.main_thread().ident)
    del frames
    while f is not None:
        f = f.f_back
    return _wake()


def pin_main_thread() -> int | None:
    """The job's thread alone on the last core: its other threads and its
    parent (the supervisor) on the rest, so the scheduler never parks one
    of them on the job's core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 4:
        return None
    mine, rest = cores[-1], set(cores[:-1])

    for t in threading.enumerate():
        if t is not threading.main_thread() and t.native_id is not None:
            try:
                os.sched_setaffinity(t.native_id, rest)
            except OSError:
                pass
    for tid in os.listdir(f"/proc/{os.getppid()}/task"):
        try:
            os.sched_setaffinity(int(tid), rest)
        except OSError:
            pass
    os.sched_setaffinity(0, {mine})
    return mine


class Plain:
    """No ctmon in this process: the arms differ in name only."""

    sampler = timer = None
    channel = type("NoChannel", (), {"_thread": None})()

    def set(self, arm: str) -> None:
        pass

    def pace(self, arm: str) -> float:
        return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loop", choices=["host", "gpu"], default="host")
    ap.add_argument("--task", choices=["train", "infer"], default="train")
    ap.add_argument("--mode", default=None, help="torch.compile's mode (default: its default)")
    ap.add_argument("--size", type=int, default=None, help="the depth (host) or batch (gpu), not sized")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--step-ms", type=float, default=1.0)
    ap.add_argument("--round-ms", type=float, default=150.0)
    ap.add_argument("--blocks", type=int, default=200)
    ap.add_argument("--arms", default="off,hooks,steps,all")
    ap.add_argument("--pin", action="store_true", help="the job's thread alone on the last core")
    ap.add_argument("--plain", action="store_true", help="no ctmon: every round is 'off' (the noise alone)")
    args = ap.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    torch.set_num_threads(1)
    if args.device == "cuda" and "LOCAL_RANK" in os.environ:  # a GPU per rank where there are enough
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    step, cmodel, size, t = sized(args.loop, args.device, args.step_ms, args.task, args.mode, args.size)
    n = max(10, round(args.round_ms / t))
    pinned = pin_main_thread() if args.pin else None
    switch = Plain() if args.plain else Switch(cmodel)
    arms = ["off", "off2"] if args.plain else args.arms.split(",")
    rnd = random.Random(rank)
    for arm in arms:  # warm every arm once
        switch.set(arm)
        timed(step, n, args.device)
    rounds: dict[str, list[float]] = {a: [] for a in arms}
    cpu: dict[str, list[float]] = {a: [] for a in arms}
    sender: dict[str, list[float]] = {a: [] for a in arms}  # the sender thread's CPU, µs per step
    t_start = time.monotonic()
    orders: list[list[str]] = []
    for _ in range(args.blocks):
        order = list(arms)
        rnd.shuffle(order)
        orders.append(order)
        for arm in order:
            switch.set(arm)
            # Untimed: the arm's threads take up their pace, and the round
            # starts at a random point of the sender's (switching woke it):
            # a round then holds the arm's share of its wakes, not none.
            lead = time.perf_counter() + rnd.uniform(0, switch.pace(arm))
            for _ in range(5):
                step()
            while time.perf_counter() < lead:
                step()
            s0 = thread_cpu_s(switch.channel._thread)
            wall, own = timed_both(step, n, args.device)
            rounds[arm].append(wall)
            cpu[arm].append(own)
            sender[arm].append((thread_cpu_s(switch.channel._thread) - s0) / n * 1e6)
    switch.set("all")
    out = {
        "rank": rank,
        "loop": args.loop,
        "task": args.task,
        "mode": args.mode,
        "device": args.device,
        "size": size,
        "steps_per_round": n,
        "issue_share": issue_share(step, args.device),
        "hotness": switch.sampler is not None,
        "graphs_timed": len(getattr(switch, "graphs", ())),
        "device_timer": switch.timer is not None,
        "pinned_core": pinned,
        "seconds": round(time.monotonic() - t_start, 1),
        "rounds": rounds,
        "cpu_rounds": cpu,
        "sender_cpu_us_per_step": {a: statistics.fmean(v) for a, v in sender.items()},
        "order": orders,
    }
    print("RESULT " + json.dumps(out), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
