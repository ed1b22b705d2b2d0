"""Graph breaks of every common cause inside one model's forward, each on a
line marked ``# BREAK:<name>``, plus a one-off break in a summary function
that runs once after the training loop.

--fix applies each finding's fix: print is deferred by Dynamo
(reorderable_logging_functions), the .item() value stays a tensor, the
data-dependent branch becomes torch.where, np.digitize becomes
torch.bucketize, the timer moves out of the compiled function, and the
summary returns tensors (.tolist() after the call).
"""
import argparse
import time

import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--fix", action="store_true")
parser.add_argument("--steps", type=int, default=5)
args = parser.parse_args()
torch.manual_seed(0)
if args.fix:
    torch._dynamo.config.reorderable_logging_functions.add(print)

EDGES = [-1.0, 0.0, 1.0]
EDGES_T = torch.tensor(EDGES)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 16)
        self.fc2 = torch.nn.Linear(16, 4)
        self.last_forward_t = 0.0

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        print("activation mean", h.mean())  # BREAK:print
        if args.fix:
            peak = h.abs().max()
        else:
            peak = h.abs().max().item()  # BREAK:item
        h = h / (1.0 + peak)
        if args.fix:
            h = torch.where(h.mean() > 0, h * 2, h)
        elif h.mean() > 0:  # BREAK:branch
            h = h * 2
        if args.fix:
            bins = torch.bucketize(x[:, 0].contiguous(), EDGES_T, right=True)
        else:
            bins = torch.from_numpy(np.digitize(x[:, 0].detach().numpy(), EDGES))  # BREAK:numpy
        h = h + bins.unsqueeze(1).to(h.dtype)
        if not args.fix:
            self.last_forward_t = time.time()  # BREAK:call
        return self.fc2(h)


def summarize(logits):
    probs = torch.softmax(logits, dim=-1).mean(dim=0)
    if args.fix:
        return probs
    return probs.tolist()  # BREAK:once


model = Model()
model_c = torch.compile(model, backend="aot_eager")
summarize_c = torch.compile(summarize, backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(args.steps):
    x = torch.randn(8, 16)
    if args.fix:
        model.last_forward_t = time.time()
    loss = model_c(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
summary = summarize_c(model_c(torch.randn(8, 16)).detach())
if args.fix:
    summary = summary.tolist()
print("class mix", [round(p, 3) for p in summary])
