"""A two-layer MLP compiled with ``mode="max-autotune-no-cudagraphs"`` and
trained 5 steps on CUDA: PyTorch's phase timers (autotuning included), for
``benchmarks/gpu/run.sh phases``.

    python benchmarks/jobs/autotune_mlp.py
"""

import torch

m = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)).cuda()
f = torch.compile(m, mode="max-autotune-no-cudagraphs")
opt = torch.optim.SGD(m.parameters(), lr=1e-3)
for _ in range(5):
    f(torch.randn(512, 1024, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
