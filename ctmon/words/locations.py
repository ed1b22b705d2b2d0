"""How ctmon writes a place in code: ``file:line``, short.

Relative to the job's directory when the file lies below it, from the
package on for installed libraries (``transformers/models/gpt2/...``), ``~``
for the home directory. Pure: the TUI, the reports and the summary share it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

# Where installed packages live: pip's site-packages, Debian's dist-packages.
PACKAGE_DIRS = ("/site-packages/", "/dist-packages/")
# Not the user's code, read from a path alone (a viewer has no interpreter of
# the job's to ask): installed packages, the standard library, frozen or
# generated code (``<frozen …>``, ``<string>``), and ctmon's own hooks. The
# agent, inside the job, asks its interpreter instead (ctmon/agent/paths.py).
_NOT_USERS = (*PACKAGE_DIRS, "/lib/python3", "/ctmon/agent/")


def is_library_path(path: str | None) -> bool:
    """Whether a recorded path is not the user's own code (see _NOT_USERS)."""
    if not path:
        return True
    p = path.replace(os.sep, "/")
    return p.startswith("<") or any(m in p for m in _NOT_USERS)


def in_package(path: str) -> str | None:
    """The part of ``path`` from an installed package's directory on
    (``transformers/models/gpt2/modeling_gpt2.py``), or None."""
    p = path.replace(os.sep, "/")
    for marker in PACKAGE_DIRS:
        i = p.find(marker)
        if i >= 0:
            return p[i + len(marker) :]
    return None


def short_path(path: str | None, cwd: str | None = None, narrow: bool = False) -> str:
    """A path as a user wants to read it: relative to the job's directory when
    it lies below it, ~ for the home directory, the base name when narrow."""
    if not path:
        return "?"
    if narrow or path.startswith("<"):
        return os.path.basename(path) or path
    if cwd and os.path.isabs(path):
        base = cwd.rstrip("/") + "/"
        if path.startswith(base):
            return path[len(base) :]
    packaged = in_package(path)
    if packaged is not None:
        return packaged
    home = os.path.expanduser("~")
    if home and home != "/" and path.startswith(home + "/"):
        return "~" + path[len(home) :]
    return path


@lru_cache(maxsize=4096)
def where(file: str | None, line: int | None, cwd: str | None = None, narrow: bool = False) -> str:
    """``file:line``, the one way ctmon writes a location."""
    if not file:
        return "?"
    p = short_path(file, cwd, narrow)
    return f"{p}:{line}" if line is not None else p


def called_from_text(called: Mapping[str, Any] | None, cwd: str | None = None) -> str:
    """``called from train.py:42`` for a place in a library's code, or ''."""
    if not called or not called.get("file"):
        return ""
    return f"called from {where(called['file'], called.get('line'), cwd)}"


def place(file: str | None, line: int | None, called: Any = None, cwd: str | None = None, narrow: bool = False) -> str:
    """Where a frame or break is, the user's own line first when it lies in
    a library: ``train.py:42 → transformers/.../modeling_gpt2.py:647``.
    ``called``: the recorded ``called_from`` frame (``.file``, ``.line``)."""
    at = where(file, line, cwd, narrow)
    if called is None or not getattr(called, "file", None):
        return at
    return f"{where(called.file, called.line, cwd, narrow)} → {at}"
