"""The step clock's two hooks into PyTorch (ctmon/agent/steps.py): the global
optimizer step post-hook and the enter hook of each compiled callable.

Both run in eager Python on every step of the job: their inner functions are
the hot path, each a handful of attribute reads on the clock (no call through
another layer)."""

from __future__ import annotations

import time
from collections.abc import Callable

from ctmon.agent.optimizer_count import optimizer_step_count
from ctmon.agent.steps import RANK_COMPILED, RANK_OPTIMIZER, StepClock, always_alive, liveness

_now = time.perf_counter_ns


def optimizer_hook(clock: StepClock) -> Callable[[object, object, object], None]:
    """The global optimizer step post-hook.

    While a compiled call that may step an optimizer runs (a compiled
    function or ``opt.step``, not a module's forward), the hook is out of
    PyTorch's hook dict (``call_hook``), so Dynamo, tracing a compiled
    ``opt.step``, sees the dict the plain program has. Should it trace the hook anyway (code
    compiled outside ``torch.compile``), ``is_dynamo_compiling()`` comes first
    and is a closure cell, not an attribute of ours: Dynamo folds it to
    True and the hook vanishes -- no graph break, no guard on our state.
    The first optimizer that steps is the clock, until it is gone.
    """
    is_compiling = clock.is_compiling
    mark = clock.mark
    now = _now

    def optimizer_step_post_hook(optimizer: object, args: object, kwargs: object) -> None:
        if is_compiling():
            return
        if clock._counting_opt is optimizer:
            # mark's counting stretch, in as little code as it takes:
            # cold, each line of it costs (benchmarks/hook_calls.py cold)
            clock._counted += 1
            clock._counted_at = now()
            return
        if clock.depth or clock.rank > RANK_OPTIMIZER:
            return  # a compiled call in progress marks its own boundary
        key = id(optimizer)
        if clock._opt_key != key:
            if clock._opt_key is not None and clock._opt_ref() is not None:
                return  # a second optimizer (a GAN's) would double the count
            clock._opt_key, clock._opt_ref = key, liveness(optimizer)
            mark(RANK_OPTIMIZER)
            # the clock's optimizer, at its first step here: its own count
            # numbers the steps (a resumed run's goes on from its checkpoint's)
            count = optimizer_step_count(optimizer)
            if count is not None:
                clock.number(RANK_OPTIMIZER, count)
            return
        mark(RANK_OPTIMIZER)

    return optimizer_step_post_hook


def call_hook(
    clock: StepClock,
    key: int,
    rank: int = RANK_COMPILED,
    hands_off: bool = True,
    owner: list[Callable[[], Callable[[], None]]] | None = None,
    ref: Callable[[], object] = always_alive,
) -> Callable[[], Callable[[], None]]:
    """An enter hook for one compiled callable: counts its top-level calls.

    PyTorch's own wrapper around a compiled callable runs a context's
    ``enter_exit_hooks`` before each call and the cleanups they return after
    it, in eager Python. A hook there adds no frame to the call's stack, and
    Dynamo never traces it (a compiled callable called from traced code is
    inlined past the wrapper). ``rank`` is RANK_OPTIMIZER for a compiled
    ``optimizer.step`` (then ``key`` is the optimizer's id), else
    RANK_COMPILED: the first callable called at top level is the clock.

    With ``hands_off``, for the call's duration the global optimizer hook
    is out of torch's dict: an optimizer step inside the call is part of
    the call (one boundary), and Dynamo tracing ``opt.step`` sees no hook
    of ours, so it compiles what the plain program compiles (a folded hook
    would still leave a guarded empty graph where the plain run has none).
    A compiled module's forward steps no optimizer, so its calls skip the
    hand-off (two dict operations on data the step has long evicted from
    the caches: most of the hook's cost, benchmarks/hook_cost.py), and
    once a higher-ranked source is the clock the hook has nothing left to
    do: after that call it takes itself out of ``owner`` (the enter-hook
    list it was added to; source ranks never go down).
    """
    mark = clock.mark

    def retire() -> None:
        try:
            if owner is not None and enter in owner:
                owner.remove(enter)
        except Exception:
            pass

    def leave() -> None:
        clock.depth = 0
        hooks = clock._hooks
        if hands_off and hooks is not None and clock._hook_fn is not None:
            hooks[clock._hook_id] = clock._hook_fn

    def enter() -> Callable[[], None]:
        if clock.depth:
            return _nothing  # nested in another compiled call
        if not hands_off and clock.rank > rank:
            return retire  # the clock is elsewhere and this call steps no optimizer
        try:
            clock.depth = 1
            hooks = clock._hooks
            if hands_off and hooks is not None:
                hooks.pop(clock._hook_id, None)
            if clock.rank > rank:
                return leave
            first = False
            if rank == RANK_OPTIMIZER:
                if clock._opt_key != key:
                    if clock._opt_key is not None and clock._opt_ref() is not None:
                        return leave
                    clock._opt_key, clock._opt_ref = key, ref
                    first = True
            elif clock._call_key != key:
                if clock._call_key is not None and clock._call_ref() is not None:
                    return leave  # not the loop's model
                clock._call_key, clock._call_ref = key, ref
            mark(rank)
            if first:
                # before its step: the step this boundary ends is the one after its count
                count = optimizer_step_count(ref())
                if count is not None:
                    clock.number(RANK_OPTIMIZER, count + 1)
            gen = clock.generation
            if rank == RANK_COMPILED and gen is not None and gen.armed:
                gen.on_call(clock.count - 1, _now())
        except Exception:
            pass  # the user's call must go ahead regardless
        return leave

    return enter


def _nothing() -> None:
    return None
