"""A recompile storm that ``dynamic=True`` ends, for ``ctmon bench --try``.

The compiled function is called with six sizes in turn and compiled with
``dynamic=False``: a recompile per new size. Sizes start at 2 (sizes 0 and
1 are specialized even when dynamic)."""

import time

import torch

f = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
p = torch.nn.Parameter(torch.zeros(1))
opt = torch.optim.SGD([p], lr=0.1)
for i in range(100000):
    f(torch.ones(i % 6 + 2))
    time.sleep(0.01)
    opt.step()
