"""A plain training loop that times itself; ctmon must agree with it."""
import json
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
# seconds each step also waits (as on a data loader): a run long enough for
# 1 Hz samples without spending the CPU on more steps
wait_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
cmodel = torch.compile(model, backend="aot_eager")
x = torch.randn(128, 256)
ends = []
for _ in range(steps):
    loss = cmodel(x).pow(2).mean()
    loss.backward()
    opt.step()
    if wait_s:
        time.sleep(wait_s)
    ends.append(time.perf_counter())
    opt.zero_grad(set_to_none=True)
intervals = [(b - a) * 1000 for a, b in zip(ends, ends[1:], strict=False)]
print("SELF_TIMING " + json.dumps({"steps": len(ends), "intervals_ms": intervals}))
