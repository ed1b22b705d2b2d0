"""A training loop whose compiled forward breaks its graph in the middle:
eager glue (a Python loop of small tensor ops, in a function Dynamo is told
to skip) runs between its two graphs.
--glue N: how many eager ops the glue runs (0: a plain graph break).
--steps N: how many steps; --seconds S instead: steps until the steady loop
(after the first five steps, which compile) has run S seconds. A time bound
gives the 4 Hz sampler the same number of samples however loaded the
machine is, and takes no longer there.
Prints, at the end, the share of the loop's time its glue took, timed here
with perf_counter: the truth the sampled share is checked against."""
import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--glue", type=int, default=200)
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--seconds", type=float, default=None)
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
WARM = 5  # compiled by then: the steady loop is timed from here


def more(step: int) -> bool:
    if args.seconds is None:
        return step < args.steps
    return step <= WARM or time.perf_counter() - t0 < args.seconds


step = 0
while more(step):
    if step == WARM:
        glue_s, t0 = 0.0, time.perf_counter()
    net(x).sum().backward()
    opt.step()
    opt.zero_grad()
    step += 1
print(f"GLUE_SHARE {glue_s / (time.perf_counter() - t0):.4f}", flush=True)
