"""Two ranks sharing one GPU (gloo), each compiling its model with Inductor:
the per-rank view on a CUDA machine. Run under torchrun:

    ctmon record -- torchrun --nproc_per_node 2 benchmarks/jobs/ddp_gloo_one_gpu.py [--diverge]

--diverge: rank 1 alone gets a short batch at step 10 and recompiles.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--diverge", action="store_true")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1)
).cuda()
ddp = DDP(torch.compile(model))
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
for step in range(args.steps):
    n = 48 if (args.diverge and rank == 1 and step == 10) else 64
    x = torch.randn(n, 1024, device="cuda")
    ddp(x).sum().backward()  # CALL
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
