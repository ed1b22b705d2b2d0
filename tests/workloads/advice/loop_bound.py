"""A Python loop inside a compiled function whose bound changes: `for _ in
range(k)` with k = 1, 2, ... 6, 1, 2. Dynamo unrolls the loop, so every
k is a new graph; with the recompile limit at 4 the frame soon runs eager.

Flags (one at a time):
  --dynamic     torch.compile(..., dynamic=True): still one graph per k
                (PyTorch pins the dynamic k again: range_refined_to_singleton)
  --tensor      k passed as a 0-d tensor: range() of a tensor breaks the graph
  --fix         what ctmon advises: the loop stays in Python, its body is
                compiled (one graph for every k)
  --while-loop  what ctmon advises without autograd: torch.while_loop with a
                tensor k under torch.no_grad() (one graph for every k)
  --limit N     what ctmon advises for a few values: recompile_limit = N, at
                least the number of values k takes (one graph per value)
"""

import argparse

import torch

parser = argparse.ArgumentParser()
mode = parser.add_mutually_exclusive_group()
mode.add_argument("--dynamic", action="store_true")
mode.add_argument("--tensor", action="store_true")
mode.add_argument("--fix", action="store_true")
mode.add_argument("--while-loop", action="store_true")
mode.add_argument("--limit", type=int)
parser.add_argument("--steps", type=int, default=8)
args = parser.parse_args()

VALUES = (1, 2, 3, 4, 5, 6)
torch._dynamo.config.recompile_limit = args.limit or 4
torch.manual_seed(0)
w = torch.randn(8, 8)


def refine(x, k):
    for _ in range(k):  # LOOP
        x = torch.tanh(x @ w)
    return x


def body(x):
    return torch.tanh(x @ w)


def refine_while(x, k):
    def cond(i, x):
        return i < k

    def step(i, x):
        return i + 1, torch.tanh(x @ w)

    _, out = torch.while_loop(cond, step, (torch.zeros((), dtype=torch.int64), x))
    return out


refine_c = torch.compile(refine, backend="eager", dynamic=True if args.dynamic else None)
body_c = torch.compile(body, backend="eager")
refine_while_c = torch.compile(refine_while, backend="eager")


def refine_fixed(x, k):
    for _ in range(k):
        x = body_c(x)
    return x


for n in range(args.steps):
    x = torch.randn(4, 8)
    k = VALUES[n % len(VALUES)]
    if args.tensor:
        y = refine_c(x, torch.tensor(k))
    elif args.fix:
        y = refine_fixed(x, k)
    elif args.while_loop:
        with torch.no_grad():
            y = refine_while_c(x, torch.tensor(k))
    else:
        y = refine_c(x, k)
    assert torch.allclose(y, refine(x, k)), "the advised form computes the same"
print("ok")
