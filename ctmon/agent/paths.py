"""Which source files are the user's.

Used to point every compile and graph break at code the user can change. Not
the user's: PyTorch itself, the standard library, ctmon, and synthetic names
such as ``<frozen runpy>`` or ``<string>``. Third-party packages (transformers,
timm, ...) *are* treated as user code: that is where their graph breaks live.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from functools import lru_cache

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


@lru_cache(maxsize=4096)
def is_user_file(path: str | None) -> bool:
    if not path or path.startswith("<"):
        return False
    full = os.path.abspath(path)
    if full.startswith(_owned_dirs()):
        return False
    if "site-packages" in full or "dist-packages" in full:
        return True
    return not full.startswith(_stdlib_dirs())


def is_ctmon_file(path: str | None) -> bool:
    if not path:
        return False
    return os.path.abspath(path).startswith(tuple(_variants(_CTMON_DIR)))
