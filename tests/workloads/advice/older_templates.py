"""One compiled function per older advice template, each showing its problem;
--fix makes the change each finding's advice names, in the code.

  log       print() inside            -> print the returned tensor after the call
  branch    `if x.sum() > 0:`         -> torch.where
  numpy     np.digitize               -> torch.bucketize(x, boundaries, right=True)
  explicit  torch._dynamo.graph_break -> removed
  clock     time.time() inside        -> called outside, passed in as a tensor
  item      .item() inside            -> kept a tensor
  attr      an int module attribute   -> a buffer updated in place
  scalar    a Python int argument     -> passed as a 0-d tensor
  glob      a global float changed    -> passed as a tensor argument

The settings the findings name (capture_scalar_outputs,
allow_unspec_int_on_nn_module) are not set here: tests apply them from the
report's ``fixes`` before this script runs. --steps: loop length.
"""

import argparse
import time

import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--fix", action="store_true")
parser.add_argument("--steps", type=int, default=5)
args = parser.parse_args()
FIX = args.fix
torch.manual_seed(0)
BINS = np.array([-1.0, 0.0, 1.0])
SCALE = 1.0


def log(x):
    y = x * 2
    if not FIX:
        print("y", y.sum())  # BREAK:log
    return y


def branch(x):
    if FIX:
        return torch.where(x.sum() > 0, x * 2, x * 3)
    if x.sum() > 0:  # BREAK:branch
        return x * 2
    return x * 3


def numpy_call(x):
    if FIX:
        return torch.bucketize(x, torch.tensor(BINS, dtype=x.dtype), right=True)
    return torch.from_numpy(np.digitize(x.numpy(), BINS))  # BREAK:numpy


def explicit(x):
    y = x + 1
    if not FIX:
        torch._dynamo.graph_break()  # BREAK:explicit
    return y * 2


def clock(x, now=None):
    if FIX:
        return x * now
    return x * time.time()  # BREAK:clock


def item(x):
    if FIX:
        return x / (1.0 + x.abs().max())
    peak = x.abs().max().item()  # BREAK:item
    return x / (1.0 + peak)


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        if FIX:
            return x * self.steps
        return x * self.step  # GUARD:attr


def scalar(x, k):
    return x * k  # GUARD:scalar


def glob(x, scale=None):
    if FIX:
        return x * scale
    return x * SCALE  # GUARD:glob


fns = {n: torch.compile(f, backend="eager") for n, f in [("log", log), ("branch", branch), ("explicit", explicit)]}
numpy_c = torch.compile(numpy_call, backend="eager")
clock_c = torch.compile(clock, backend="eager")
item_c = torch.compile(item, backend="eager")
counter = Counter()
counter_c = torch.compile(counter, backend="eager")
scalar_c = torch.compile(scalar, backend="eager", dynamic=False)
glob_c = torch.compile(glob, backend="eager")
w = torch.nn.Parameter(torch.zeros(()))
opt = torch.optim.SGD([w], lr=0.1)
for i in range(args.steps):
    x = torch.randn(4, 3)
    for f in fns.values():
        f(x)
    numpy_c(x)
    clock_c(x, torch.tensor(time.time())) if FIX else clock_c(x)
    item_c(x)
    counter.step = i
    counter.steps.fill_(i)
    counter_c(x)
    scalar_c(x, torch.tensor(i + 1)) if FIX else scalar_c(x, i + 1)
    SCALE = 1.0 + i / 10
    glob_c(x, torch.tensor(SCALE)) if FIX else glob_c(x)
    opt.zero_grad()
    (w * x.sum()).backward()
    opt.step()
print("ok")
