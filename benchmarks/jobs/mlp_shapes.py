"""An MLP trained with AdamW under Inductor on CUDA at batch sizes 64, 64,
96, 128 (a compile, then recompiles): the GPU half of the TORCH_TRACE
directory ``benchmarks/gpu/run.sh trace`` reads.

    python benchmarks/jobs/mlp_shapes.py
"""

import torch

m = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
opt = torch.optim.AdamW(m.parameters())
c = torch.compile(m)
for bs in (64, 64, 96, 128):
    c(torch.randn(bs, 512, device="cuda")).sum().backward()
    opt.step()
    opt.zero_grad()
torch.cuda.synchronize()
print("gpu run ok")
