"""A training loop whose compiled forward breaks its graph in the middle:
eager glue (a Python loop of small tensor ops, in a function Dynamo is told
to skip) runs between its two graphs.
--glue N: how many eager ops the glue runs (0: a plain graph break).
--steps N: how many steps.
Prints, at the end, the share of the loop's time its glue took, timed here
with perf_counter: the truth the sampled share is checked against."""
import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--glue", type=int, default=200)
parser.add_argument("--steps", type=int, default=300)
args = parser.parse_args()
torch.manual_seed(0)


glue_s = 0.0


@torch._dynamo.disable  # runs eager: Dynamo breaks the graph around the call
def glue(h):
    global glue_s
    t = time.perf_counter()
    for _ in range(args.glue):
        h = h * 1.0001
    glue_s += time.perf_counter() - t
    return h


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(256, 256)
        self.b = torch.nn.Linear(256, 256)

    def forward(self, x):
        h = self.a(x).relu()
        h = glue(h)  # GLUE-BREAK
        return self.b(h)


net = torch.compile(Net(), backend="aot_eager")
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
x = torch.randn(256, 256)
for step in range(args.steps):
    if step == 5:  # compiled by now: time the steady loop
        glue_s, t0 = 0.0, time.perf_counter()
    net(x).sum().backward()
    opt.step()
    opt.zero_grad()
print(f"GLUE_SHARE {glue_s / (time.perf_counter() - t0):.4f}", flush=True)
