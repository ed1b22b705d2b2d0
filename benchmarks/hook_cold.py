"""What the optimizer hook costs where it runs: right after the optimizer's
step, its code and data evicted from the caches.

Called alone in a tight loop the hook takes well under 1 µs; inside a
host-bound training loop it adds several µs a step (docs/PERFORMANCE.md),
because the step between two calls evicts what the hook touches. This
times the hook itself in that state, one call at a time: a small model's
AdamW ``step()`` (what evicts), then one timed call. Blocks alternate
between the variants so drift cancels:

* ``hook``: ctmon's optimizer post-hook, its step clock writing into a real
  step ring (no sender: the clock's hot path only);
* ``hook_counting``: the same hook on a clock in a counting stretch (what
  a fast loop pays for six steps in seven);
* ``mark``: the clock's ``mark`` alone, as the hook calls it;
* ``store``: one store into the ring's slots; ``publish``: that and the
  store of the write index into the ring's header;
* ``nothing``: a hook that does nothing -- the timing's own floor;
* ``graph_counted``: a call through the counter ctmon puts in each compiled
  graph's place (ctmon/agent/graph_calls.py), of a graph that does
  nothing; ``graph_timed``: through the timing wrapper around that counter
  (in a timing window); ``graph_raw``: the same graph called directly,
  their floor.

Prints, per variant, the median call in ns with its distribution-free 95 %
interval, and each variant's median minus its floor's (``nothing`` or
``graph_raw``) in the same block pairs. Usage::

    python benchmarks/hook_cold.py [--blocks 200] [--calls 100] [--depth 4] [--evict step|train]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hook_cost import median_ci  # noqa: E402

from ctmon.agent import steps  # noqa: E402
from ctmon.agent.channel import Channel  # noqa: E402
from ctmon.agent.graph_calls import _counted, _timed  # noqa: E402
from ctmon.agent.steps import RANK_OPTIMIZER, StepClock  # noqa: E402
from ctmon.wire.ring import StepRing  # noqa: E402

Hook = Callable[[Any, Any, Any], None]


def loop(depth: int, evict: str) -> tuple[torch.optim.Optimizer, Callable[[], None]]:
    """The host loop of hook_cost_job.py (width 64, ``depth`` layers, not
    compiled), and what runs between two calls: its optimizer's step alone
    (``step``) or a whole training step (``train``)."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(64, 64), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers)
    x = torch.randn(16, 64)
    model(x).pow(2).mean().backward()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-9)

    def train() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
        opt.step()

    return opt, (train if evict == "train" else opt.step)


def variants(ring_dir: str, opt: torch.optim.Optimizer) -> dict[str, Hook]:
    steps.FAST_STEPS_PER_S = 1 << 62  # the timing clock times every boundary, however fast
    clock = StepClock(Channel(None))
    ring = StepRing.create(os.path.join(ring_dir, "steps.ring"))
    clock.attach_ring(ring)
    mark = clock.mark
    slots, header, mask = ring.slots, ring.header, ring.mask
    # the same hook on a clock in a counting stretch (a fast loop's three
    # seconds in four: ctmon/agent/steps.py), one that never ends
    counting = StepClock(Channel(None))
    counting.attach_ring(StepRing.create(os.path.join(ring_dir, "counting.ring")))
    counting.mark(RANK_OPTIMIZER)
    counting._counting, counting._counting_opt = RANK_OPTIMIZER, opt
    at = [0]

    def nothing(optimizer: Any, args: Any, kwargs: Any) -> None:
        return None

    def mark_only(optimizer: Any, args: Any, kwargs: Any) -> None:
        mark(RANK_OPTIMIZER)

    def store(optimizer: Any, args: Any, kwargs: Any) -> None:
        w = at[0]
        slots[w & mask] = w
        at[0] = w + 1

    def publish(optimizer: Any, args: Any, kwargs: Any) -> None:
        w = at[0]
        slots[w & mask] = w
        at[0] = w + 1
        header[1] = w + 1

    # What ctmon puts in a compiled graph's place (ctmon/agent/graph_calls.py),
    # around a graph that does nothing: always its counter, and in a timing
    # window the timing wrapper around that.
    def graph(*args: Any) -> None:
        return None

    x = torch.ones(1)
    counted = _counted(graph)
    wrapped = _timed(counted, [0])

    def graph_raw(optimizer: Any, args: Any, kwargs: Any) -> None:
        graph(x, x)

    def graph_counted(optimizer: Any, args: Any, kwargs: Any) -> None:
        counted(x, x)

    def graph_timed(optimizer: Any, args: Any, kwargs: Any) -> None:
        wrapped(x, x)

    return {
        "graph_raw": graph_raw,
        "graph_counted": graph_counted,
        "graph_timed": graph_timed,
        "hook": clock.optimizer_hook(),
        "hook_counting": counting.optimizer_hook(),
        "mark": mark_only,
        "store": store,
        "publish": publish,
        "nothing": nothing,
    }


def block(opt: torch.optim.Optimizer, step: Callable[[], None], hook: Hook, calls: int) -> float:
    """The median of ``calls`` timed calls, each right after a step."""
    now = time.perf_counter_ns
    times = []
    for _ in range(calls):
        step()
        t0 = now()
        hook(opt, (), {})
        times.append(now() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=200)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--evict", choices=["step", "train"], default="step")
    a = ap.parse_args()
    torch.set_num_threads(1)
    opt, step = loop(a.depth, a.evict)
    with tempfile.TemporaryDirectory() as ring_dir:
        hooks = variants(ring_dir, opt)
        for hook in hooks.values():
            block(opt, step, hook, a.calls)  # warm: the interpreter specialises each
        medians: dict[str, list[float]] = {name: [] for name in hooks}
        names = list(hooks)
        for b in range(a.blocks):
            for name in names[b % len(names) :] + names[: b % len(names)]:  # rotate the order
                medians[name].append(block(opt, step, hooks[name], a.calls))
    print(f"torch {torch.__version__}, depth {a.depth}, evict {a.evict}, {a.blocks} blocks x {a.calls} calls")
    for name, ms in medians.items():
        med, lo, hi = median_ci(ms)
        line = f"{name:13s} {med:7.0f} ns [{lo:.0f}, {hi:.0f}]"
        base = "graph_raw" if name.startswith("graph") else "nothing"
        if name != base:
            d, dlo, dhi = median_ci([x - y for x, y in zip(ms, medians[base], strict=True)])
            line += f"   over {base}: {d:+6.0f} ns [{dlo:+.0f}, {dhi:+.0f}]"
        print(line)


if __name__ == "__main__":
    main()
