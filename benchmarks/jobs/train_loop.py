"""A compiled training loop (4 x Linear(WIDTH) + GELU, SGD) that times its own
steady steps, for ``benchmarks/whole_job.py e2e``: run plainly and under
``ctmon record``, alone or on each rank of a torchrun job.

    python benchmarks/jobs/train_loop.py DEVICE STEPS WIDTH

Prints ``RESULT {"rank": R, "step_ms": MS}``: the mean step over STEPS steps
after 20 warm-up steps, synchronised with the device at the ends only (as a
real loop runs). On a rank (RANK set) the loop uses one thread, its own GPU
where there are enough (else the ranks share one), a batch of 256 and its
rank as the seed; alone, a batch of 256 (on CUDA twice the width, at least
256) and seed 0.
"""

import json
import os
import sys
import time

import torch

device, steps, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rank = int(os.environ.get("RANK", "-1"))
if rank >= 0:
    torch.set_num_threads(1)
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
torch.manual_seed(max(rank, 0))
layers: list[torch.nn.Module] = []
for _ in range(4):
    layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
cmodel = torch.compile(model, backend="inductor" if device == "cuda" else "aot_eager")
batch = max(256, 2 * width) if device == "cuda" and rank < 0 else 256
x = torch.randn(batch, width, device=device)


def step() -> None:
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
print("RESULT " + json.dumps({"rank": max(rank, 0), "step_ms": (time.perf_counter() - t0) / steps * 1000}), flush=True)
