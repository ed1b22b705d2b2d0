"""Does anything of ctmon's keep the job's finished calls alive?

With the cyclic GC off (so a reference cycle keeps what it holds for
good), the loop calls a function that works a few ms on a local object and
returns; after each call it looks whether that object died with the call.
A sampler holding the job's frames in a cycle keeps some of them -- and
their locals, tensors included -- until a GC pass, at a moment of its own
(in a CUDA graph recording, that fails the recording). Prints
``CALLS n KEPT k``; an optimizer step after each call is the step clock.
"""

from __future__ import annotations

import gc
import sys
import time
import weakref

import torch


class Thing:
    pass


def work(x: torch.Tensor) -> weakref.ref[Thing]:
    thing = Thing()  # a local that must die when this call returns
    for _ in range(40):  # a few ms inside this frame: samples land here
        x = torch.tanh(x @ x)
    return weakref.ref(thing)


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    gc.disable()
    torch.set_num_threads(1)
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=0.0)
    x = torch.randn(96, 96) * 0.1
    calls = kept = 0
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        ref = work(x)
        calls += 1
        kept += ref() is not None
        opt.step()
    print(f"CALLS {calls} KEPT {kept}", flush=True)


if __name__ == "__main__":
    main()
