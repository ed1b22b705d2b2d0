"""Data-parallel training on the CPU (gloo), one process per rank, each rank
compiling its model; run under torchrun (or any launcher that sets RANK and
WORLD_SIZE). Every rank reads its batches through a DataLoader with worker
processes of its own, which are not ranks.

--diverge: rank 1 alone gets a short batch at step 3 (a last batch without
drop_last) and recompiles; the other ranks wait for it in the all-reduce.
--slow-compile S: that recompile takes S seconds more (a backend that waits).
--stall S: rank 1 sleeps S seconds at step 3 outside any compile (a hung
data loader, say); the other ranks wait for it in the all-reduce.
--die: rank 1 is killed (SIGKILL) at step 3, as the kernel's OOM killer would.
"""
import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--diverge", action="store_true")
parser.add_argument("--workers", type=int, default=1)
parser.add_argument("--slow-compile", type=float, default=0.0)
parser.add_argument("--stall", type=float, default=0.0)
parser.add_argument("--step-sleep", type=float, default=0.0)
parser.add_argument("--die", action="store_true")
args = parser.parse_args()
compiles = []


def backend(gm, example_inputs):  # eager, but the second compile of a rank can be slow
    compiles.append(1)
    if len(compiles) > 1 and args.slow_compile:
        time.sleep(args.slow_compile)
    return gm.forward


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
ddp = DDP(torch.compile(model, backend=backend))
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(8 * args.steps, 16)), batch_size=8, num_workers=args.workers)
for step, (x,) in enumerate(loader):
    if args.diverge and rank == 1 and step == 3:
        x = x[:5]  # RANK1-SHORT
    if args.stall and rank == 1 and step == 3:
        time.sleep(args.stall)  # RANK1-STALL
    if args.die and rank == 1 and step == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # RANK1-KILLED
    time.sleep(args.step_sleep)
    ddp(x).sum().backward()
    opt.step()
    opt.zero_grad()
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
