"""Trains a few steps, then dies: by exception, os._exit, or SIGKILL."""
import os
import signal
import sys

import torch

how = sys.argv[1] if len(sys.argv) > 1 else "exception"
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
cmodel = torch.compile(model, backend="eager")
for _ in range(5):
    cmodel(torch.randn(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
print("about to die", flush=True)
if how == "exception":
    raise RuntimeError("simulated failure at step 5")
if how == "exit":
    os._exit(3)
if how == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
if how == "interrupt":
    raise KeyboardInterrupt
if how == "sysexit":
    sys.exit(4)
