"""A model under DistributedDataParallel, compiled; one gloo rank on the CPU.

No flag: ``torch.compile(DDP(nn.Sequential(...)))``. DDP's forward is
excluded from Dynamo, and Sequential's forward is PyTorch's own code, so
nothing of the model is compiled.

--inner        the fix: ``DDP(torch.compile(model))`` (with --accelerate: the
               model compiled before ``accelerator.prepare()``, accelerate's
               own compile left off)
--user-module  the other fix: a module of the user's own under
               ``torch.compile(DDP(...))``
--method       ``DDP(model).compile()``: the same, compiled in place
--accelerate   accelerate makes the DDP wrapper and the compile (its dynamo
               backend), as ``accelerate launch`` on a CPU rank does

Prints ``ddp_optimizer_compiles N``: how many graphs Dynamo's DDPOptimizer
(the split at DDP's gradient buckets) compiled.
"""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch._dynamo.backends import distributed as dynamo_ddp
from torch.nn.parallel import DistributedDataParallel as DDP

BACKEND = "eager"


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def count_ddp_optimizer() -> list[int]:
    """Counts DDPOptimizer's compiles: it splits the graph at DDP's buckets."""
    seen = [0]
    original = dynamo_ddp.DDPOptimizer.compile_fn

    def counted(self, gm, inputs):  # type: ignore[no-untyped-def]
        seen[0] += 1
        return original(self, gm, inputs)

    setattr(dynamo_ddp.DDPOptimizer, "compile_fn", counted)
    return seen


def one_rank() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = free_port()
    # a rank of a one-process job, as torchrun would start it (accelerate reads LOCAL_RANK)
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)


def with_accelerate(net: Any, inner: bool) -> tuple[Any, torch.optim.Optimizer]:
    from accelerate import Accelerator  # type: ignore[import-untyped]
    from accelerate.utils import TorchDynamoPlugin  # type: ignore[import-untyped]

    if inner:
        accelerator = Accelerator(cpu=True)
        net = torch.compile(net, backend=BACKEND)
    else:
        accelerator = Accelerator(cpu=True, dynamo_plugin=TorchDynamoPlugin(backend=BACKEND))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    model, opt = accelerator.prepare(net, opt)  # PREPARE
    assert dist.is_initialized() and isinstance(getattr(model, "_orig_mod", model), DDP), type(model)
    return model, opt


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--inner", action="store_true")
    p.add_argument("--user-module", action="store_true")
    p.add_argument("--method", action="store_true")
    p.add_argument("--accelerate", action="store_true")
    args = p.parse_args()
    one_rank()
    seen = count_ddp_optimizer()
    torch.manual_seed(0)
    net: Any = Net() if args.user_module else nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    if args.accelerate:
        model, opt = with_accelerate(net, args.inner)
    else:
        dist.init_process_group("gloo", rank=0, world_size=1)
        if args.inner:
            model = DDP(torch.compile(net, backend=BACKEND))  # INNER
        elif args.method:
            model = DDP(net)
            model.compile(backend=BACKEND)  # METHOD
        else:
            model = torch.compile(DDP(net), backend=BACKEND)  # COMPILE
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(6):
        loss = model(torch.randn(8, 16)).pow(2).mean()  # STEP
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    print("ddp_optimizer_compiles", seen[0], flush=True)


if __name__ == "__main__":
    main()
