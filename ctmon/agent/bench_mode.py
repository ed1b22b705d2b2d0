"""The mode ``ctmon bench`` runs the job's script in (``CTMON_COMPILE_MODE``).

The user's script is not changed: the agent puts the mode into each
``torch.compile`` call as it is made, and for ``eager`` turns compilation off
through PyTorch's own switch, ``torch.compiler.set_stance("force_eager")``
(compiled callables then run their original code; calls and steps are still
seen). A mode is an Inductor setting: a call with another backend, or with
``options=`` (which PyTorch does not accept together with ``mode=``), keeps
what it asked for, and the agent says so.
"""

from __future__ import annotations

import os
from typing import Any

ENV = "CTMON_COMPILE_MODE"
EAGER = "eager"


def forced_mode() -> str | None:
    return os.environ.get(ENV) or None


def with_mode(kwargs: dict[str, Any], mode: str) -> tuple[dict[str, Any], str | None]:
    """``kwargs`` of a torch.compile call with ``mode`` put in, or as they
    were with the reason the mode does not apply."""
    backend = kwargs.get("backend", "inductor")
    if backend != "inductor":
        name = backend if isinstance(backend, str) else getattr(backend, "__name__", type(backend).__name__)
        return kwargs, f"a torch.compile call with backend={name!s:.80} keeps it: modes apply to Inductor only"
    if kwargs.get("options"):
        return kwargs, "a torch.compile call with options= keeps them: PyTorch takes options or a mode, not both"
    return {**kwargs, "mode": mode}, None


def force_eager(torch: Any) -> str:
    """Turn compilation off for the whole process; what was done, for a note."""
    compiler = getattr(torch, "compiler", None)
    set_stance = getattr(compiler, "set_stance", None)
    if set_stance is None:  # torch < 2.6
        torch._dynamo.config.disable = True
        return "ctmon bench: eager (torch._dynamo.config.disable = True; this torch has no set_stance)"
    set_stance("force_eager")
    return "ctmon bench: eager (torch.compiler.set_stance('force_eager'))"
