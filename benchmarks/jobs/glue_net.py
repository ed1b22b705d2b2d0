"""A compiled model whose forward breaks its graph around eager glue (a
``torch._dynamo.disable``'d function running small ops), for
``benchmarks/region_shares.py``; run under ``ctmon record``.

  profile   a short warm-up, then ``--steps`` steps under ``torch.profiler``
            (CPU activity). Per compiled frame, the time in its
            "Torch-Compiled Region" events less the regions nested in them
            (the resume function after the break runs inside the forward's
            region), and the compiled backward ("CompiledFunctionBackward"),
            each as a share of the profiled wall time, go to ``--out`` as
            JSON, with how much of that time ctmon's graph timing windows were
            open and, per hotness sample, how late it was taken.
  windows   the loop (width 64, batch 16, glue of 5 ops, ``aot_eager``: host-
            bound and fast) for ``--seconds``, with the graphs' timing windows
            laid out as LAYOUT says: ``always`` (timed the whole run),
            ``aligned`` (the step clock counting from its first second, the
            graphs timed in the quarter-seconds it times the steps),
            ``aligned-unweighted`` (the same, each window counting for its own
            length: the code before the windows were weighed) or ``quarter``
            (the clock never counting: windows open a fourth of the time).

    python benchmarks/jobs/glue_net.py profile --out FILE [--device cuda] [--steps 600] [--glue 60]
        [--width 1024] [--batch 256] [--hz 20] [--warm-s S]
    python benchmarks/jobs/glue_net.py windows LAYOUT [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

import torch

LATE_MS = (0.05, 0.5)  # a sample's lateness buckets: prompt, late, very late
LATENESS_ON: list[bool] = []  # non-empty while the profiled steps run


def watch_lateness() -> dict[str, list[int]] | None:
    """Under ctmon: per sample, how long after its scheduled wake the sender
    thread got the GIL to take it, by where the sample was filed. A late
    sample shows where the job's thread next let the GIL go, not where it was
    when the sample was due (the sampler's known bias)."""
    try:
        import ctmon._api

        ch = ctmon._api._step_impl.__self__.ch  # type: ignore[union-attr]
        tick = ch.tick
        sampler = tick.__self__
    except Exception:
        return None
    table: dict[str, list[int]] = {}
    innermost: dict[str, int] = {}
    table["innermost"] = innermost  # type: ignore[assignment]
    due = [time.monotonic()]
    on = LATENESS_ON
    sample = sampler.sample

    def timed_sample(*args: object) -> None:
        late_ms = (time.monotonic() - due[0]) * 1000
        sample(*args)
        if not on:
            return
        where, key = sampler._pending[-1][:2] if sampler._pending else ("none", None)
        row = table.setdefault(f"{where} {key[2] if key else '-'}", [0, 0, 0])
        row[sum(late_ms >= b for b in LATE_MS)] += 1
        # Where the job's thread stood (this thread still holds the GIL, so
        # it has not moved since the sample): its innermost frame, per class.
        frames = sys._current_frames()
        frames.pop(threading.get_ident(), None)
        f = frames.get(threading.main_thread().ident)
        del frames
        if f is not None:
            at = f"{where} @ {os.path.basename(f.f_code.co_filename)}:{f.f_code.co_name}"
            innermost[at] = innermost.get(at, 0) + 1

    def timed_tick() -> float:
        d = float(tick())
        due[0] = time.monotonic() + d
        return d

    sampler.sample = timed_sample
    ch.tick = timed_tick
    return table


def build(width: int, glue_ops: int, device: str, backend: str) -> tuple[Any, Any]:
    """The compiled net and its optimizer: Linear, ReLU, the glue, Linear, ReLU."""

    @torch._dynamo.disable
    def glue(h: torch.Tensor) -> torch.Tensor:
        for _ in range(glue_ops):
            h = h * 1.0001
        return h

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(width, width)
            self.b = torch.nn.Linear(width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.a(x).relu()
            h = glue(h)
            return self.b(h).relu()

    torch.manual_seed(0)
    net = torch.compile(Net().to(device), backend=backend)
    return net, torch.optim.SGD(net.parameters(), lr=1e-4)


def _graph_calls() -> Any:
    """ctmon's GraphCalls in this job (None: not under ctmon, hotness off)."""
    try:
        import ctmon

        return getattr(ctmon._api._step_impl.__self__.each_second, "__self__", None)  # type: ignore[union-attr]
    except (ImportError, AttributeError):
        return None


def profile(args: argparse.Namespace) -> None:
    dev = args.device
    if args.warm_s is not None:
        try:
            from ctmon.agent import steps as ctmon_steps

            ctmon_steps.WARM_NS = int(args.warm_s * 1e9)  # read at the clock's first check, a second in
        except ImportError:
            pass
    net, opt = build(args.width, args.glue, dev, "inductor" if dev == "cuda" else "aot_eager")
    x = torch.randn(args.batch, args.width, device=dev)

    def step() -> None:
        net(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(20):
        step()
    if dev == "cuda":
        torch.cuda.synchronize()
    lateness = watch_lateness()
    try:  # the rate for this comparison: a method's bias shows only above its noise
        from ctmon.agent import hotness

        hotness.INTERVAL_S = 1.0 / args.hz
    except ImportError:
        pass
    graphs = _graph_calls()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        open0 = graphs.timed_span(time.perf_counter_ns()) if graphs is not None else 0
        t0 = time.perf_counter()
        LATENESS_ON.append(True)
        for _ in range(args.steps):
            step()
        if dev == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        # how much of the profiled time ctmon's graph timing windows were
        # open (graph_calls.py: all of it where graphs are called slowly, else a part)
        open_s = (graphs.timed_span(time.perf_counter_ns()) - open0) / 1e9 if graphs is not None else None
        LATENESS_ON.clear()
    regions = []
    backward = 0.0
    for e in prof.events():
        if e.name.startswith("Torch-Compiled Region: "):
            regions.append((e.name.split(": ", 1)[1], e.time_range.start, e.time_range.end, e.thread))
        elif e.name == "CompiledFunctionBackward":
            backward += (e.time_range.end - e.time_range.start) / 1e6
    per_frame: dict[str, float] = {}
    for cid, a, b, th in regions:
        inner = sum(d - c for cid2, c, d, th2 in regions if th2 == th and a < c and d <= b and (c, d) != (a, b))
        frame = cid.split("/")[0]
        per_frame[frame] = per_frame.get(frame, 0.0) + (b - a - inner) / 1e6
    with open(args.out, "w") as f:
        json.dump(
            {
                "wall_s": wall,
                "timing_open_share": None if open_s is None else round(open_s / wall, 3),
                "frames": {k: v / wall for k, v in per_frame.items()},
                "backward_share": backward / wall,
                "lateness": lateness,
            },
            f,
        )


def windows(layout: str, seconds: float) -> None:
    from ctmon.agent import graph_calls, steps

    if layout.startswith("aligned"):
        steps.WARM_NS = 0
    if layout == "aligned-unweighted":
        graph_calls.GraphCalls.weight = property(lambda self: 1.0, lambda self, v: None)  # type: ignore[assignment]
    elif layout == "always":
        graph_calls.FAST_CALLS_PER_S = 1 << 60
    elif layout == "quarter":
        steps.WARM_NS = 1 << 62
    torch.set_num_threads(1)
    net, opt = build(64, 5, "cpu", "aot_eager")
    x = torch.randn(16, 64)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        net(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("profile")
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--glue", type=int, default=60)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hz", type=float, default=20.0)
    p.add_argument("--warm-s", type=float, default=None)
    w = sub.add_parser("windows")
    w.add_argument("layout", choices=["always", "aligned", "aligned-unweighted", "quarter"])
    w.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    if args.what == "profile":
        profile(args)
    else:
        windows(args.layout, args.seconds)


if __name__ == "__main__":
    main()
