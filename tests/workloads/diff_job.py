"""ctmon diff's job: a tiny model trained a few steps; flags change it.

--graph-break   a print in forward: a graph break the plain run has not
--new-shape     the last batch is of another size: a shape recompile
--slow-backend  compiles through a backend that sleeps first: compile time
                grows in the backend phase and nowhere else
--hold FILE     after the steps, wait (up to 5 min) until FILE exists: a live job to watch

Each step is mostly a fixed sleep, so two runs' step times differ by noise
only, even on a busy machine (which moves a sleep far less than it moves a
computation).
"""

import os
import sys
import time

import torch

torch.manual_seed(0)
FLAGS = set(sys.argv[1:])
STEPS = 20
STEP_SLEEP_S = 0.1
BACKEND_SLEEP_S = 2.0


def slow_backend(gm, example_inputs):
    time.sleep(BACKEND_SLEEP_S)  # the injected regression: every compile pays it
    return gm.forward


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = torch.relu(self.fc(x))
        if "--graph-break" in FLAGS:
            print("forward")  # BREAK:print
        return y.sum()


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
backend = slow_backend if "--slow-backend" in FLAGS else "eager"
step = torch.compile(model, backend=backend, dynamic=False)
for i in range(STEPS):
    batch = 3 if "--new-shape" in FLAGS and i == STEPS - 1 else 4
    loss = step(torch.randn(batch, 8))
    loss.backward()
    time.sleep(STEP_SLEEP_S)
    opt.step()
    opt.zero_grad()
if "--hold" in sys.argv:
    hold = sys.argv[sys.argv.index("--hold") + 1]
    deadline = time.monotonic() + 300
    while not os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(0.05)
print("ok")
