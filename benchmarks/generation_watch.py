"""What telling generate() tokens apart costs a compiled call.

Once the job imports transformers' generation utilities, each top-level call
of the compiled callable that is the step clock (inference loops only: a
training loop's clock is the optimizer) walks the stack for generate() until
a decode call of an open generate() has been seen. This times that walk at
several stack depths against the same call without it, in-process, with a
stand-in for GenerationMixin (no torch needed), repeated to show the spread.

    python benchmarks/generation_watch.py [--calls 200000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
import types
from typing import Any

from ctmon.agent.generation import GenerationWatch


class _Channel:
    def put(self, record: tuple[Any, ...], urgent: bool = False) -> None:
        pass


class GenerationMixin:
    def generate(self) -> None:
        pass

    def _prefill(self) -> None:
        pass


def per_call_us(depth: int, fn: Any, calls: int) -> float:
    if depth:
        return per_call_us(depth - 1, fn, calls)
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    watch = GenerationWatch(_Channel())  # type: ignore[arg-type]
    module = types.ModuleType("generation_utils")
    module.GenerationMixin = GenerationMixin  # type: ignore[attr-defined]
    watch.arm(module)

    def watched() -> None:  # the enter hook's added work, outside generate()
        watch.on_call(1, 0)

    def bare() -> None:
        pass

    print(f"{'depth':>5}  {'walk us/call (min/median/max)':>30}  {'bare':>6}")
    for depth in (5, 20, 50):
        walk, base = [], []
        for _ in range(a.repeat):  # interleaved, so drift hits both alike
            walk.append(per_call_us(depth, watched, a.calls))
            base.append(per_call_us(depth, bare, a.calls))
        print(
            f"{depth:>5}  {min(walk):8.2f} / {statistics.median(walk):6.2f} / {max(walk):6.2f}"
            f"      {statistics.median(base):6.3f}"
        )


if __name__ == "__main__":
    main()
