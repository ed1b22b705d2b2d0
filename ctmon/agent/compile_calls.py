"""The job's calls of ``torch.compile``: what was compiled, from where, how.

Read while ``torch.compile`` itself runs (it is called a handful of times in a
job, never per step). A run whose job called ``torch.compile`` and never
compiled anything -- ``torch.compile(model).generate()`` runs the original
module -- is silent in PyTorch's own trace; this event lets ctmon say so.
"""

from __future__ import annotations

import linecache
import os
import sys
import time
from collections.abc import Callable
from types import FrameType, FunctionType, MethodType, ModuleType
from typing import Any

from ctmon.agent.paths import is_own_file, is_user_file
from ctmon.wire import protocol


def compile_call_event(torch: ModuleType, model: object, kwargs: dict[str, object]) -> protocol.Event:
    target, where = _target(model)
    ev: protocol.Event = {"kind": protocol.COMPILE_CALL, "t": time.time(), "target": target, "target_module": where}
    # torch.compile(DDP(model)) or DDP(model).compile() (its bound _call_impl):
    # what DDP runs decides what Dynamo can compile
    inner = _wrapped(getattr(model, "__self__", model))
    if inner is not None:
        ev["wraps"], ev["wraps_module"] = inner
    ev.update(_entry(model))
    bases = _library_bases(model)
    if bases:
        ev["bases"] = bases
    file, line, mine, via = _caller()
    if file is not None:
        ev["file"], ev["line"] = file, line
    if mine is not None:  # a library called torch.compile (generate()'s own compile): the user's line into it
        ev["called_from"] = mine
    if via:
        ev["via"] = via
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
        # torch.compile returns the function unchanged for either switch: the config's (TORCH_COMPILE_DISABLE=1
        # sets it) or TORCHDYNAMO_DISABLE=1, which torch reads from the environment at each call instead
        ev["dynamo_disabled"] = disabled or os.environ.get("TORCHDYNAMO_DISABLE", "") == "1"
    return ev


def _target(model: object) -> tuple[str, str | None]:
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


def _wrapped(model: object) -> tuple[str, str | None] | None:
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


def _name(backend: object) -> str:
    return str(getattr(backend, "__name__", None) or type(backend).__name__)


def _caller() -> tuple[str | None, int | None, dict[str, object] | None, list[str]]:
    """The first frame outside ctmon, torch and the standard library: the
    line that called torch.compile (a decorator's line for ``@torch.compile``);
    when that is a library's, also the user's own line that led there, and
    the library functions in between (``transformers:Trainer.train``): who
    made the call decides which lever the user has over it."""
    f: FrameType | None = sys._getframe(2)
    while f is not None and not is_user_file(f.f_code.co_filename):
        f = f.f_back
    if f is None:
        return None, None, None, []
    file, line = f.f_code.co_filename, f.f_lineno
    via: list[str] = []
    while f is not None and not is_own_file(f.f_code.co_filename):
        name = _library_frame(f)
        if name is not None and len(via) < MAX_VIA and (not via or via[-1] != name):
            via.append(name)
        f = f.f_back
    if f is None or f.f_code.co_filename == file:
        return file, line, None, via
    own = f.f_code.co_filename
    mine = {"file": own, "line": f.f_lineno, "name": f.f_code.co_name}
    code = linecache.getline(own, f.f_lineno).strip()
    if code:
        mine["code"] = protocol.clip(code, 300)
    return file, line, mine, via


MAX_VIA = 12
_PACKAGE_DIRS = ("site-packages", "dist-packages")


def _library_frame(f: FrameType) -> str | None:
    """``accelerate:Accelerator.prepare_model``: an installed package's
    function (torch's and the standard library's are left out)."""
    path = f.f_code.co_filename
    if not is_user_file(path):
        return None
    parts = os.path.normpath(path).split(os.sep)
    at = max((i for i, p in enumerate(parts) if p in _PACKAGE_DIRS), default=-1)
    if at < 0 or at + 1 >= len(parts):
        return None
    package = parts[at + 1].removesuffix(".py")
    qualname = getattr(f.f_code, "co_qualname", f.f_code.co_name)  # Python 3.11+
    return f"{package}:{qualname}"[:200]


def _entry(model: object) -> dict[str, object]:
    """The code a call of the compiled object runs first, and its parameter
    names as a caller passes them (``self`` left out): with the user's
    calling line, the guard on ``idx`` in ``forward(self, idx, targets)``
    is the ``x`` of ``cmodel(x, y)``. Read from code objects only, so no
    module's ``__getattr__`` runs."""
    func: Any = None
    bound = False
    if isinstance(model, MethodType) and model.__name__ in _MODULE_CALLS:
        model = model.__self__  # module.compile(): the module's own call
    if isinstance(model, MethodType):
        func, bound = model.__func__, True
    elif isinstance(model, FunctionType):
        func = model
    else:
        inner = _innermost(model)
        func = getattr(type(inner), "forward", None) if inner is not None else None
        bound = True
    for _ in range(8):  # a decorated forward (transformers' @can_return_tuple): the function it wraps
        inner = getattr(func, "__wrapped__", None) if isinstance(func, FunctionType) else None
        if not isinstance(inner, FunctionType):
            break
        func = inner
    code = getattr(func, "__code__", None)
    if code is None:
        return {}
    names = list(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    if bound:
        names = names[1:]
    return {
        "params": [n[:100] for n in names[:MAX_PARAMS]],
        "code_file": protocol.clip(code.co_filename, 500),
        "code_line": code.co_firstlineno,
        "code_name": protocol.clip(code.co_name, 200),
    }


MAX_PARAMS = 32
_MODULE_CALLS = ("_call_impl", "_wrapped_call_impl")


def _innermost(model: object) -> Any:
    """The module a (possibly wrapped) module runs: ``m`` of ``DDP(compiled(m))``;
    None for what is not a module. Submodules are read from ``_modules``, so
    no wrapper's ``__getattr__`` runs."""
    modules = getattr(model, "__dict__", {}).get("_modules")
    if not isinstance(modules, dict):
        return None
    for _ in range(4):  # DDP(FSDP(compiled(m))) at most, in practice
        key = _WRAPPERS.get(type(model).__name__)
        if key is None or not str(type(model).__module__).startswith("torch."):
            break
        inner = modules.get(key)
        modules = getattr(inner, "__dict__", {}).get("_modules")
        if not isinstance(modules, dict):
            break
        model = inner
    return model


def _library_bases(model: object) -> list[str]:
    """The library classes a compiled module (or a method's owner) derives
    from, nearest first (``lightning.pytorch.core.module.LightningModule``):
    a LightningModule's steps are called by Lightning's loop, not the user."""
    owner = model.__self__ if isinstance(model, MethodType) else model
    if isinstance(owner, (FunctionType, type)) or owner is None:
        return []
    owner = _innermost(owner) or owner
    out = []
    for cls in type(owner).__mro__[1:]:
        where = str(getattr(cls, "__module__", ""))
        if where == "builtins" or where == "torch" or where.startswith("torch."):
            continue
        out.append(f"{where}.{cls.__qualname__}"[:200])
        if len(out) >= MAX_BASES:
            break
    return out


MAX_BASES = 8


def with_calling_line(attribute: Callable[[], dict[str, object] | None]) -> Callable[[], dict[str, object] | None]:
    """``attribute`` (what a compile start is attributed to), plus the
    user's line that called the compiled code, as ``caller``. PyTorch's own
    stack of a compile start leaves that line out when a function (not a
    module) was compiled; the live stack, read on the compiling thread as the
    compile starts, still holds it: ``step(batch, i)`` calling
    ``training_step(self, batch, batch_idx)``."""

    def attributed() -> dict[str, object] | None:
        info = attribute()
        line = calling_line()
        if line is None:
            return info
        return {**(info or {}), "caller": line}

    return attributed


MAX_STACK = 200


def calling_line() -> dict[str, object] | None:
    """The innermost frame of the user's own code on the live stack, with
    its text: where a compile starts, the line that called the compiled code
    (the compiled frame itself is not on the stack yet)."""
    f: FrameType | None = sys._getframe(1)
    depth = 0
    while f is not None and depth < MAX_STACK and not is_own_file(f.f_code.co_filename):
        f = f.f_back
        depth += 1
    if f is None or depth >= MAX_STACK:
        return None
    out: dict[str, object] = {"file": f.f_code.co_filename, "line": f.f_lineno, "name": f.f_code.co_name}
    code = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    if code:
        out["code"] = protocol.clip(code, 300)
    return out
