"""A compiled step whose tensor work happens in a function marked
torch.compiler.disable: Dynamo compiles the step, captures no operation, and
every call runs eager.

--fix compiles the tensor work itself.
"""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--fix", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)


def work(x):
    return (x.sin() * 2).sum()


if not args.fix:
    work = torch.compiler.disable(work)


def step(x):
    return work(x)


cstep = torch.compile(step, backend="eager")
for _ in range(5):
    cstep(torch.randn(8))
print("ok")
