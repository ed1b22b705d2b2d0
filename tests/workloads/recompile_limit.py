"""Runs into the recompile limit: after 3 versions the frame falls back to eager."""
import torch

torch._dynamo.config.recompile_limit = 3


def pool(x):
    return x.mean(dim=0)


pool_c = torch.compile(pool, backend="eager", dynamic=False)
for n in range(2, 9):
    pool_c(torch.randn(n, 4))
print("ok")
