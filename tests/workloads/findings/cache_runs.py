"""A low-rank adapter trained with Inductor (the default backend), for the
compile-cache findings. Its graphs are matrix products only, which Inductor
hands to extern kernels, so a cold compile costs about a second on a CPU.

Run it twice with the same TORCHINDUCTOR_CACHE_DIR and the second run hits
the FX graph and AOTAutograd caches. Options change what the caches see:

--tuned           sets an Inductor config flag that is part of the cache key
                  (max_autotune_pointwise): after a run without it, every
                  graph misses although the cache is warm; the fix is to
                  compile with the same config as the run that filled it;
--allow-in-graph  routes the projection through a helper marked with
                  torch.compiler.allow_in_graph, which AOTAutograd's cache
                  cannot key, so the graph bypasses it; the fix (--fix) lets
                  Dynamo trace the helper instead;
--width N         the adapter's rank (a graph unique to the caller).
"""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--tuned", action="store_true")
parser.add_argument("--allow-in-graph", action="store_true")
parser.add_argument("--fix", action="store_true")
parser.add_argument("--width", type=int, default=24)
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

if args.tuned:
    torch._inductor.config.max_autotune_pointwise = True


def project(h, w):
    return h @ w


if args.allow_in_graph and not args.fix:
    project = torch.compiler.allow_in_graph(project)


class Adapter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.down = torch.nn.Parameter(torch.randn(32, args.width) * 0.1)
        self.up = torch.nn.Parameter(torch.randn(args.width, 32) * 0.1)

    def forward(self, x):
        return project(x @ self.down, self.up)


torch.manual_seed(0)
model = Adapter()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
cmodel = torch.compile(model)
for _ in range(args.steps):
    cmodel(torch.randn(8, 32)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
print("ok")
