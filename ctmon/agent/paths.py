"""Which source files are the user's.

Used to point every compile and graph break at code the user can change. Not
the user's: PyTorch itself, the standard library, ctmon, and synthetic names
such as ``<frozen runpy>`` or ``<string>``. Third-party packages (transformers,
timm, ...) count where a frame or break is located (that is where their graph
breaks live), and each such place also carries the user's *own* line that led
there (``called_from``): the innermost frame outside every installed package.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from functools import lru_cache
from typing import Any

_CTMON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _variants(d: str) -> set[str]:
    return {os.path.join(os.path.abspath(d), ""), os.path.join(os.path.realpath(d), "")}


@lru_cache(maxsize=1)
def _stdlib_dirs() -> tuple[str, ...]:
    out: set[str] = set()
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib"):
        if key in paths:
            out |= _variants(paths[key])
    return tuple(out)


_owned: tuple[str, ...] | None = None


def _owned_dirs() -> tuple[str, ...]:
    """ctmon's and torch's package directories (torch once it is imported)."""
    global _owned
    if _owned is not None:
        return _owned
    dirs = _variants(_CTMON_DIR)
    torch = sys.modules.get("torch")
    tfile = getattr(torch, "__file__", None)
    if tfile:
        dirs |= _variants(os.path.dirname(tfile))
        _owned = tuple(dirs)  # final once torch is known
    return tuple(dirs)


# PyTorch's own files by their place, for stacks read where torch is not
# imported (a trace from another machine: ctmon/read/torch_trace.py)
_TORCH_PATH = re.compile(
    r"[/\\](?:site|dist)-packages[/\\](?:torch|functorch|triton)[/\\]|[/\\]torch[/\\](?:_dynamo|_inductor|_functorch|nn[/\\]modules)[/\\]"
)


@lru_cache(maxsize=4096)
def is_user_file(path: str | None) -> bool:
    if not path or path.startswith("<"):
        return False
    full = os.path.abspath(path)
    if full.startswith(_owned_dirs()) or _TORCH_PATH.search(full):
        return False
    if "site-packages" in full or "dist-packages" in full:
        return True
    return not full.startswith(_stdlib_dirs())


@lru_cache(maxsize=4096)
def is_own_file(path: str | None) -> bool:
    """The user's own code: a file that is not part of an installed package
    (site-packages, dist-packages), PyTorch, the standard library, ctmon or
    a synthetic name. An editable install of the user's project counts as
    theirs: it lives where they work, not in site-packages."""
    if not is_user_file(path):
        return False
    full = os.path.abspath(str(path))
    return "site-packages" not in full and "dist-packages" not in full


def called_from(stack: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The innermost frame of the user's own code in a stack listed outermost
    first: the user's line that led into library code."""
    for fr in reversed(stack):
        if is_own_file(fr.get("file")):
            return {k: fr[k] for k in ("file", "line", "name", "code") if fr.get(k) is not None}
    return None


def is_ctmon_file(path: str | None) -> bool:
    if not path:
        return False
    return os.path.abspath(path).startswith(tuple(_variants(_CTMON_DIR)))
