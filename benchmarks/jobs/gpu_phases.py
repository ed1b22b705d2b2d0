"""A GPU job with three phases for benchmarks/gpu/system_check.py: busy
(compiled matmuls back to back), half idle (the host sleeps between
steps), and a memory peak held for a few seconds (so a 1 Hz sampler and a
faster poll see the same peak)."""

from __future__ import annotations

import sys
import time

import torch


def main() -> None:
    phase_s = float(sys.argv[1]) if len(sys.argv) > 1 else 15.0
    w = torch.randn(4096, 4096, device="cuda")
    f = torch.compile(lambda x: torch.relu(x @ w) @ w)
    x = torch.randn(4096, 4096, device="cuda")
    t_end = time.monotonic() + phase_s
    while time.monotonic() < t_end:  # busy
        f(x)
    torch.cuda.synchronize()
    t_end = time.monotonic() + phase_s
    while time.monotonic() < t_end:  # about half idle
        f(x)
        torch.cuda.synchronize()
        time.sleep(0.004)
    extra = torch.empty(10 * 2**30, dtype=torch.uint8, device="cuda")  # +10 GiB, held
    extra.fill_(1)
    t_end = time.monotonic() + 4.0
    while time.monotonic() < t_end:
        f(x)
        torch.cuda.synchronize()
        time.sleep(0.004)
    del extra
    print("done", flush=True)


if __name__ == "__main__":
    main()
