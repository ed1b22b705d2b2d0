"""The job's calls of ``torch.compile``: what was compiled, from where, how.

Read while ``torch.compile`` itself runs (it is called a handful of times in a
job, never per step). A run whose job called ``torch.compile`` and never
compiled anything -- ``torch.compile(model).generate()`` runs the original
module -- is silent in PyTorch's own trace; this event lets ctmon say so.
"""

from __future__ import annotations

import linecache
import sys
import time
from types import FrameType
from typing import Any

from ctmon.agent.paths import is_own_file, is_user_file
from ctmon.wire import protocol


def compile_call_event(torch: Any, model: Any, kwargs: dict[str, Any]) -> protocol.Event:
    target, where = _target(model)
    ev: protocol.Event = {"kind": protocol.COMPILE_CALL, "t": time.time(), "target": target, "target_module": where}
    # torch.compile(DDP(model)) or DDP(model).compile() (its bound _call_impl):
    # what DDP runs decides what Dynamo can compile
    inner = _wrapped(getattr(model, "__self__", model))
    if inner is not None:
        ev["wraps"], ev["wraps_module"] = inner
    file, line, mine = _caller()
    if file is not None:
        ev["file"], ev["line"] = file, line
    if mine is not None:  # a library called torch.compile (generate()'s own compile): the user's line into it
        ev["called_from"] = mine
    backend = kwargs.get("backend", "inductor")
    ev["backend"] = protocol.clip(backend if isinstance(backend, str) else _name(backend), 200)
    mode = kwargs.get("mode")
    if isinstance(mode, str):
        ev["mode"] = protocol.clip(mode, 100)
    dynamic = kwargs.get("dynamic")
    if isinstance(dynamic, bool):
        ev["dynamic"] = dynamic
    ev["fullgraph"] = bool(kwargs.get("fullgraph", False))
    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    disabled = getattr(config, "disable", None)
    if isinstance(disabled, bool):
        ev["dynamo_disabled"] = disabled
    return ev


def _target(model: Any) -> tuple[str, str | None]:
    """``GPT2LMHeadModel`` for a module, ``Model.forward`` for a bound
    method, ``train_step`` for a function; and the module defining it."""
    owner = getattr(model, "__self__", None)
    name = getattr(model, "__name__", None)
    if owner is not None and isinstance(name, str):
        return protocol.clip(f"{type(owner).__name__}.{name}", 200) or "?", type(owner).__module__
    if isinstance(name, str):
        return protocol.clip(getattr(model, "__qualname__", name), 200) or "?", getattr(model, "__module__", None)
    return protocol.clip(type(model).__name__, 200) or "?", type(model).__module__


# PyTorch's module wrappers, and where each keeps the module it runs (a
# submodule, read from ``_modules`` so no wrapper's ``__getattr__`` runs)
_WRAPPERS = {
    "DistributedDataParallel": "module",
    "DataParallel": "module",
    "FullyShardedDataParallel": "_fsdp_wrapped_module",
    "OptimizedModule": "_orig_mod",
}


def _wrapped(model: Any) -> tuple[str, str | None] | None:
    """``('Sequential', 'torch.nn.modules.container')`` for ``DDP(Sequential(...))``:
    the class (and its module) of the module a PyTorch wrapper runs, through
    nested wrappers (``DDP(torch.compile(m))``); None for anything else."""
    inner = None
    for _ in range(4):  # DDP(FSDP(compiled(m))) at most, in practice
        kind = type(model)
        key = _WRAPPERS.get(kind.__name__)
        modules = getattr(model, "_modules", None)
        if key is None or not str(kind.__module__).startswith("torch.") or not isinstance(modules, dict):
            break
        model = modules.get(key)
        if model is None:
            break
        inner = model
    if inner is None:
        return None
    return protocol.clip(type(inner).__name__, 200) or "?", protocol.clip(type(inner).__module__, 200)


def _name(backend: Any) -> str:
    return str(getattr(backend, "__name__", None) or type(backend).__name__)


def _caller() -> tuple[str | None, int | None, dict[str, Any] | None]:
    """The first frame outside ctmon, torch and the standard library: the
    line that called torch.compile (a decorator's line for ``@torch.compile``);
    when that is a library's, also the user's own line that led there."""
    f: FrameType | None = sys._getframe(2)
    while f is not None and not is_user_file(f.f_code.co_filename):
        f = f.f_back
    if f is None:
        return None, None, None
    file, line = f.f_code.co_filename, f.f_lineno
    while f is not None and not is_own_file(f.f_code.co_filename):
        f = f.f_back
    if f is None or f.f_code.co_filename == file:
        return file, line, None
    own = f.f_code.co_filename
    mine = {"file": own, "line": f.f_lineno, "name": f.f_code.co_name}
    code = linecache.getline(own, f.f_lineno).strip()
    if code:
        mine["code"] = protocol.clip(code, 300)
    return file, line, mine
