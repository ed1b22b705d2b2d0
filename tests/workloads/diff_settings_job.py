"""A tiny Inductor job for ``ctmon diff``'s Inductor settings (its forward
and backward graphs are one matrix product each, which Inductor hands to an
extern kernel: a cold compile is about a second on a CPU).

--options  compiles with torch.compile(options={"epilogue_fusion": False}),
           a setting that is part of the FX graph cache key; the job's
           environment (TORCHINDUCTOR_*) can change others.
"""

import sys

import torch

options = {"epilogue_fusion": False} if "--options" in sys.argv else None
torch.manual_seed(0)
model = torch.compile(torch.nn.Linear(16, 16, bias=False), options=options)
model(torch.randn(4, 16)).sum().backward()
print("ok")
