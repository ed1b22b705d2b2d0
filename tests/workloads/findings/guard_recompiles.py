"""Recompiles caused by guards other than shapes and plain numbers, one
compiled frame per guard kind:

* featurize(): batches arrive in float32, float64 and bfloat16 (dtype guard);
* Net.forward: a warm-up counter kept as a Python int attribute and changed
  every step (module-attribute guard: int attributes of a module are static);
* jitter(): reads a global int that changes every step (global guard);
* Head.forward: switched to .eval() every other step for a validation pass
  (training-flag guard);
* smooth(): called on activations that sometimes require grad and sometimes
  not (requires_grad guard).

--fix applies the finding's fix to each: cast to one dtype before the call,
keep the counter in a buffer updated in place, pass the global as a tensor
argument, validate with the uncompiled module, and detach smooth()'s input.
"""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--fix", action="store_true")
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args()
torch.manual_seed(0)

WARMUP = 4
NOISE_STEP = 0


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        if args.fix:
            self.register_buffer("step", torch.zeros((), dtype=torch.long))
        else:
            self.step = 0

    def forward(self, x):
        ramp = (self.step + 1) / WARMUP
        return self.fc(x) * ramp


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = torch.nn.Dropout(0.1)
        self.fc = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.fc(self.drop(x))


def featurize(x):
    return (x - x.mean()) / (x.std() + 1e-5)


def jitter(x, step=None):
    if step is None:
        step = NOISE_STEP
    return x + 0.01 * step


def smooth(h):
    return h * 0.9 + h.roll(1, 0) * 0.1


net, head = Net(), Head()
net_c = torch.compile(net, backend="eager")
head_c = torch.compile(head, backend="eager")
featurize_c = torch.compile(featurize, backend="eager")
jitter_c = torch.compile(jitter, backend="eager")
smooth_c = torch.compile(smooth, backend="eager")
opt = torch.optim.SGD([*net.parameters(), *head.parameters()], lr=0.01)
dtypes = (torch.float32, torch.float64, torch.bfloat16)
for step in range(args.steps):
    raw = torch.randn(4, 8, dtype=dtypes[step % 3])
    if args.fix:
        raw = raw.to(torch.float32)
    x = featurize_c(raw).float()
    if args.fix:
        net.step.fill_(step)
        x = jitter_c(x, torch.tensor(step))
    else:
        net.step = step
        NOISE_STEP = step
        x = jitter_c(x)
    h = net_c(x)
    loss = head_c(h).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    stats = smooth_c(h.detach() if args.fix or step % 2 == 0 else h)
    if step % 2 == 1:  # validation on a held-out batch
        head.eval()
        val = (head if args.fix else head_c)(net_c(featurize_c(torch.randn(4, 8))))
        head.train()
print("ok")
