"""A steady live job for ``benchmarks/viewer.py idle``: a step every PERIOD
seconds through ``ctmon.step()`` for SECONDS, an output line every other
step, and, with a third argument, a fresh function compiled with a graph
break every 50 steps (about every 2 s at 25 steps/s).

    python benchmarks/jobs/paced_steps.py PERIOD SECONDS [compile]
"""

import sys
import time

import ctmon

period, seconds = float(sys.argv[1]), float(sys.argv[2])
torch = None
if len(sys.argv) > 3:  # with compile events: a fresh function compiled every 2 s
    import torch

    torch._dynamo.config.cache_size_limit = 10_000
end = time.time() + seconds
k = 0
while time.time() < end:
    time.sleep(period)
    ctmon.step()
    k += 1
    if k % 2 == 0:
        print(f"step {k} loss 0.{k % 9973:04d}", flush=True)
    if torch is not None and k % 50 == 0:
        src = f"def f{k}(x):\n    y = x + {k}\n    print('break')\n    return y * 2\n"
        scope: dict = {}
        exec(compile(src, f"/bench/model_{k}.py", "exec"), scope)
        torch.compile(scope[f"f{k}"], backend="eager")(torch.ones(4))
