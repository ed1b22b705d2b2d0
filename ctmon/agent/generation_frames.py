"""What the generation watch (ctmon/agent/generation.py) reads off a frame
or a function: whether code is compiled, the user's line and name for a
model, the code a decorated function runs, and sys.monitoring's start event."""

from __future__ import annotations

import inspect
import linecache
import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from ctmon.agent.paths import is_own_file
from ctmon.wire import protocol

MAX_DEPTH = 200  # frames walked up from a compiled call
# Frames that mean compiled code runs (or is being compiled) at a look: a
# frame Dynamo replaced loads a ``__compiled_fn``; these run graphs or compile.
_COMPILED_FILES = (
    "/torch/_functorch/_aot_autograd/",
    "/torch/_inductor/",
    "/torch/fx/graph_module.py",
    "/torch/_dynamo/convert_frame.py",
    "/torch/_dynamo/symbolic_convert.py",
)


def is_compiled_code(code: CodeType) -> bool:
    f = code.co_filename
    return (
        any(n.startswith("__compiled_fn") for n in code.co_names)
        or any(p in f for p in _COMPILED_FILES)
        or "torchinductor" in f
        or f.startswith("<eval_with_key>")
    )


def user_line(frame: FrameType | None, model: object) -> tuple[dict[str, object], str | None]:
    """The first frame of the user's own code above generate(): the line
    that called it (through a Trainer or a pipeline, the user's line into
    it), and the name that frame gives the original module."""
    depth = 0
    while frame is not None and depth < MAX_DEPTH and not is_own_file(frame.f_code.co_filename):
        frame, depth = frame.f_back, depth + 1
    if frame is None or depth >= MAX_DEPTH:
        return {}, None
    file, line = frame.f_code.co_filename, frame.f_lineno
    site: dict[str, object] = {"file": file, "line": line}
    code = linecache.getline(file, line).strip()
    if code:
        site["code"] = protocol.clip(code, 300)
    return site, name_of(frame, model)


def name_of(frame: FrameType, model: object) -> str | None:
    """A name the frame binds to ``model`` itself (not to a compiled wrapper
    of it, whose ``forward`` is not the one generate() calls)."""
    for scope in (frame.f_locals, frame.f_globals):
        for name, value in list(scope.items()):
            if value is model and isinstance(name, str) and name.isidentifier():
                return protocol.clip(name, 100)
    return None


def function_code(fn: Any) -> CodeType | None:
    """The code object a (decorated) function runs: generate() is wrapped by
    ``torch.no_grad()``, whose frame is not the one that holds the locals."""
    if fn is None:
        return None
    try:
        code = getattr(inspect.unwrap(fn), "__code__", None)
    except ValueError:
        return None
    return code if isinstance(code, CodeType) else None


def monitor_starts(code: CodeType, callback: Callable[[CodeType, int], object]) -> bool:
    """sys.monitoring's PY_START on one code object (Python 3.12+)."""
    mon: Any = getattr(sys, "monitoring", None)
    if mon is None:
        return False
    for tool in (4, 3, 5):  # ids no debugger, coverage tool or profiler claims by convention
        try:
            mon.use_tool_id(tool, "ctmon")
        except ValueError:
            continue  # taken
        try:
            mon.register_callback(tool, mon.events.PY_START, callback)
            mon.set_local_events(tool, code, mon.events.PY_START)
            return True
        except Exception:
            mon.free_tool_id(tool)
            return False
    return False
