"""The agent of a job ctmon joined while it ran (``ctmon record --pid``).

ctmon/launch/join.py has a debugger schedule :func:`join` as a pending call
of the job's main thread (a safe point between two bytecodes). It starts the
same agent a launched job gets (ctmon/agent/boot.py), reads what Dynamo did
before the join into one ``joined`` event, and watches its connection: when
the supervisor shuts its side (the user left) or goes away, :func:`leave`
takes out every hook and thread the agent put in, and the job runs on as it
ran before the join.

Nothing here may raise into the job, nor print: the job's output is its own.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import time
from typing import TYPE_CHECKING, Any

from ctmon.wire import protocol

if TYPE_CHECKING:
    from ctmon.agent.channel import Channel
    from ctmon.agent.core import Agent

JOINED = "joined"
MAX_FRAMES = 200  # frames listed in the joined event; the count says how many more
MAX_COUNTER_KEYS = 50  # keys kept of each Dynamo counter group
_agent: Agent | None = None  # the joined agent, while joined: a second join finds it


def join(socket_path: str, session_dir: str, rank: int | None = None, world_size: int | None = None) -> None:
    """Start the agent in this (running) process; never raises, never prints.

    ``rank``: the rank ctmon numbered this process as, one of several plain
    processes joined as one job's ranks (a launched rank says its own)."""
    try:
        _join(socket_path, session_dir, rank, world_size)
    except BaseException:  # noqa: BLE001 - a pending call must not raise into the job
        pass


def _join(socket_path: str, session_dir: str, rank: int | None = None, world_size: int | None = None) -> None:
    from ctmon.agent import boot

    if boot.running() or _agent is not None:
        _say_already(socket_path)
        return
    trace_level = logging.getLogger("torch.__trace").level  # the agent sets it to DEBUG: put back on leaving
    agent = boot.start(socket_path=socket_path, session_dir=session_dir, joined=True)
    if agent is None:
        return
    agent.trace_level_before = trace_level
    _seed_strings(agent)
    globals()["_agent"] = agent
    if rank is not None:
        _claim_rank(agent, rank, world_size)
    agent.channel.put(("call", lambda: [joined_event()]), True)
    agent.leave_requested = _LeaveWatch(agent.channel)
    agent.on_leave = lambda: leave(agent)


def _claim_rank(agent: Agent, rank: int, world_size: int | None) -> None:
    """Say the rank ctmon gave this process, as a process that learns its
    rank after its hello does (the supervisor moves its steps to it); a
    process group it initialises later does not change it."""
    from ctmon.agent.process_event import process_event
    from ctmon.agent.rank_info import RankInfo

    hooks = agent._periodic_hooks
    if agent._rank_once_initialised in hooks:
        hooks.remove(agent._rank_once_initialised)
    agent.channel.rank = rank
    said = process_event(agent.anchor_ns, agent.anchor_wall, RankInfo(rank, world_size, None))
    agent.channel.put(("call", lambda: [said]), True)


def _seed_strings(agent: Agent) -> None:
    """PyTorch's trace names each file once, by number, the first time it
    logs it: the files it named before the join are read from its table."""
    structured = sys.modules.get("torch._logging.structured")
    table = getattr(structured, "INTERN_TABLE", None)
    if isinstance(table, dict):
        strings = agent.converter._strings
        for text, number in list(table.items()):
            if isinstance(number, int) and isinstance(text, str):
                strings.setdefault(number, text)


def _say_already(socket_path: str) -> None:
    """This process has an agent already: one note on the new connection
    says so, and nothing else is installed."""
    from ctmon.agent.channel import connect

    sock = connect(socket_path, 2.0)
    if sock is None:
        return
    try:
        sock.settimeout(2.0)
        note = {
            "kind": protocol.NOTE,
            "t": time.time(),
            "level": "error",
            "source": "join",
            "message": f"process {os.getpid()} is monitored by ctmon already",
            "already": True,
        }
        sock.sendall(protocol.encode({**_hello(), "joined": True}) + protocol.encode(note))
    except OSError:
        pass
    finally:
        sock.close()


def _hello() -> protocol.Event:
    from ctmon.agent.process_event import process_event

    return process_event(time.perf_counter_ns(), time.time())


class _LeaveWatch:
    """Whether the supervisor asked the agent to leave: it shut its side of
    the connection (or it is gone). One non-blocking peek per flush."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def __call__(self) -> bool:
        sock = self.channel._sock
        if sock is None:
            return True
        try:
            data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            return True
        return data == b""


def leave(agent: Agent) -> None:
    """Take out what the agent put into the job (on the sender thread).

    Each undo is on its own: one that fails leaves the others done."""
    globals()["_agent"] = None
    for undo in (
        _undo_api,
        _undo_trace_handler,
        _undo_optimizer_hook,
        _undo_torch_compile,
        _undo_graph_wrappers,
        _undo_import_watchers,
        _undo_exec_wrappers,
        _undo_module_wrappers,
        _undo_cudagraph_trees,
        _undo_library_log,
        _undo_monitoring,
    ):
        try:
            undo(agent)
        except Exception:
            pass
    try:
        atexit.unregister(agent.close)
    except Exception:
        pass
    agent.clock.stop()  # a compiled call under way finds no clock to mark
    from ctmon.agent import boot

    boot._started = False  # the process may be joined again


def _undo_api(agent: Agent) -> None:
    from ctmon import _api

    _api._step_impl = None


def _undo_trace_handler(agent: Agent) -> None:
    from ctmon.agent.trace import TraceHandler

    logger = logging.getLogger("torch.__trace")
    for h in list(logger.handlers):
        if isinstance(h, TraceHandler):
            logger.removeHandler(h)
    level = getattr(agent, "trace_level_before", None)
    if isinstance(level, int):
        logger.setLevel(level)


def _undo_optimizer_hook(agent: Agent) -> None:
    agent.clock.set_global_hook(None)  # a compiled call under way puts nothing back
    handle = agent.optimizer_hook
    if handle is not None:
        handle.remove()
        agent.optimizer_hook = None


def _undo_torch_compile(agent: Agent) -> None:
    torch: Any = sys.modules.get("torch")
    original = getattr(getattr(torch, "compile", None), "__ctmon_wrapped__", None)
    if torch is not None and original is not None:
        torch.compile = original


def _undo_graph_wrappers(agent: Agent) -> None:
    """Compiled graphs wrapped to count their calls get Dynamo's own back."""
    graphs = getattr(agent.clock.each_second, "__self__", None)
    agent.clock.each_second = None
    if graphs is None or not hasattr(graphs, "graphs"):
        return
    with graphs._lock:
        for g in graphs.graphs:
            held = g.scope.get(g.name)
            if held is g.timed or held is g.counted:
                g.scope[g.name] = g.counted.__wrapped__
        graphs.graphs = []
        graphs.on = False


def _undo_import_watchers(agent: Agent) -> None:
    from ctmon.agent.torch_hooks import ImportWatcher

    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, ImportWatcher)]


def _undo_exec_wrappers(agent: Agent) -> None:
    for name in ("execv", "execve"):
        fn = os.__dict__.get(name)
        if getattr(fn, "_ctmon_wrapped", False):
            os.__dict__[name] = fn.__wrapped__  # type: ignore[union-attr]


def _undo_module_wrappers(agent: Agent) -> None:
    """Functions of PyTorch's modules that the agent wrapped (the CUDA-graph skips)."""
    for module_name in ("torch._inductor.cudagraph_utils",):
        module = sys.modules.get(module_name)
        for attr, fn in list(getattr(module, "__dict__", {}).items()):
            original = getattr(fn, "__ctmon_wrapped__", None)
            if original is not None and callable(fn):
                setattr(module, attr, original)


def _undo_cudagraph_trees(agent: Agent) -> None:
    """CUDA-graph trees' manager methods the agent observes (mode="reduce-overhead")."""
    module = sys.modules.get("torch._inductor.cudagraph_trees")
    cls = getattr(module, "CUDAGraphTreeManager", None)
    for name in ("run_eager", "record_function", "execute_node"):
        original = getattr(getattr(cls, name, None), "__ctmon_wrapped__", None)
        if original is not None:
            setattr(cls, name, original)


def _undo_library_log(agent: Agent) -> None:
    from ctmon.agent.library_log import LOGGER, LibraryLog

    logger = logging.getLogger(LOGGER)
    for h in list(logger.handlers):
        if isinstance(h, LibraryLog):
            logger.removeHandler(h)


def _undo_monitoring(agent: Agent) -> None:
    """The sys.monitoring tool that times generate() (Python 3.12+, transformers)."""
    mon: Any = getattr(sys, "monitoring", None)
    generation = agent.generation
    generation.armed = False
    if mon is None:
        return
    for tool in (3, 4, 5):
        if mon.get_tool(tool) != "ctmon":
            continue
        code = generation._generate
        if code is not None:
            mon.set_local_events(tool, code, 0)
        mon.register_callback(tool, mon.events.PY_START, None)
        mon.free_tool_id(tool)


# ---------------------------------------------------------------- before the join


def joined_event() -> protocol.Event:
    """What Dynamo did in this process before ctmon joined, read from its own
    state (on the sender thread). Never an event per compile: counts and the
    frames that hold compiled code, as PyTorch keeps them."""
    before: dict[str, Any] = {}
    if "torch._dynamo" in sys.modules:  # never imported here: a job that never compiled has nothing to say
        for name, read in (
            ("frames", _compiled_frames),
            ("counters", _counters),
            ("config", _config),
            ("compile_times", _compile_times),
            ("compilations", _compilations),
        ):
            try:
                before[name] = read()
            except Exception as e:
                before.setdefault("errors", {})[name] = protocol.clip(f"{type(e).__name__}: {e}", 200)
    torch = sys.modules.get("torch")
    return {
        "kind": JOINED,
        "t": time.time(),
        "pid": os.getpid(),
        "torch": str(getattr(torch, "__version__", "")) or None,
        "dynamo": "torch._dynamo" in sys.modules,
        "before": before,
    }


def _compiled_frames() -> dict[str, object]:
    """The code objects Dynamo has compiled (its own registry of what it saw)
    and how many compiled versions (cache entries) each holds now."""
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch._dynamo.convert_frame import input_codes

    frames: list[dict[str, Any]] = []
    torch_dir = os.path.dirname(getattr(sys.modules.get("torch"), "__file__", None) or "/nonexistent") + os.sep
    for ref in list(input_codes.seen):
        code = ref()
        if code is None:
            continue
        entries = len(_debug_get_cache_entry_list(code))
        if entries:
            frame: dict[str, Any] = {
                "file": protocol.clip(code.co_filename, 500),
                "line": code.co_firstlineno,
                "name": protocol.clip(code.co_name, 200),
                "entries": entries,
            }
            if code.co_filename.startswith(torch_dir):
                # torch.compile(module) compiles torch's own wrapper around
                # the module's call: name the modules the script compiled
                frame["modules"] = _compiled_modules()
            frames.append(frame)
    frames.sort(key=lambda f: -f["entries"])
    return {"count": len(frames), "list": frames[:MAX_FRAMES]}


def _compiled_modules() -> list[str]:
    """``cmodel = Sequential``: the compiled modules the script's own globals
    hold (where a script usually keeps them), without walking the heap."""
    from torch._dynamo.eval_frame import OptimizedModule

    main = sys.modules.get("__main__")
    found = []
    for name, value in list(vars(main).items()) if main is not None else ():
        if isinstance(value, OptimizedModule):
            found.append(f"{name} = {type(value._orig_mod).__name__}"[:200])
    return found[:10]


def _counters() -> dict[str, dict[str, int]]:
    from torch._dynamo.utils import counters

    out: dict[str, dict[str, int]] = {}
    for group, counter in list(counters.items()):
        items = sorted(counter.items(), key=lambda kv: -kv[1])[:MAX_COUNTER_KEYS]
        kept = {protocol.clip(str(k), 300) or "": int(v) for k, v in items if isinstance(v, int)}
        if kept:
            out[protocol.clip(str(group), 100) or ""] = kept
    return out


def _config() -> dict[str, bool | int | float | str]:
    cfg = sys.modules["torch._dynamo.config"]
    out: dict[str, bool | int | float | str] = {}
    for name in (
        "recompile_limit",
        "accumulated_recompile_limit",
        "fail_on_recompile_limit_hit",
        "automatic_dynamic_shapes",
        "assume_static_by_default",
        "suppress_errors",
    ):
        val = getattr(cfg, name, None)
        if isinstance(val, (bool, int, float, str)):
            out[name] = val
    return out


def _compile_times() -> dict[str, float]:
    """Seconds spent in each of PyTorch's timed compile phases, summed."""
    from torch._dynamo.utils import compilation_time_metrics

    return {
        protocol.clip(str(k), 200) or "": round(float(sum(v)), 6)
        for k, v in list(compilation_time_metrics.items())[:100]
    }


def _compilations() -> dict[str, object]:
    """How many compiles PyTorch's own metrics kept, and the last one's gist."""
    from torch._dynamo import utils

    kept = list(getattr(utils, "_compilation_metrics", ()))
    out: dict[str, object] = {"kept": len(kept)}
    if kept:
        last = kept[-1]
        gist = {}
        for name in ("compile_id", "co_name", "co_filename", "co_firstlineno", "fail_reason", "recompile_reason"):
            val = getattr(last, name, None)
            if isinstance(val, (int, float, str)) and not isinstance(val, bool):
                gist[name] = protocol.clip(str(val), 500) if isinstance(val, str) else val
        out["last"] = gist
    return out
