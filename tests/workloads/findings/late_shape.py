"""A training loop whose data has one short batch late in the epoch (the
remainder of a dataset that does not divide by the batch size): the new
batch size first appears at step 45 of 60 and compiles the model again in
steady state -- a late compile and a slow step.

--fix warms the model up on both batch sizes before the loop (one forward
and backward each, gradients discarded), so the loop never compiles.
"""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--fix", action="store_true")
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--short-at", type=int, default=45)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
BATCH, SHORT = 32, 20
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
cmodel = torch.compile(model, backend="aot_eager")


def train_step(x):
    loss = cmodel(x).pow(2).mean()
    loss.backward()
    return loss


if args.fix:
    for n in (BATCH, SHORT):
        train_step(torch.randn(n, 64))
    opt.zero_grad(set_to_none=True)

for step in range(args.steps):
    n = SHORT if step == args.short_at else BATCH
    train_step(torch.randn(n, 64))
    opt.step()
    opt.zero_grad(set_to_none=True)
print("ok")
