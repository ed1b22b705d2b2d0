"""A setting ctmon could suggest that the job already has on.

Default: the script sets torch._dynamo.config.capture_scalar_outputs = True and
its compiled function calls ``.tolist()`` on a float tensor, which that setting
does not cover (graph break GB0109). --fix returns the tensor and calls
``.tolist()`` after the compiled call.

--item: the setting is left off and the function calls ``.item()`` instead,
which the setting does cover: --capture-scalars turns it on.
"""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--item", action="store_true")
parser.add_argument("--capture-scalars", action="store_true")
parser.add_argument("--fix", action="store_true")
parser.add_argument("--steps", type=int, default=4)
args = parser.parse_args()
if not args.item or args.capture_scalars:
    torch._dynamo.config.capture_scalar_outputs = True
torch.manual_seed(0)


def stats(x):
    m = x.mean(dim=0)
    if args.fix:
        return m * 2
    if args.item:
        peak = m.abs().max().item()  # BREAK:item
        return m / (1.0 + peak)
    values = m.tolist()  # BREAK:tolist
    return torch.tensor(values) * 2


compiled_stats = torch.compile(stats, backend="eager")
for _ in range(args.steps):
    out = compiled_stats(torch.randn(4, 3))
    if args.fix:
        out.tolist()
print("ok")
