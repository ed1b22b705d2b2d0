"""How advice names a guarded value: by the user's own expression at their
calling line where the recording tells it, else as what the compiled code
received (said to be the compiled code's name)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ctmon.findings import levers as L

_ARG = re.compile(r"^(?:args\[\d+\]|kwargs\[['\"].+['\"]\])$")
_NAME = re.compile(r"^[A-Za-z_]\w*$")


def reachable(name: str) -> bool:
    """Whether the user holds the guarded tensor at the compiled call (a
    local name or an argument), so ``mark_dynamic`` on it is a fix they can
    write; a tensor inside an object (a library's KV cache layer) is not."""
    return bool(_NAME.match(name) or _ARG.match(name))


_KWARG = re.compile(r"^kwargs\[['\"](?P<key>[^'\"]+)['\"]\]$")
_POSITIONAL = re.compile(r"^args\[(?P<i>\d+)\]$")


def user_expression(argument: str, code: str | None) -> str | None:
    """What the user's line passes as a compiled call's argument: for
    ``kwargs['pixel_values']`` and ``out = cmodel(pixel_values=images)``,
    ``images``. None unless exactly one call on the line says it plainly."""
    if not code:
        return None
    kw, pos = _KWARG.match(argument), _POSITIONAL.match(argument)
    if kw is None and pos is None:
        return None
    try:
        tree = ast.parse(code.strip())
    except (SyntaxError, ValueError):
        return None  # one line of a call written over several
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if kw is not None:
            found += [k.value for k in node.keywords if k.arg == kw.group("key")]
        elif (
            pos is not None
            and int(pos.group("i")) < len(node.args)
            and not any(isinstance(a, ast.Starred) for a in node.args)
        ):
            found.append(node.args[int(pos.group("i"))])
    if len(found) != 1:
        return None
    text = ast.unparse(found[0])
    return text if len(text) <= 60 else None


def name_users_tensor(fix: str, argument: str, code: str | None) -> str:
    """A fix that says mark_dynamic(x, ...) for a tensor the user passed by
    keyword or position names the user's own expression instead."""
    expr = user_expression(argument, code)
    if expr is None or "mark_dynamic(x, " not in fix:
        return fix
    fix = fix.replace("mark_dynamic(x, ", f"mark_dynamic({expr}, ")
    return fix.replace(f"the tensor passed as {argument}", f"{expr} (what your line passes as {argument})", 1)


@dataclass(frozen=True)
class Named:
    """A guarded tensor as a fix names it: in prose, in code, and what the
    code's name stands for when it is not the user's own."""

    who: str  # "`x` (passed as `idx`)", "the tensor passed as `idx`"
    code: str  # "x": the user's expression, else the compiled code's name ("idx"), else "x"
    note: str = ""  # where code is not the user's name: " (`idx` is the compiled code's name for it ...)"
    expr: str | None = None  # the user's own expression, when known


def tensor_names(name: str, site: L.CallSite | None = None) -> Named:
    """How to name a guarded tensor: by the user's own expression at their
    calling line where the recording tells it (``cmodel(x, y)`` passes ``x``
    as ``forward``'s ``idx``), else as what the compiled code received, its
    name there said to be the compiled code's -- never as if Dynamo's name
    for it were a name in the user's code."""
    expr = L.users_expression(site, name) if site is not None else None
    if expr is not None:
        return Named(f"`{expr}`" + (f" (passed as `{name}`)" if expr != name else ""), expr, expr=expr)
    code = plain_name(name)
    named = bool(_NAME.match(code))
    code = code if named else "x"
    line = site.line.code.strip() if site is not None and site.line is not None and site.line.code else None
    why = f"; your line `{line}` does not name it plainly" if line else ""
    what = "is the compiled code's name for it" if named else "stands for it"
    return Named(
        f"the tensor passed as `{name}`", code, f" (`{code}` {what}{why}: use your code's name for that tensor)"
    )


def capitalised(text: str) -> str:
    return text[:1].upper() + text[1:] if text[:1].isalpha() else text


def plain_name(name: str) -> str:
    """``kwargs['input_ids']`` -> ``input_ids``: the keyword a library passed."""
    m = re.match(r"^kwargs\[['\"](?P<key>[^'\"]+)['\"]\]$", name)
    return m.group("key") if m else name
