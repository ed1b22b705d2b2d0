"""Two ranks (gloo, CPU) train a model whose forward is split by graph
breaks into three compiled frames; run under torchrun. Each rank pads its
batches to the longest sequence in them, and rank 1 alone gets a longer one
at step 3: it recompiles all three frames while rank 0 waits for it in
DDP's all-reduce. One cause, three frames.

--pad  every rank pads every batch to one length (32): no rank recompiles
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--pad", action="store_true")
args = parser.parse_args()
PAD_TO = 32


class Split(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Linear(8, 8) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        torch._dynamo.graph_break()  # BREAK-1
        h = torch.relu(self.b(h))
        torch._dynamo.graph_break()  # BREAK-2
        return self.c(h).mean()


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
torch.set_num_threads(1)
model = DDP(torch.compile(Split(), backend="eager"))  # COMPILE
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    longest = 24 if (rank == 1 and step == 3) else 16  # RANK1-LONGER
    x = torch.randn(4, PAD_TO if args.pad else longest, 8)
    model(x).backward()  # CALL
    opt.step()
    opt.zero_grad()
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
