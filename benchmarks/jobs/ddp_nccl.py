"""A compiled DDP training over NCCL, one GPU per rank: the per-rank view on a
machine with several GPUs. Run under torchrun:

    ctmon record -- torchrun --nproc_per_node 2 benchmarks/jobs/ddp_nccl.py [--diverge-at 10] [--timeout 20]

Each step logs its loss with ``.item()``, as training loops do, so a rank
whose peer is late blocks in that step (its stream waits on the all-reduce).

``--diverge-at K``: rank 1 alone gets a shorter batch at step K and
recompiles; rank 0 meanwhile waits in the all-reduce of its backward.
``--slow-recompile``: rank 1 turns on Inductor's GEMM autotuning just before
that step, so its recompile benchmarks matrix-product kernels for a while
(a real compile that outlasts a short collective timeout; the first compiles
stay quick). ``--timeout S`` is NCCL's collective
timeout from step 5 on (the first compiles, which ranks finish seconds apart,
run under the default): when the recompile outlasts it, the watchdog aborts
the job.
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--diverge-at", type=int, default=-1)
parser.add_argument("--timeout", type=float, default=600.0)
parser.add_argument("--mode", default="default")
parser.add_argument("--slow-recompile", action="store_true")
parser.add_argument("--width", type=int, default=4096)
args = parser.parse_args()

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
rank = dist.get_rank()
torch.manual_seed(0)
w = args.width
model = torch.nn.Sequential(
    torch.nn.Linear(1024, w), torch.nn.GELU(), torch.nn.Linear(w, w), torch.nn.GELU(), torch.nn.Linear(w, 1)
).cuda()
ddp = DDP(torch.compile(model, mode=None if args.mode == "default" else args.mode), device_ids=[local])
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
t0 = time.time()
for step in range(args.steps):
    if step == 5:
        dist.barrier()
        dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=args.timeout))
    n = 48 if (rank == 1 and step == args.diverge_at) else 64
    if n != 64 and args.slow_recompile:
        import torch._inductor.config as inductor_config

        inductor_config.max_autotune_gemm = True
    x = torch.randn(n, 1024, device="cuda")
    loss = ddp(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step % 10 == 0 or step == args.diverge_at:
        print(f"rank {rank} step {step} loss {loss.item():.4f} at {time.time() - t0:.1f} s", flush=True)
    else:
        loss.item()
torch.cuda.synchronize()
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
