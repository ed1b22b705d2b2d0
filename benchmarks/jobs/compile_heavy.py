"""A compile-heavy script for ``benchmarks/whole_job.py compile``: six
pre-norm MLP blocks (width 256) trained one step at each of three sequence
lengths -- a compile and two recompiles -- with ``dynamic=False``.

    python benchmarks/jobs/compile_heavy.py DEVICE

Prints ``RESULT {"compile_s": S}``: the time to its first result after the
three shapes (synchronised on CUDA).
"""

import json
import sys
import time

import torch

device = sys.argv[1]
backend = "inductor" if device == "cuda" else "aot_eager"
torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))


model = torch.nn.Sequential(*[Block(256) for _ in range(6)]).to(device)
opt = torch.optim.AdamW(model.parameters())
cmodel = torch.compile(model, backend=backend, dynamic=False)
t0 = time.perf_counter()
for seq in (64, 96, 128):  # three shapes: a compile and two recompiles
    x = torch.randn(8, seq, 256, device=device)
    cmodel(x).sum().backward()
    opt.step()
    opt.zero_grad()
if device == "cuda":
    torch.cuda.synchronize()
print("RESULT " + json.dumps({"compile_s": time.perf_counter() - t0}))
