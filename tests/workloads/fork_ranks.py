"""Child processes that compile, started without a fresh interpreter.

--start start_processes  torch.multiprocessing.start_processes(..., start_method="fork")
--start process          multiprocessing Processes of the fork context
--start spawn            multiprocessing Processes of the spawn context (a fresh interpreter)

Each child compiles a warm-up function (before its process group, when it
has one), then, with --group, joins a gloo group of 2 as its rank and trains
a compiled model for 5 optimizer steps; without, it compiles one more
function and ends. --parent-compiles: the script's process compiles once
before it starts the children (they inherit its Dynamo state and, under
TORCH_TRACE, its open trace file). Each child prints the Python threads it
runs before it compiles. MASTER_PORT must be set for --group.
"""

import argparse
import multiprocessing
import os
import sys
import threading

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
STEPS = 5


def child(index: int, group: bool) -> None:
    print(f"child {index} threads before compiling: {threading.active_count()}", flush=True)
    torch.set_num_threads(1)
    torch.compile(lambda t: t * 2 + 1, backend="eager")(torch.ones(3))
    if not group:
        torch.compile(lambda t: t.sin() - 1, backend="eager")(torch.ones(3))
        print(f"child {index} done", flush=True)
        return
    dist.init_process_group("gloo", rank=index, world_size=WORLD)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(STEPS):
        compiled(torch.randn(8, 16)).sum().backward()
        opt.step()
        opt.zero_grad()
    dist.barrier()
    dist.destroy_process_group()
    print(f"child {index} done", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start", choices=["start_processes", "process", "spawn"], required=True)
    parser.add_argument("--group", action="store_true")
    parser.add_argument("--parent-compiles", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if args.parent_compiles:
        torch.compile(lambda t: t - 1, backend="eager")(torch.ones(2))
    if args.start == "start_processes":
        mp.start_processes(child, args=(args.group,), nprocs=WORLD, start_method="fork")
        return
    ctx = multiprocessing.get_context("fork" if args.start == "process" else "spawn")
    procs = [ctx.Process(target=child, args=(i, args.group)) for i in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    sys.exit(max(p.exitcode or 0 for p in procs))


if __name__ == "__main__":
    main()
