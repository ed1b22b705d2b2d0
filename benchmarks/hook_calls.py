"""What ctmon's per-step work costs, call by call, in this process.

The agent's pieces are built here without a supervisor (events are dropped;
the step clock writes into a real shared-memory step ring), and timed alone:

  warm      the step hooks called in a tight loop, their code and data in the
            caches: the optimizer post-hook (what ``optimizer.step()`` pays),
            the compiled call's enter and exit hooks, ``ctmon.step()``; each
            called directly (the figures), and whole ``optimizer.step()`` /
            compiled calls / ``ctmon.step()`` with the hook on and off in
            alternating rounds (the median of per-pair differences).
  cold      the same hooks where they run: right after a training step (or an
            optimizer's step) has evicted their code and data, one timed call
            at a time, variants in rotating blocks so drift cancels. Variants:
            ``hook`` (ctmon's optimizer post-hook, its clock timing),
            ``hook_counting`` (its clock in a counting stretch: what a fast
            loop pays most steps), ``mark`` (the clock's write alone),
            ``store`` (one store into the ring's slots), ``publish`` (that and
            the write index), ``nothing`` (a hook that does nothing: the floor),
            ``graph_counted`` / ``graph_timed`` (a call through the counter
            ctmon puts in each compiled graph's place, and through the timing
            wrapper around it, ctmon/agent/graph_calls.py) over ``graph_raw``
            (the same graph called directly). Each variant's median call with
            its distribution-free 95 % interval, and its median over its floor
            in the same blocks.
  generate  what telling generate() tokens apart costs a compiled call: once a
            job imports transformers' generation utilities, each top-level call
            of the compiled callable that is the step clock walks the stack for
            generate() until a decode call of an open generate() was seen. The
            walk at stack depths 5, 20 and 50 against the bare call, with a
            stand-in for GenerationMixin (no torch needed); min / median / max
            of interleaved repeats.

Usage:
  python benchmarks/hook_calls.py warm [--device cpu|cuda] [--pairs 9] [--steps-per-round 20000]
  python benchmarks/hook_calls.py cold [--blocks 200] [--calls 100] [--depth 4] [--evict step|train]
  python benchmarks/hook_calls.py generate [--calls 200000] [--repeat 7]
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
import types
from collections.abc import Callable
from typing import Any

import harness

Hook = Callable[[Any, Any, Any], None]


# ------------------------------------------------------------------- warm


def warm(device: str, pairs: int, steps_per_round: int) -> dict[str, object]:
    import torch

    from ctmon import _api
    from ctmon.agent.core import Agent
    from ctmon.agent.step_hooks import call_hook, optimizer_hook
    from ctmon.agent.torch_hooks import dynamo_enter_hooks, install
    from ctmon.wire.ring import StepRing

    tmp = tempfile.mkdtemp(prefix="ctmon-bench-")
    agent = Agent(None)  # no supervisor: events are dropped, hooks run for real
    agent.clock.attach_ring(StepRing.create(os.path.join(tmp, "steps.ring")))
    install(agent, torch)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    dev = torch.device(device)
    results: dict[str, object] = {"device": device, "pairs": pairs, "steps_per_round": steps_per_round}

    def opt_round(n: int) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            opt.step()
        sync()
        return (time.perf_counter_ns() - t0) / n

    # 1. optimizer.step() on a tiny parameter: the hook's absolute cost.
    p = torch.nn.Parameter(torch.zeros(1, device=dev))
    p.grad = torch.zeros(1, device=dev)
    opt = torch.optim.SGD([p], lr=0.0)

    def set_opt_hook(on: bool) -> None:
        _set_optimizer_hook(agent, on)

    results["optimizer_step_ns"] = on_off_pairs(opt_round, set_opt_hook, pairs, steps_per_round)

    # 2. a compiled function called at top level (inference loops).
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    compiled = torch.compile(f, backend="eager")  # ctmon's enter hook is in its context's list
    hooks = dynamo_enter_hooks(compiled)
    assert hooks is not None
    ours = hooks[-1]
    x = torch.zeros(1, device=dev)
    compiled(x)

    def set_call(on: bool) -> None:
        agent.clock.rank = -1
        if on and ours not in hooks:
            hooks.append(ours)
        elif not on and ours in hooks:
            hooks.remove(ours)

    set_opt_hook(False)
    agent.clock.rank, agent.clock.count = -1, 0

    def call_round(n: int) -> float:
        fn = compiled
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn(x)
        sync()
        return (time.perf_counter_ns() - t0) / n

    results["compiled_call_ns"] = on_off_pairs(call_round, set_call, pairs, max(1000, steps_per_round // 10))

    # 3. ctmon.step() itself (the explicit API).
    import ctmon

    impl = agent.clock.api_step

    def set_api(on: bool) -> None:
        _api._step_impl = impl if on else None

    results["ctmon_step_ns"] = on_off_pairs(
        lambda n: harness.per_call_ns(ctmon.step, n), set_api, pairs, steps_per_round
    )

    # 4. The hooks' own work, called directly: exactly what a step pays on the
    # host, without the 15-30 us of an optimizer step's noise around it.
    clock = agent.clock
    clock.rank, clock.count, clock._opt_key = -1, 0, None
    hook = optimizer_hook(clock)  # what torch calls after each optimizer.step()
    enter = call_hook(clock, 12345)  # what PyTorch's wrapper runs around each compiled call

    def call_hook() -> None:
        hook(opt, (), {})

    def enter_and_leave() -> None:
        enter()()

    def enter_round() -> float:
        clock.rank, clock.count = -1, 0
        ns = harness.per_call_ns(enter_and_leave, 200_000)
        clock.rank = 1
        return ns

    direct = harness.interleaved(
        {
            "baseline_call": lambda: harness.per_call_ns(lambda: None, 200_000),
            "optimizer_hook": lambda: harness.per_call_ns(call_hook, 200_000),
            "compiled_call_hook": enter_round,
        },
        pairs,
        how="fixed",
    )
    results["direct_ns"] = {
        "optimizer_hook_call": round(statistics.median(direct["optimizer_hook"]), 1),
        # enter + leave, both counted: the call's own cost is in them
        "compiled_call_hook": round(statistics.median(direct["compiled_call_hook"]), 1),
        "python_call_baseline": round(statistics.median(direct["baseline_call"]), 1),
    }
    return results


def _set_optimizer_hook(agent: Any, on: bool) -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from ctmon.agent.step_hooks import optimizer_hook

    clock = agent.clock
    if on and agent.optimizer_hook is None:
        agent.optimizer_hook = register_optimizer_step_post_hook(optimizer_hook(clock))
        clock.set_global_hook(agent.optimizer_hook.hooks_dict_ref(), agent.optimizer_hook.id)
    elif not on and agent.optimizer_hook is not None:
        clock.set_global_hook(None)
        agent.optimizer_hook.remove()
        agent.optimizer_hook = None


def on_off_pairs(run_round: Callable[[int], float], toggle: Callable[[bool], None], pairs: int, n: int) -> dict:
    """Rounds of ``n`` calls with the hook on and off, alternating which goes
    first; the median of the per-pair differences and their range."""

    def arm(on: bool) -> Callable[[], float]:
        def timed() -> float:
            toggle(on)
            return run_round(n)

        return timed

    arm(True)()  # warm-up
    arm(False)()
    got = harness.interleaved({"on": arm(True), "off": arm(False)}, pairs)
    toggle(True)
    diffs = [a - b for a, b in zip(got["on"], got["off"], strict=True)]
    return {
        "off_median": round(statistics.median(got["off"]), 4),
        "on_median": round(statistics.median(got["on"]), 4),
        "cost_median": round(statistics.median(diffs), 4),
        "cost_min": round(min(diffs), 4),
        "cost_max": round(max(diffs), 4),
    }


# ------------------------------------------------------------------- cold


def cold_loop(depth: int, evict: str) -> tuple[Any, Callable[[], None]]:
    """The host loop of jobs/hook_cost_job.py (width 64, ``depth`` layers,
    not compiled), and what runs between two calls: its optimizer's step
    alone (``step``) or a whole training step (``train``)."""
    import torch

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


def cold_variants(ring_dir: str, opt: Any) -> dict[str, Hook]:
    import torch

    from ctmon.agent import steps
    from ctmon.agent.channel import Channel
    from ctmon.agent.graph_calls import _counted, _timed
    from ctmon.agent.step_hooks import optimizer_hook
    from ctmon.agent.steps import RANK_OPTIMIZER, StepClock
    from ctmon.wire.ring import StepRing

    steps.FAST_STEPS_PER_S = 1 << 62  # the timing clock times every boundary, however fast
    clock = StepClock(Channel(None))
    ring = StepRing.create(os.path.join(ring_dir, "steps.ring"))
    clock.attach_ring(ring)
    mark = clock.mark
    slots, header, mask = ring.slots, ring.header, ring.mask
    # the same hook on a clock in a counting stretch (a fast loop's most
    # steps: ctmon/agent/steps.py), one that never ends
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
        "hook": optimizer_hook(clock),
        "hook_counting": optimizer_hook(counting),
        "mark": mark_only,
        "store": store,
        "publish": publish,
        "nothing": nothing,
    }


def cold_block(opt: Any, step: Callable[[], None], hook: Hook, calls: int) -> float:
    """The median of ``calls`` timed calls, each right after a step."""
    now = time.perf_counter_ns
    times = []
    for _ in range(calls):
        step()
        t0 = now()
        hook(opt, (), {})
        times.append(now() - t0)
    return statistics.median(times)


def cold(blocks: int, calls: int, depth: int, evict: str) -> None:
    import torch

    torch.set_num_threads(1)
    opt, step = cold_loop(depth, evict)
    with tempfile.TemporaryDirectory() as ring_dir:
        hooks = cold_variants(ring_dir, opt)
        for hook in hooks.values():
            cold_block(opt, step, hook, calls)  # warm: the interpreter specialises each
        arms = {name: (lambda h=hook: cold_block(opt, step, h, calls)) for name, hook in hooks.items()}
        medians = harness.interleaved(arms, blocks, how="rotate")
    print(f"torch {torch.__version__}, depth {depth}, evict {evict}, {blocks} blocks x {calls} calls")
    for name, ms in medians.items():
        med, lo, hi = harness.median_ci(ms)
        line = f"{name:13s} {med:7.0f} ns [{lo:.0f}, {hi:.0f}]"
        base = "graph_raw" if name.startswith("graph") else "nothing"
        if name != base:
            d, dlo, dhi = harness.median_ci([x - y for x, y in zip(ms, medians[base], strict=True)])
            line += f"   over {base}: {d:+6.0f} ns [{dlo:+.0f}, {dhi:+.0f}]"
        print(line)


# --------------------------------------------------------------- generate


class _Channel:
    def put(self, record: tuple[Any, ...], urgent: bool = False) -> None:
        pass


class GenerationMixin:
    def generate(self) -> None:
        pass

    def _prefill(self) -> None:
        pass


def at_depth(depth: int, fn: Callable[[], object], calls: int) -> float:
    """µs a call of ``fn`` takes with ``depth`` more frames below it."""
    if depth:
        return at_depth(depth - 1, fn, calls)
    return harness.per_call_ns(fn, calls) / 1000


def generate(calls: int, repeat: int) -> None:
    from ctmon.agent.generation import GenerationWatch

    watch = GenerationWatch(_Channel())  # type: ignore[arg-type]
    module = types.ModuleType("generation_utils")
    module.GenerationMixin = GenerationMixin  # type: ignore[attr-defined]
    watch.arm(module)

    def watched() -> None:  # the enter hook's added work, outside generate()
        watch.on_call(1, 0)

    print(f"{'depth':>5}  {'walk us/call (min/median/max)':>30}  {'bare':>6}")
    for depth in (5, 20, 50):
        got = harness.interleaved(  # drift hits both alike
            {
                "walk": lambda d=depth: at_depth(d, watched, calls),
                "bare": lambda d=depth: at_depth(d, lambda: None, calls),
            },
            repeat,
            how="fixed",
        )
        walk = got["walk"]
        print(
            f"{depth:>5}  {min(walk):8.2f} / {statistics.median(walk):6.2f} / {max(walk):6.2f}"
            f"      {statistics.median(got['bare']):6.3f}"
        )


def main() -> None:
    ap = harness.parser(__doc__)
    sub = ap.add_subparsers(dest="what", required=True)
    w = sub.add_parser("warm")
    w.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    w.add_argument("--pairs", type=int, default=9)
    w.add_argument("--steps-per-round", type=int, default=20000)
    c = sub.add_parser("cold")
    c.add_argument("--blocks", type=int, default=200)
    c.add_argument("--calls", type=int, default=100)
    c.add_argument("--depth", type=int, default=4)
    c.add_argument("--evict", choices=["step", "train"], default="step")
    g = sub.add_parser("generate")
    g.add_argument("--calls", type=int, default=200_000)
    g.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    if a.what == "warm":
        res = warm(a.device, a.pairs, a.steps_per_round)
        print(json.dumps({"machine": harness.machine(), "warm": res}, indent=2))
    elif a.what == "cold":
        cold(a.blocks, a.calls, a.depth, a.evict)
    else:
        generate(a.calls, a.repeat)


if __name__ == "__main__":
    main()
