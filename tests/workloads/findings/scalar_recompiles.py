"""Recompiles on Python numbers, in two common shapes (both compiled with
dynamic=False, so Dynamo specialises every number to its value):

* normalize(): ``.item()`` turns the batch norm into a Python float; the graph
  breaks there, and the float flows into the code after the break, where
  Dynamo bakes it in as a constant -- a new graph for every batch;
* sample(): a temperature schedule passes a new Python float on every call.

--fix keeps both values tensors: normalize() divides by the 0-d tensor
instead of its .item(), and sample() gets torch.tensor(temperature).
"""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--fix", action="store_true")
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()

torch.manual_seed(0)


def normalize(x):
    total = x.abs().sum()
    if args.fix:
        return x / total
    scale = total.item()  # BREAK:item
    return x / scale


def sample(logits, temperature):
    return torch.softmax(logits / temperature, dim=-1)


normalize_c = torch.compile(normalize, backend="eager", dynamic=False)
sample_c = torch.compile(sample, backend="eager", dynamic=False)
for step in range(args.steps):
    batch = torch.randn(16, 8)
    temperature = 1.0 - 0.1 * step
    if args.fix:
        temperature = torch.tensor(temperature)
    probs = sample_c(normalize_c(batch), temperature)
print("ok")
