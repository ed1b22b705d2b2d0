"""Ranks that learn who they are only at init_process_group: no RANK in
their environment, as with ``torch.multiprocessing.spawn`` and with
Lightning's launcher, which re-executes the script for ranks 1.. and is rank
0 itself. Each rank compiles a warm-up function *before* it initialises its
process group (so its rank is not yet known when that compile happens), then
trains a compiled model under DDP over gloo, reading batches through a
DataLoader whose worker is a spawned process (a fresh interpreter, like a
rank at start-up, but never one).

--launch spawn   the script's process calls mp.spawn and is no rank itself
--launch reexec  the script's process re-runs the script for rank 1 (LOCAL_RANK=1
                 in its environment) and trains as rank 0
MASTER_PORT must be set.
"""
import argparse
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

WORLD = 2


def train(rank: int, steps: int) -> None:
    torch.set_num_threads(1)
    warm = torch.compile(lambda t: t * 2 + 1, backend="eager")
    warm(torch.ones(3))  # BEFORE-INIT
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    ddp = DDP(torch.compile(model, backend="eager"))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(8 * steps, 16))
    loader = DataLoader(data, batch_size=8, num_workers=1, multiprocessing_context="spawn")
    for (x,) in loader:
        ddp(x).sum().backward()
        opt.step()
        opt.zero_grad()
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launch", choices=["spawn", "reexec"], required=True)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if args.launch == "spawn":
        mp.spawn(train, args=(args.steps,), nprocs=WORLD)
        return
    local = int(os.environ.get("LOCAL_RANK", "0"))
    children = []
    if local == 0:
        env = dict(os.environ, LOCAL_RANK="1", WORLD_SIZE=str(WORLD))
        children.append(subprocess.Popen([sys.executable, *sys.argv], env=env))
    train(local, args.steps)
    for child in children:
        if child.wait() != 0:
            sys.exit(child.returncode)


if __name__ == "__main__":
    main()
