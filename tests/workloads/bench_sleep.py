"""A step dominated by sleeps, for ``ctmon bench``'s verdicts.

Usage: bench_sleep.py same|eager-slower. ``same``: every mode does the same
per step (a tiny compiled call and a 30 ms sleep), so no mode is faster.
``eager-slower``: the compiled function sleeps 30 ms more only when it runs
uncompiled -- Dynamo traces it with ``torch.compiler.is_compiling()`` true,
so the compiled graph leaves the sleep out, while ``eager`` (bench's
``set_stance("force_eager")``) runs the original code, sleep included.
Prints the Inductor cache it was given and whether it held anything yet.
"""

import os
import sys
import time

import torch

variant = sys.argv[1]
cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
held = len(os.listdir(cache)) if cache and os.path.isdir(cache) else 0
print(f"CACHE {os.environ.get('CTMON_COMPILE_MODE')} {cache} entries={held}", flush=True)


def body(x: torch.Tensor) -> torch.Tensor:
    if variant == "eager-slower" and not torch.compiler.is_compiling():
        time.sleep(0.03)
    return x * 2


f = torch.compile(body, backend="eager")
p = torch.nn.Parameter(torch.zeros(1))
opt = torch.optim.SGD([p], lr=0.1)
x = torch.ones(4)
for _ in range(100000):
    f(x)
    time.sleep(0.03)
    opt.step()
