"""Who calls the compiled code, and what the user's own line calls its inputs.

A fix for a recompile is a change to the call of the compiled code: mark a
dim of an input dynamic before it, pad the batches it gets. Which of these
the user can make depends on who makes that call (ctmon/agent/compile_calls.py
records who called ``torch.compile``):

* the user's own code: the line that called the compiled object is theirs,
  and its arguments are named there -- ``cmodel(x, y)`` passes ``x`` where
  ``forward(self, idx, targets)`` calls it ``idx``, so the fix names ``x``;
* transformers' Trainer (``TrainingArguments(torch_compile=True)``): Trainer
  builds the batches and calls the model, so the levers are its arguments and
  the data collator;
* Lightning: its loop calls ``training_step`` with the DataLoader's batches,
  so the lever is that DataLoader.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctmon.store.compiles import CompileRecord, Frame
    from ctmon.store.session import Session
    from ctmon.wire.events_compile import CompileCall, StackFrame

USER = "user"
TRAINER = "trainer"  # transformers' Trainer (or a subclass: trl's SFTTrainer ...)
LIGHTNING = "lightning"
ACCELERATE = "accelerate"
LIBRARY_LOOPS = (TRAINER, LIGHTNING)  # a library's loop makes the batches and the call

_TRAINER_PACKAGES = ("transformers", "trl")
_LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric")


@dataclass(frozen=True)
class CallSite:
    """The call into a compiled frame, as far as the recording knows it."""

    lever: str = USER
    call: CompileCall | None = None  # the torch.compile call behind the frame
    line: StackFrame | None = None  # the user's own line that called into the compiled code
    params: tuple[str, ...] = ()  # the frame's parameters as a caller passes them, when the frame is the entry


def compile_call_for(s: Session, frame: Frame) -> CompileCall | None:
    """The ``torch.compile`` call whose object runs this frame: the one whose
    entry is the frame's code, else whose module the compile was attributed
    to, else the job's only call."""
    calls = s.compile.calls
    for c in calls:
        if c.code_file and (c.code_file, c.code_line, c.code_name) == (
            frame.code.file,
            frame.code.line,
            frame.code.name,
        ):
            return c
    if frame.module:
        named = [c for c in calls if frame.module in (c.target, c.wraps)]
        if len(named) == 1:
            return named[0]
    return calls[0] if len(calls) == 1 else None


def lever_of(call: CompileCall | None) -> str:
    """Who calls the compiled code, from who called ``torch.compile`` and
    what was compiled."""
    if call is None:
        return USER
    packages = [v.split(":", 1) for v in call.via if ":" in v]
    for package, qualname in packages:
        if package in _TRAINER_PACKAGES and qualname.split(".", 1)[0].endswith("Trainer"):
            return TRAINER
    if any(package in _LIGHTNING_PACKAGES for package, _ in packages) or any(
        b.endswith(".LightningModule") for b in call.bases
    ):
        return LIGHTNING
    if any(package == "accelerate" for package, _ in packages):
        return ACCELERATE
    return USER


def call_site(s: Session, frame: Frame, c: CompileRecord | None = None) -> CallSite:
    """What is known of the call into ``frame``; ``c``: the compile whose
    start names the user's calling line (the frame's first, if not given)."""
    call = compile_call_for(s, frame)
    entry = call is not None and (call.code_file, call.code_line, call.code_name) == (
        frame.code.file,
        frame.code.line,
        frame.code.name,
    )
    return CallSite(
        lever=lever_of(call),
        call=call,
        line=_calling_line(frame, c),
        params=tuple(call.params) if entry and call is not None else (),
    )


def _calling_line(frame: Frame, c: CompileRecord | None) -> StackFrame | None:
    """The user's line that called the compiled code, with its text: for a
    library's frame, the user's own line that led there; else the compile's
    start (the innermost line of the user's code below the frame). Never the
    frame's own line, nor a library's."""
    at = frame.called_from
    if at is not None:
        return at if at.code else None
    records = [c] if c is not None else []
    records += frame.compiles[:1]
    for rec in records:
        at = rec.started_at
        if at is not None and at.code and (at.file, at.line) != (frame.code.file, frame.code.line):
            return at
    return None


_GUARDED = re.compile(
    r"^(?P<base>args\[\d+\]|kwargs\[['\"][^'\"]+['\"]\]|[A-Za-z_]\w*)(?P<rest>(?:\[[^\]]+\]|\.\w+)*)$"
)
_KWARG = re.compile(r"^kwargs\[['\"](?P<key>[^'\"]+)['\"]\]$")
_POSITIONAL = re.compile(r"^args\[(?P<i>\d+)\]$")
MAX_EXPR = 60


def users_expression(site: CallSite, name: str) -> str | None:
    """The user's own expression for the guarded value ``name``
    (``idx``, ``batch[0]``, ``kwargs['input_ids']``) at their calling line:
    ``x`` for ``cmodel(x, y)`` into ``forward(self, idx, targets)``. Only a
    name, attribute or subscript (what ``mark_dynamic`` can mark before the
    call), and only where exactly one call on the line says it."""
    m = _GUARDED.match(name)
    if m is None or site.line is None:
        return None
    node = _argument_node(site, m.group("base"))
    if node is None or not _plain_reference(node):
        return None
    text = ast.unparse(node) + m.group("rest")
    return text if len(text) <= MAX_EXPR else None


def other_arguments(site: CallSite, expr: str) -> list[str]:
    """The other plain names and attributes the calling line passes beside
    ``expr`` (the one holding it, ``batch`` of ``batch[0]``, left out):
    inputs that may share the dim a fix marks dynamic."""
    call = _only_call(site.line.code if site.line is not None else None)
    if call is None:
        return []
    holder = container_of(expr)
    out = []
    for node in [*call.args, *(k.value for k in call.keywords if k.arg is not None)]:
        text = ast.unparse(node)
        if _plain_reference(node) and text not in (expr, holder) and text not in out:
            out.append(text)
    return out[:4]


def container_of(expr: str) -> str | None:
    """``batch`` for ``batch[0]``, ``self.inputs`` for ``self.inputs[1]``:
    what holds the tensor beside others; None for a plain name."""
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    return ast.unparse(node.value) if isinstance(node, ast.Subscript) else None


def _argument_node(site: CallSite, base: str) -> ast.expr | None:
    """The argument node the calling line passes for ``base``: a keyword
    of that name, or the positional argument at the parameter's place."""
    call = _only_call(site.line.code if site.line is not None else None)
    if call is None:
        return None
    kw, pos = _KWARG.match(base), _POSITIONAL.match(base)
    key = kw.group("key") if kw else (base if pos is None else None)
    if key is not None:
        found = [k.value for k in call.keywords if k.arg == key]
        if found:
            return found[0]
        if kw is not None or key not in site.params:
            return None
        index = site.params.index(key)
    else:
        assert pos is not None
        index = int(pos.group("i"))
    if any(isinstance(a, ast.Starred) for a in call.args[: index + 1]) or index >= len(call.args):
        return None
    return call.args[index]


def _only_call(code: str | None) -> ast.Call | None:
    """The one call with arguments on the line (``cmodel(x, y)`` in
    ``_, loss = cmodel(x, y)`` or ``cmodel(x).pow(2).mean()``); None where
    there are several or none. A call inside another's arguments is that
    other's argument, not a call of the compiled code the user can mark
    for (``print(cmodel(x))``)."""
    if not code:
        return None
    try:
        tree = ast.parse(code.strip())
    except (SyntaxError, ValueError):
        return None  # one line of a call written over several
    calls = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and (n.args or n.keywords) and not _on_a_result(n.func)
    ]
    outer = [n for n in calls if not any(n is not o and _inside(n, o) for o in calls)]
    return outer[0] if len(outer) == 1 else None


def _on_a_result(func: ast.expr) -> bool:
    """``.pow(2)`` in ``cmodel(x).pow(2)``: a method of what a call returned,
    not a call the line makes of its own."""
    while isinstance(func, (ast.Attribute, ast.Subscript)):
        func = func.value
    return isinstance(func, ast.Call)


def _inside(node: ast.AST, outer: ast.Call) -> bool:
    return any(node is a for arg in [*outer.args, *(k.value for k in outer.keywords)] for a in ast.walk(arg))


def _plain_reference(node: ast.expr) -> bool:
    """``x``, ``batch[0]``, ``self.inputs``: what the call passes is that
    object itself, so marking it before the call marks what is passed."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, (ast.Constant, ast.Name)):
            return False
        node = node.value
    return isinstance(node, ast.Name)
