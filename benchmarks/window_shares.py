"""A region's timed share, by how its graphs' timing windows are laid out,
against the graphs timed all the time, in runs without a profiler.

The job: a compiled model whose forward breaks its graph around eager glue
(as in hotness_vs_profiler.py), small enough that the loop is host-bound
and fast, run for ``--seconds`` under ``ctmon record``, once per layout:

* ``always``: the graphs timed the whole run (the reference);
* ``aligned``: the step clock counting from its first second, so the graphs
  are timed in the quarter-seconds it times the steps (about a fourteenth
  of the time, ctmon/agent/graph_calls.py);
* ``aligned-unweighted``: as ``aligned``, each window counting for its own
  length (the code before the windows were weighed: the run's first
  window, timed whole, then counts for as much as a minute of later ones);
* ``quarter``: the clock never counting, so the windows are open a fourth
  of the time.

Prints per layout each frame's ``runtime.share`` and its difference from
``always``, and per hotness event (about every 2 s) the share in that event,
so what moves a run's share (its first window, say) shows.

    python benchmarks/window_shares.py [--seconds 30] [--layouts always,aligned,aligned-unweighted,quarter]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def job(layout: str, seconds: float) -> None:
    import torch

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

    @torch._dynamo.disable
    def glue(h: torch.Tensor) -> torch.Tensor:
        for _ in range(5):
            h = h * 1.0001
        return h

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(64, 64)
            self.b = torch.nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(glue(self.a(x).relu())).relu()

    torch.manual_seed(0)
    net = torch.compile(Net(), backend="aot_eager")
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    x = torch.randn(16, 64)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        net(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def measure(layout: str, seconds: float, tmp: str) -> dict[str, object]:
    rec = os.path.join(tmp, f"{layout}.jsonl")
    job_cmd = [sys.executable, __file__, "--job", layout, "--seconds", str(seconds)]
    subprocess.run([sys.executable, "-m", "ctmon", "record", "-q", "-o", rec, "--", *job_cmd], check=True, timeout=600)
    rep = json.loads(
        subprocess.run(
            [sys.executable, "-m", "ctmon", "report", rec, "--json"], capture_output=True, text=True, check=True
        ).stdout
    )
    per_event = []
    with open(rec) as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("kind") == "hotness" and ev.get("span_ns"):
                span = ev["span_ns"]
                per_event.append([round(g[4] / span, 4) for g in ev.get("graphs") or []])
    return {
        "shares": {fr["name"]: (fr["runtime"] or {}).get("share") for fr in rep["frames"]},
        "steps": rep["steps"]["count"],
        "per_event": per_event,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--layouts", default="always,aligned,aligned-unweighted,quarter")
    a = ap.parse_args()
    if a.job:
        job(a.job, a.seconds)
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = {layout: measure(layout, a.seconds, tmp) for layout in a.layouts.split(",")}
    ref = out.get("always")
    for layout, r in out.items():
        shares = r["shares"]
        assert isinstance(shares, dict)
        parts = []
        for name, share in shares.items():
            base = ref["shares"].get(name) if ref is not None else None  # type: ignore[union-attr]
            rel = f" ({share / base - 1:+.1%})" if share and base and layout != "always" else ""
            parts.append(f"{name[:28]} {share}{rel}")
        print(f"{layout:8s} {r['steps']:>7} steps | " + " | ".join(parts))
        print(f"{'':8s} per event: {r['per_event']}")


if __name__ == "__main__":
    main()
