"""A model whose compile does nothing, two ways; --fix makes the change each
finding's advice names.

  --case never  torch.compile(model).encode(x): a method reached through the
                compiled wrapper runs the original module, nothing compiles
                -> the method that does the work compiled itself
  --case empty  the compiled forward hands all its work to a function marked
                torch.compiler.disable: the graph holds no operation
                -> the work inside what is compiled (the mark removed)
  --case both   both (the default; with --fix: both fixed, in one job)
"""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--case", choices=["never", "empty", "both"], default="both")
parser.add_argument("--fix", action="store_true")
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()


def work(x, w):
    return (x @ w).relu().sum(-1)


eager_only = torch.compiler.disable(work)


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8))

    def encode(self, x):
        return work(x, self.w)

    def forward(self, x):
        return (work if args.fix else eager_only)(x, self.w)  # EMPTY


model = Encoder()
calls = []
if args.case in ("never", "both"):
    if args.fix:
        model.encode = torch.compile(model.encode, backend="eager")
        calls.append(model.encode)
    else:
        compiled = torch.compile(model, backend="eager")  # NEVER
        calls.append(compiled.encode)
if args.case in ("empty", "both"):
    calls.append(torch.compile(model, backend="eager"))
for _ in range(args.steps):
    for call in calls:
        call(torch.randn(4, 8))
print("ok")
