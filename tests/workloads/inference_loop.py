"""Inference without an optimizer: each top-level call of the compiled model is a step."""
import json
import time

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).eval()
cmodel = torch.compile(model, backend="eager")
x = torch.randn(64, 256)
starts = []
with torch.no_grad():
    for _ in range(50):
        starts.append(time.perf_counter())
        cmodel(x)
intervals = [(b - a) * 1000 for a, b in zip(starts, starts[1:], strict=False)]
print("SELF_TIMING " + json.dumps({"steps": len(starts), "intervals_ms": intervals}))
