"""A dynamic size that a branch specialises to one value: dim 0 of x is
dynamic, then ``x.shape[0] == 5`` makes Dynamo specialise it (SPECIALISED)."""
import torch


def h(x):
    if x.shape[0] == 5:  # SPECIALISED
        return x + 1
    return x - 1


hc = torch.compile(h, backend="eager", dynamic=True)
hc(torch.ones(5))
hc(torch.ones(8))
print("ok")
