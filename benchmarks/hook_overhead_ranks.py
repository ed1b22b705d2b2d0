"""What ctmon's hook costs each rank of a job started by torchrun.

Each rank runs the same compiled training loop on its own (no collective in
the timed region, so one rank's noise does not become the other's), times
its steady steps itself, and prints them. The job is run plainly under
``torchrun --nproc_per_node N`` and as ``ctmon record -- torchrun ...``,
alternating, several pairs; the figure per rank is the median over pairs of
(ctmon - plain) / plain, with the per-pair range, so it can be compared with
the one-process figure of ``hook_overhead.py e2e`` (a rank runs the same
agent on the same step path; ranks add only the rank stamped on each event
by the sender thread).

The per-step cost inside one job, free of the run-to-run noise that whole
jobs carry (many short interleaved rounds with everything of ctmon's in the
process switched in and out, per rank): ``benchmarks/hook_cost.py --ranks N``.

Usage:
  python benchmarks/hook_overhead_ranks.py [--device cpu|cuda] [--ranks 2] [--pairs 6] [--steps 1500]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LOOP = r"""
import json, os, sys, time, torch
device, steps, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rank = int(os.environ["RANK"])
torch.set_num_threads(1)
if device == "cuda":  # a GPU per rank where there are enough, else they share
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
torch.manual_seed(rank)
layers = []
for _ in range(4):
    layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
cmodel = torch.compile(model, backend="inductor" if device == "cuda" else "aot_eager")
x = torch.randn(256, width, device=device)
def step():
    cmodel(x).float().pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
for _ in range(20):
    step()
if device == "cuda":
    torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(steps):
    step()
if device == "cuda":
    torch.cuda.synchronize()
print(f"RESULT {rank} " + json.dumps({"step_ms": (time.perf_counter() - t0) / steps * 1000}), flush=True)
"""


def _torchrun(args: argparse.Namespace) -> list[str]:
    """torchrun for ``args.ranks`` ranks on this host, on a free port."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.ranks)]
    return launcher + ["--master_addr", "127.0.0.1", "--master_port", str(_free_port())]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_job(script: str, args: argparse.Namespace, kind: str, tmp: str) -> dict[int, float]:
    cmd = [*_torchrun(args), script, args.device, str(args.steps), str(args.width)]
    if kind == "ctmon":
        cmd = [sys.executable, "-m", "ctmon", "record", "-q", "-o", os.path.join(tmp, "rec.jsonl"), "--", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=900)
    got = {}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            _, rank, payload = line.split(" ", 2)
            got[int(rank)] = float(json.loads(payload)["step_ms"])
    if len(got) != args.ranks:
        raise RuntimeError(f"job failed ({kind}): {out.stderr[-2000:]}")
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--width", type=int, default=128)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctmon-bench-ranks-")
    script = os.path.join(tmp, "loop.py")
    with open(script, "w") as f:
        f.write(LOOP)
    rel: dict[int, list[float]] = {r: [] for r in range(args.ranks)}
    plain: dict[int, list[float]] = {r: [] for r in range(args.ranks)}
    mon: dict[int, list[float]] = {r: [] for r in range(args.ranks)}
    for i in range(args.pairs):
        order = ("plain", "ctmon") if i % 2 == 0 else ("ctmon", "plain")
        got = {kind: run_job(script, args, kind, tmp) for kind in order}
        print(f"pair {i + 1}/{args.pairs}: {got}", file=sys.stderr, flush=True)
        for r in range(args.ranks):
            plain[r].append(got["plain"][r])
            mon[r].append(got["ctmon"][r])
            rel[r].append((got["ctmon"][r] - got["plain"][r]) / got["plain"][r] * 100)
    out = {
        "device": args.device,
        "ranks": args.ranks,
        "steps": args.steps,
        "width": args.width,
        "per_rank": [
            {
                "rank": r,
                "plain_step_ms_median": round(statistics.median(plain[r]), 4),
                "ctmon_step_ms_median": round(statistics.median(mon[r]), 4),
                "overhead_pct_median": round(statistics.median(rel[r]), 3),
                "overhead_pct_range": [round(min(rel[r]), 3), round(max(rel[r]), 3)],
                "overhead_pct_all": [round(x, 3) for x in rel[r]],
            }
            for r in range(args.ranks)
        ],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
