"""``loss.backward()`` inside the compiled training step (graph break GB0123).

PyTorch's hints, applied in turn, are the fix:
--trace-autograd sets torch._dynamo.config.trace_autograd_ops = True (GB0123's
hint); the next break is then GB4927 (autograd consumed the returned tensor's
grad_fn), whose hint is to return ``loss.detach()``. --fix applies both.

Prints the weight gradient's norm of the compiled run and of the same steps run
eagerly on a copy of the model, so a test can check the fix keeps the maths.
"""

import argparse
import copy

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--trace-autograd", action="store_true")
parser.add_argument("--fix", action="store_true")
parser.add_argument("--steps", type=int, default=4)
args = parser.parse_args()
if args.trace_autograd or args.fix:
    torch._dynamo.config.trace_autograd_ops = True
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
reference = copy.deepcopy(model)


def step(net, x, y):
    loss = torch.nn.functional.mse_loss(net(x), y)
    loss.backward()  # BREAK:backward
    return loss.detach() if args.fix else loss


compiled_step = torch.compile(step, backend="aot_eager")
for _ in range(args.steps):
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    for net in (model, reference):
        net.zero_grad()
    compiled_step(model, x, y)
    step(reference, x, y)
compiled = model[0].weight.grad.norm().item()
eager = reference[0].weight.grad.norm().item()
print(f"grad norm compiled={compiled:.6f} eager={eager:.6f}")
