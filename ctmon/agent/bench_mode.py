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

import ast
import os
import sys
from types import ModuleType
from typing import Any

ENV = "CTMON_COMPILE_MODE"
TRY_ENV = "CTMON_COMPILE_TRY"  # ``ctmon bench --try NAME=VALUE``: one change, proved on the user's script
EAGER = "eager"
COMPILE_ARGS = ("fullgraph", "dynamic", "backend", "mode", "options", "disable")
CONFIG_PREFIXES = ("torch._dynamo.config.", "torch._inductor.config.", "torch._functorch.config.")


def parse_try(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` as (name, value): a torch.compile argument or a
    Dynamo/Inductor config setting, the value a Python literal; ValueError
    with what is wrong."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ValueError(f"{text!r} is not NAME=VALUE")
    if name not in COMPILE_ARGS and not (name.startswith(CONFIG_PREFIXES) and name.count(".") >= 3):
        raise ValueError(
            f"{name!r} is neither a torch.compile argument ({', '.join(COMPILE_ARGS)}) nor torch.X.config.Y"
        )
    try:
        return name, ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        raise ValueError(f"{value.strip()!r} is not a Python literal (True, 8, 'reduce-overhead', ...)") from None


def with_try(kwargs: dict[str, object]) -> tuple[dict[str, object], str | None]:
    """``kwargs`` with bench's ``--try`` change applied (a config setting is
    set on the imported torch module), and what was done."""
    text = os.environ.get(TRY_ENV)
    if not text:
        return kwargs, None
    try:
        name, value = parse_try(text)
    except ValueError as e:  # never the job's failure: its call goes on unchanged
        return kwargs, f"could not try {text!s:.80}: {e}"
    if name in COMPILE_ARGS:
        return {**kwargs, name: value}, f"tried: torch.compile(..., {name}={value!r})"
    module, _, attr = name.rpartition(".")
    target: Any = sys.modules.get("torch")  # the job's torch, imported: the agent imports none
    for part in module.split(".")[1:]:
        target = getattr(target, part, None)
    if target is None or not hasattr(target, attr):
        return kwargs, f"could not try {name}: this torch has no such setting"
    try:
        setattr(target, attr, value)
    except Exception as e:  # a config that refuses the value: said, the job goes on
        return kwargs, f"could not try {name} = {value!r}: {e!s:.120}"
    return kwargs, f"tried: {name} = {value!r}"


def forced_mode() -> str | None:
    return os.environ.get(ENV) or None


def with_mode(kwargs: dict[str, object], mode: str) -> tuple[dict[str, object], str | None]:
    """``kwargs`` of a torch.compile call with ``mode`` put in, or as they
    were with the reason the mode does not apply; bench's ``--try`` change
    applied too (said in place of the mode's reason)."""
    kwargs, tried = with_try(kwargs)
    kwargs, why = _with_mode(kwargs, mode)
    return kwargs, tried or why


def _with_mode(kwargs: dict[str, object], mode: str) -> tuple[dict[str, object], str | None]:
    backend = kwargs.get("backend", "inductor")
    if backend != "inductor":
        name = backend if isinstance(backend, str) else getattr(backend, "__name__", type(backend).__name__)
        return kwargs, f"a torch.compile call with backend={name!s:.80} keeps it: modes apply to Inductor only"
    if kwargs.get("options"):
        return kwargs, "a torch.compile call with options= keeps them: PyTorch takes options or a mode, not both"
    if os.environ.get(TRY_ENV, "").partition("=")[0].strip() == "mode":
        return kwargs, None  # the tried mode wins
    return {**kwargs, "mode": mode}, None


def force_eager(torch: ModuleType) -> str:
    """Turn compilation off for the whole process; what was done, for a note."""
    compiler = getattr(torch, "compiler", None)
    set_stance = getattr(compiler, "set_stance", None)
    if set_stance is None:  # torch < 2.6
        torch._dynamo.config.disable = True
        return "ctmon bench: eager (torch._dynamo.config.disable = True; this torch has no set_stance)"
    set_stance("force_eager")
    return "ctmon bench: eager (torch.compiler.set_stance('force_eager'))"
