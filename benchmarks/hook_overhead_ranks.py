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

With ``--in-process``, the job runs once, under ctmon: each rank alternates
rounds with its step hook (the optimizer post-hook the agent put in
torch's global hooks) in place and taken out, many short interleaved rounds,
and reports the median paired difference per rank -- the per-step cost on
the step path, free of the run-to-run noise that whole jobs carry.

Usage:
  python benchmarks/hook_overhead_ranks.py [--device cpu|cuda] [--ranks 2] [--pairs 6] [--steps 1500]
  python benchmarks/hook_overhead_ranks.py --in-process [--device cpu|cuda] [--pairs 40] [--steps 200]
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


IN_PROCESS = r"""
import ctmon._api, statistics
clock = ctmon._api._step_impl.__self__  # the agent's step clock: its optimizer hook is in torch's global hooks
def hook(on):
    if on:
        clock._hooks[clock._hook_id] = clock._hook_fn
    else:
        clock._hooks.pop(clock._hook_id, None)
def rnd(on):
    hook(on)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps * 1000
pairs = int(sys.argv[4])
diffs, offs = [], []
for i in range(pairs):
    order = (True, False) if i % 2 == 0 else (False, True)
    got = {on: rnd(on) for on in order}
    diffs.append(got[True] - got[False])
    offs.append(got[False])
hook(True)
off = statistics.median(offs)
d = sorted(diffs)
# 95 % interval of the median paired difference, free of any distribution:
# the order statistics k and n-k+1 that the binomial(n, 1/2) puts around it.
from math import comb
n, k, tail = len(d), 0, 0.0
while k < n // 2 and tail + comb(n, k) / 2**n <= 0.025:
    tail += comb(n, k) / 2**n
    k += 1
lo, hi = (d[k - 1], d[n - k]) if k else (d[0], d[-1])
print(f"RESULT {rank} " + json.dumps({"step_ms_off": off, "cost_pct_median": statistics.median(d) / off * 100,
      "cost_pct_q25_q75": [d[len(d) // 4] / off * 100, d[3 * len(d) // 4] / off * 100],
      "cost_pct_ci95": [lo / off * 100, hi / off * 100], "hook_present": True}), flush=True)
"""


def in_process(args: argparse.Namespace, tmp: str) -> dict[str, object]:
    script = os.path.join(tmp, "rounds.py")
    loop = LOOP.split("t0 = time.perf_counter()")[0]  # the model and its warm-up, then the rounds
    with open(script, "w") as f:
        f.write(loop + IN_PROCESS)
    cmd = [sys.executable, "-m", "ctmon", "record", "-q", "-o", os.path.join(tmp, "rec.jsonl"), "--", *_torchrun(args)]
    cmd += [script, args.device, str(args.steps), str(args.width), str(args.pairs)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=900)
    per_rank = []
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            _, rank, payload = line.split(" ", 2)
            r = json.loads(payload)
            per_rank.append(
                {
                    "rank": int(rank),
                    "step_ms_off": round(r["step_ms_off"], 4),
                    "cost_pct_median": round(r["cost_pct_median"], 3),
                    "cost_pct_q25_q75": [round(x, 3) for x in r["cost_pct_q25_q75"]],
                    "cost_pct_ci95": [round(x, 3) for x in r["cost_pct_ci95"]],
                }
            )
    if len(per_rank) != args.ranks:
        raise RuntimeError(f"job failed: {out.stderr[-2000:]}")
    return {
        "device": args.device,
        "ranks": args.ranks,
        "rounds": 2 * args.pairs,
        "steps_per_round": args.steps,
        "per_rank": sorted(per_rank, key=lambda r: r["rank"]),
    }


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
    ap.add_argument("--in-process", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctmon-bench-ranks-")
    if args.in_process:
        print(json.dumps(in_process(args, tmp), indent=2))
        return
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
