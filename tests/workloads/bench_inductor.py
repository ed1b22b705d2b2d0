"""A tiny function compiled by Inductor (the default backend), for ``ctmon
bench``'s cold compiles: its graph is the same in every mode on a CPU, so a
mode that found another mode's cache entries would hit where it should miss."""

import time

import torch

f = torch.compile(lambda x: (x * 2).sin() + 1)
p = torch.nn.Parameter(torch.zeros(1))
opt = torch.optim.SGD([p], lr=0.1)
x = torch.ones(8)
for _ in range(100000):
    f(x)
    time.sleep(0.01)
    opt.step()
