"""Two compiled functions under a recompile limit the script lowers to 4
(``--limit N`` is that line with another value). Each new call differs from
the ones before in one way of its own (a dtype, requires_grad, the strides, a
global), so no single cause repeats:

* ``scale`` meets 3 kinds of input: 3 of its 4 versions used, close to the
  limit (ctmon's recompile-budget finding, which suggests a limit);
* ``shift`` meets 5: the 5th is refused at limit 4 and runs eager (ctmon's
  recompile-limit finding, which, each cause seen once, suggests a limit too).

Run with the limit either finding suggests, neither frame is refused."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--limit", type=int, default=4)
args = parser.parse_args()

torch._dynamo.config.recompile_limit = args.limit
OFFSET = 1.0


@torch.compile(backend="eager")
def scale(x):
    return x * 2


@torch.compile(backend="eager")
def shift(x):
    return x + OFFSET


base = torch.ones(4, 4)
# each call changes one more thing than the call before (the newest cached
# version is the one whose failed guard names the cause)
double = base.double()
for x in (base, double, double.t()):
    scale(x)

grad = base.clone().requires_grad_()
shift(base)
shift(grad)
OFFSET = 2.0
shift(grad)
shift(grad.t())
shift(grad.double().t())
print("ok")
