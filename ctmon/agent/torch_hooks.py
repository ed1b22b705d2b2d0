"""What the agent installs once the job imports torch.

* a handler on PyTorch's structured-trace logger (compile events);
* a global optimizer step post-hook (step boundaries);
* a thin wrapper around the call of ``torch.compile``, which puts a hook in
  PyTorch's per-call enter hooks of what it returns, to count calls of a
  compiled callable at top level (inference loops, compiled optimizer steps);
* a probe that starts device-side step timing once the job initialises CUDA
  (ctmon never initialises CUDA itself: that would cost the job memory and
  break fork-based DataLoader workers).

Installation waits for the job's own ``import torch`` through a meta-path
hook, so ctmon adds nothing to start-up and runs fine for scripts without
torch. Importing ``torch._dynamo`` costs seconds, so it is never imported
here; what needs it is done when the job's first ``torch.compile`` call has
imported it anyway.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from ctmon.agent import bench_mode
from ctmon.agent.compile_calls import compile_call_event, with_calling_line
from ctmon.agent.core import Agent
from ctmon.agent.cudagraphs import TREES as CUDAGRAPH_TREES
from ctmon.agent.cudagraphs import CudagraphObserver
from ctmon.agent.cudagraphs import install as observe_cudagraph_trees
from ctmon.agent.device_timer import DeviceTimer
from ctmon.agent.graph_calls import GraphCalls
from ctmon.agent.hotness import HotnessSampler
from ctmon.agent.library_log import LOGGING_MODULE
from ctmon.agent.library_log import attach as attach_library_log
from ctmon.agent.step_hooks import call_hook, optimizer_hook
from ctmon.agent.steps import RANK_OPTIMIZER, liveness
from ctmon.agent.trace import TraceHandler, TraceWatch, attach_first, attribute_module
from ctmon.wire import protocol

TRACE_LOGGER = "torch.__trace"


class ImportWatcher(importlib.abc.MetaPathFinder):
    """Calls back right after a watched module has executed, before whoever
    imported it sees it (so a wrapped function is what ``from m import f`` binds)."""

    def __init__(self, callbacks: dict[str, Callable[[ModuleType], None]]) -> None:
        self._callbacks = dict(callbacks)
        self._busy: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        callback = self._callbacks.get(fullname)
        if callback is None or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        except (ImportError, ValueError):
            spec = None
        finally:
            self._busy.discard(fullname)
        del self._callbacks[fullname]
        if not self._callbacks:
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            callback(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def watch_torch_import(agent: Agent) -> None:
    def on_import(torch: ModuleType) -> None:
        try:
            install(agent, torch)
        except Exception as exc:  # the job's import of torch must succeed regardless
            agent.emit(note("warning", f"ctmon could not hook torch: {type(exc).__name__}: {exc}"))

    def on_cudagraph_utils(module: ModuleType) -> None:
        try:
            hook_cudagraph_skips(agent, module)
        except Exception:
            pass

    def on_cudagraph_trees(module: ModuleType) -> None:
        try:
            hook_cudagraph_trees(agent, module)
        except Exception:
            pass

    def on_generation_utils(module: ModuleType) -> None:
        try:
            agent.generation.arm(module)
        except Exception:
            pass

    def on_library_logging(module: ModuleType) -> None:
        try:
            attach_library_log(lambda ev: agent.emit(ev, urgent=False))
        except Exception:
            pass

    callbacks: dict[str, Callable[[ModuleType], None]] = {}
    if LIBRARY_LOGGING in sys.modules:
        on_library_logging(sys.modules[LIBRARY_LOGGING])
    else:
        callbacks[LIBRARY_LOGGING] = on_library_logging
    if GENERATION_UTILS in sys.modules:
        on_generation_utils(sys.modules[GENERATION_UTILS])
    else:
        callbacks[GENERATION_UTILS] = on_generation_utils
    if "torch" in sys.modules:
        on_import(sys.modules["torch"])
    else:
        callbacks["torch"] = on_import
    if CUDAGRAPH_UTILS in sys.modules:
        on_cudagraph_utils(sys.modules[CUDAGRAPH_UTILS])
    else:
        callbacks[CUDAGRAPH_UTILS] = on_cudagraph_utils
    if CUDAGRAPH_TREES in sys.modules:
        on_cudagraph_trees(sys.modules[CUDAGRAPH_TREES])
    else:
        callbacks[CUDAGRAPH_TREES] = on_cudagraph_trees
    if callbacks:
        sys.meta_path.insert(0, ImportWatcher(callbacks))


CUDAGRAPH_UTILS = "torch._inductor.cudagraph_utils"
GENERATION_UTILS = "transformers.generation.utils"  # GenerationMixin.generate
LIBRARY_LOGGING = LOGGING_MODULE  # transformers' logging set-up: its warnings, with their lines


def hook_cudagraph_skips(agent: Agent, module: ModuleType) -> None:
    """Report every graph that mode="reduce-overhead" could not capture.

    PyTorch decides this when a compiled graph first runs -- after its compile
    metrics are closed -- and only logs it (a warning on an artifact logger
    that is off by default) and bumps a counter. Wrapping the one function
    that does both catches every skip with PyTorch's own reason.
    """
    original = getattr(module, "log_cudagraph_skip_and_bump_counter", None)
    if original is None or getattr(original, "__ctmon_wrapped__", None) is not None:
        return

    @functools.wraps(original)
    def log_cudagraph_skip_and_bump_counter(msg: str, *args: Any, **kwargs: Any) -> Any:
        if not agent.channel.disabled:
            agent.emit(
                {"kind": protocol.CUDAGRAPH, "t": time.time(), "event": "skip", "reason": protocol.clip(msg, 2000)}
            )
        return original(msg, *args, **kwargs)

    log_cudagraph_skip_and_bump_counter.__ctmon_wrapped__ = original  # type: ignore[attr-defined]
    module.log_cudagraph_skip_and_bump_counter = log_cudagraph_skip_and_bump_counter  # type: ignore[attr-defined]


def hook_cudagraph_trees(agent: Agent, module: ModuleType) -> None:
    """Follow mode="reduce-overhead"'s warm-ups, recordings and replays
    (ctmon/agent/cudagraphs.py); their counts are sent now and then and at exit."""
    obs = CudagraphObserver(lambda ev: agent.emit(ev, urgent=False), lambda: agent.channel.disabled)
    if observe_cudagraph_trees(module, obs):
        agent._periodic_hooks.append(obs.counts)
        agent.final_hooks.append(obs.final)


def note(level: str, message: str) -> protocol.Event:
    return {"kind": protocol.NOTE, "t": time.time(), "level": level, "source": "agent", "message": message}


def install(agent: Agent, torch: ModuleType) -> None:
    if agent.torch_installed:
        return
    agent.torch_installed = True
    ch, clock = agent.channel, agent.clock

    # where step time goes per compiled region: its graphs' calls timed, the
    # main thread sampled (CTMON_HOTNESS=0: off)
    hot = os.environ.get("CTMON_HOTNESS", "1") != "0"
    graphs = GraphCalls() if hot else None
    if graphs is not None:
        clock.each_second = graphs.on_second  # the graphs' timing windows, on the job's thread
        agent.generation.graphs = graphs  # a generate() that calls none of them runs eager
        agent._periodic_hooks.append(agent.generation.poll)

    # 1. compile events
    trace_log = logging.getLogger(TRACE_LOGGER)
    attribute = with_calling_line(attribute_module)  # and the user's line that called the compiled code
    handler = TraceHandler(ch, attribute, graphs.on_compile_end if graphs is not None else None)
    attach_first(trace_log, handler)
    if trace_log.level == logging.NOTSET or trace_log.level > logging.DEBUG:
        trace_log.setLevel(logging.DEBUG)
    # the job's own logging set-up may switch it off later: put it back, say so
    agent._periodic_hooks.append(TraceWatch(trace_log, handler))

    # 2. optimizer steps
    from torch.optim.optimizer import register_optimizer_step_post_hook

    # Dynamo folds either to True; is_dynamo_compiling costs a third as much.
    compiler = getattr(torch, "compiler", None)
    is_compiling = getattr(compiler, "is_dynamo_compiling", None) or getattr(compiler, "is_compiling", None)
    if is_compiling is None:
        is_compiling = lambda: False  # noqa: E731 - torch < 2.3
    clock.is_compiling = is_compiling
    agent.optimizer_hook = register_optimizer_step_post_hook(optimizer_hook(clock))
    clock.set_global_hook(agent.optimizer_hook.hooks_dict_ref(), agent.optimizer_hook.id)

    # 3. compiled callables, for loops without an optimizer
    _wrap_torch_compile(agent, torch)

    # 3b. the sampler, which also sends the graphs' calls and times
    if hot:
        sampler = HotnessSampler(lambda: clock.count, graphs)
        ch.tick = sampler.tick
        agent._periodic_hooks.append(sampler.periodic)
        agent.final_hooks.append(sampler.final)

    # 4. device-true step times, once the job has initialised CUDA itself
    cuda = getattr(torch, "cuda", None)

    def probe_device() -> DeviceTimer | None:
        if cuda is None or not cuda.is_initialized():
            return None
        agent.emit(devices_event(torch))
        return DeviceTimer(ch, lambda: cuda.Event(enable_timing=True))

    clock.probe_device = probe_device
    # Built on the sender thread: it reads package metadata and the cache dir.
    ch.put(("call", lambda: [torch_event(torch)]), True)


def _wrap_torch_compile(agent: Agent, torch: Any) -> None:
    """Wrap the *call* of torch.compile: it runs before any compile and leaves
    no frame behind. What it returned gets a hook in PyTorch's own per-call
    enter hooks (step_hooks.call_hook); nothing else is wrapped."""
    original = torch.compile
    if getattr(original, "__ctmon_wrapped__", None) is not None:
        return
    clock = agent.clock
    warned: list[bool] = []
    mode = bench_mode.forced_mode()  # ctmon bench's run of this script in one mode
    if mode == bench_mode.EAGER:
        try:
            agent.emit(note("info", bench_mode.force_eager(torch)))
        except Exception as e:  # an older torch: the run says what it could not do
            agent.emit(note("error", f"ctmon bench: could not turn compilation off: {e!s:.200}"))
        mode = None
    said: set[str] = set()

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 - mirrors torch.compile
        if mode is not None:
            kwargs, why = bench_mode.with_mode(kwargs, mode)
            if why is not None and why not in said:
                said.add(why)
                agent.emit(note("warning", f"ctmon bench ({mode}): {why}"))
        result = original(*args, **kwargs)
        try:
            model = args[0] if args else kwargs.get("model")
            if model is None or kwargs.get("disable"):
                # Decorator factory: its inner call goes through torch.compile
                # (this function) again, with the model.
                return result
            agent.emit(compile_call_event(torch, model, kwargs))
            hooks = dynamo_enter_hooks(result)
            if hooks is None:
                if not warned:
                    warned.append(True)
                    agent.emit(
                        note(
                            "warning",
                            "ctmon cannot count calls of compiled callables with this torch "
                            "version; steps come from optimizer.step() and ctmon.step() only",
                        )
                    )
                return result
            owner = getattr(model, "__self__", None)
            if getattr(model, "__name__", "") == "step" and isinstance(owner, torch.optim.Optimizer):
                hooks.append(call_hook(clock, id(owner), RANK_OPTIMIZER, ref=liveness(owner)))
            else:
                # A module's forward steps no optimizer: its calls need not hand
                # the optimizer hook off (step_hooks.call_hook).
                module = isinstance(model, torch.nn.Module)
                hooks.append(
                    call_hook(
                        clock, id(result), hands_off=not module, owner=hooks if module else None, ref=liveness(result)
                    )
                )
        except Exception:
            pass
        return result

    compile.__ctmon_wrapped__ = original  # type: ignore[attr-defined]
    torch.compile = compile


def dynamo_enter_hooks(compiled: Any) -> list[Any] | None:
    """The per-call enter hooks of what torch.compile returned: an
    OptimizedModule keeps its Dynamo context as ``dynamo_ctx``; a compiled
    function is PyTorch's wrapper closure over that context."""
    ctx = getattr(compiled, "__dict__", {}).get("dynamo_ctx")
    if ctx is None:
        for cell in getattr(compiled, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(getattr(value, "enter_exit_hooks", None), list) and hasattr(value, "callback"):
                ctx = value
                break
    hooks = getattr(ctx, "enter_exit_hooks", None)
    return hooks if isinstance(hooks, list) else None


def torch_event(torch: ModuleType) -> protocol.Event:
    ev: protocol.Event = {"kind": protocol.TORCH, "t": time.time(), "torch": str(getattr(torch, "__version__", "?"))}
    version = getattr(torch, "version", None)
    ev["cuda"] = getattr(version, "cuda", None)
    ev["hip"] = getattr(version, "hip", None)
    triton = sys.modules.get("triton")
    tv = getattr(triton, "__version__", None)
    if tv is None:
        try:
            from importlib.metadata import version as pkg_version

            tv = pkg_version("triton")
        except Exception:
            tv = None
    ev["triton"] = tv
    ev["cache_dir"] = inductor_cache_dir()
    ev["cache_entries"] = count_cache_entries(ev["cache_dir"])
    for var in (
        "TORCH_COMPILE_DISABLE",
        "TORCHDYNAMO_DISABLE",
        "TORCH_LOGS",
        "TORCH_TRACE",
        "TORCHINDUCTOR_FORCE_DISABLE_CACHES",
        "TORCHINDUCTOR_CACHE_DIR",
    ):
        if os.environ.get(var):
            ev.setdefault("env", {})[var] = os.environ[var][:200]
    return ev


def inductor_cache_dir() -> str:
    """Where Inductor keeps its caches (mirrors torch's own default)."""
    env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if env:
        return env
    try:
        import getpass

        user = getpass.getuser()
    except Exception:
        user = str(os.getuid())
    user = "".join(c if c.isalnum() or c in "-_." else "_" for c in user)
    return os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")


def count_cache_entries(cache_dir: str) -> dict[str, int]:
    """Entries already in the FX graph and AOTAutograd caches at start-up.

    A warm cache that then misses on every compile is worth a finding.
    """
    out: dict[str, int] = {}
    # fxgraph/<2-char prefix>/<key>/..., aotautograd/<key>/...
    for name, sub, depth in (("fx_graph", "fxgraph", 2), ("aot_autograd", "aotautograd", 1)):
        out[name] = _count_dirs(os.path.join(cache_dir, sub), depth)
    return out


def _count_dirs(path: str, depth: int) -> int:
    try:
        entries = [e for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    if depth <= 1:
        return len(entries)
    return sum(_count_dirs(e.path, depth - 1) for e in entries)


def devices_event(torch: ModuleType) -> protocol.Event:
    devs = []
    try:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            devs.append(
                {
                    "index": i,
                    "name": p.name,
                    "total_memory": int(p.total_memory),
                    "capability": f"{p.major}.{p.minor}",
                    "sms": getattr(p, "multi_processor_count", None),
                }
            )
        current = torch.cuda.current_device()
    except Exception:
        current = None
    return {
        "kind": protocol.DEVICES,
        "t": time.time(),
        "cuda": devs,
        "current": current,
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
