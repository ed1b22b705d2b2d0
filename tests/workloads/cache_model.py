"""Inductor training step whose graph is unique to WIDTH (so a fresh key the first time)."""
import sys

import torch

width = int(sys.argv[1])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
cmodel = torch.compile(model)
for _ in range(3):
    cmodel(torch.randn(8, 16)).sum().backward()
    opt.step()
    opt.zero_grad()
print("ok")
