"""ctmon's sampled step-time shares per compiled region beside torch.profiler's
on the same run.

The job (``--job``): a compiled model whose forward breaks its graph around
eager glue (a ``torch._dynamo.disable``'d function running small ops), a
short warm-up, then every remaining step under ``torch.profiler`` (CPU
activity). From the profiler it computes, per compiled frame, the time in
its "Torch-Compiled Region" events less the regions nested in them (the
resume function after the break runs inside the forward's region), and the
compiled backward ("CompiledFunctionBackward"), each as a share of the
profiled wall time; it writes them to a JSON file.

The driver runs that job under ``ctmon record`` and prints, per frame,
ctmon's share (its graphs and its eager glue) beside the profiler's, and
ctmon's ``compiled_share`` beside the profiler's compiled total.

    python benchmarks/hotness_vs_profiler.py [--device cuda] [--steps 600] [--hz 20] [--warm-s 0]

``--warm-s S``: the step clock's first seconds timed whole (ctmon's own is
20): at 0 a fast loop is counted, and its graphs timed in the quarter-seconds
its steps are (ctmon/agent/graph_calls.py), from the first second on.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

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


def job(args: argparse.Namespace) -> None:
    import torch

    dev = args.device
    if args.warm_s is not None:
        try:
            from ctmon.agent import steps as ctmon_steps

            ctmon_steps.WARM_NS = int(args.warm_s * 1e9)  # read at the clock's first check, a second in
        except ImportError:
            pass

    @torch._dynamo.disable
    def glue(h: torch.Tensor) -> torch.Tensor:
        for _ in range(args.glue):
            h = h * 1.0001
        return h

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(args.width, args.width)
            self.b = torch.nn.Linear(args.width, args.width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.a(x).relu()
            h = glue(h)
            return self.b(h).relu()

    torch.manual_seed(0)
    net = torch.compile(Net().to(dev), backend="inductor" if dev == "cuda" else "aot_eager")
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
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
        # open (graph_calls.py: all of it where graphs are called slowly, else ~1/4)
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


def _graph_calls() -> Any:
    """ctmon's GraphCalls in this job (None: not under ctmon, hotness off)."""
    try:
        import ctmon

        return getattr(ctmon._api._step_impl.__self__.each_second, "__self__", None)  # type: ignore[union-attr]
    except (ImportError, AttributeError):
        return None


def driver(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rec, prof = os.path.join(tmp, "rec.jsonl"), os.path.join(tmp, "prof.json")
        cmd = [sys.executable, "-m", "ctmon", "record", "-q", "-o", rec, "--", sys.executable, __file__, "--job"]
        cmd += ["--out", prof, "--device", args.device, "--steps", str(args.steps), "--glue", str(args.glue)]
        cmd += ["--width", str(args.width), "--batch", str(args.batch), "--hz", str(args.hz)]
        if args.warm_s is not None:
            cmd += ["--warm-s", str(args.warm_s)]
        subprocess.run(cmd, check=True, timeout=900)
        rep = json.loads(
            subprocess.run(
                [sys.executable, "-m", "ctmon", "report", rec, "--json"], capture_output=True, text=True, check=True
            ).stdout
        )
        theirs = json.load(open(prof))
    rows = []
    for f in rep["frames"]:
        frame_id = str(f["frame_id"])
        rt = f["runtime"] or {}
        mine = (rt.get("share") or 0.0) + (rt.get("glue_share") or 0.0)
        other = theirs["frames"].get(frame_id)
        rows.append(
            {
                "frame": f["name"],
                "frame_id": frame_id,
                "ctmon": round(mine, 4),
                "profiler": other,
                "graphs_timed": rt.get("timed"),
                "calls": rt.get("calls"),
            }
        )
    forward = sum(v for v in theirs["frames"].values())
    out = {
        "device": args.device,
        "steps_profiled": args.steps,
        "warm_s": args.warm_s,
        "samples_per_s": args.hz,
        "samples": (rep["steps"]["runtime"] or {}).get("samples"),
        "frames": rows,
        "ctmon_compiled_share": rep["steps"]["compiled_share"],
        "ctmon_glue_share": (rep["steps"]["runtime"] or {}).get("glue_share"),
        "profiler_regions_share": round(forward, 4),
        "profiler_backward_share": round(theirs["backward_share"], 4),
        "graph_timing_open_share": theirs.get("timing_open_share"),
        "findings": [f["title"] for f in rep["findings"] if f["rule"] == "eager-glue"],
        "samples_by_lateness_ms": {"buckets": ["<0.05", "0.05-0.5", ">=0.5"], **(theirs.get("lateness") or {})},
    }
    print(json.dumps(out, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--glue", type=int, default=60)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hz", type=float, default=20.0, help="samples a second (ctmon's default is 4)")
    ap.add_argument("--warm-s", type=float, default=None, help="the step clock's seconds timed whole (ctmon's is 20)")
    args = ap.parse_args()
    (job if args.job else driver)(args)


if __name__ == "__main__":
    main()
