"""What a failed guard says, in terms a user can act on.

Dynamo explains each recompile with the guard that failed, e.g. (torch 2.13):

    0/0: tensor 'x' size mismatch at index 1. expected 8, actual 12
    0/0: tensor 'x' dtype mismatch. expected Float, actual Double
    0/0: tensor 'x' requires_grad mismatch. expected requires_grad=0
    0/0: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, ...), actual DispatchKeySet(CUDA, ...)
    0/0: k == 2          # return x * k  # train.py:14 in f
    1/0: ___stack0 == -0.0141   # return x + v  # train.py:51 in torch_dynamo_resume_in_f_at_50
    0/0: G['FLAG'] == 1  /  s.scale == 1.0  /  len(xs) == 1  /  cfg['a'] == 1
    0/0: GLOBAL_STATE changed: grad_mode

``classify`` turns one such line into a ``Guard`` with a kind, the name of the
value, the dimension where relevant, and the expected/actual values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Guard kinds. "shape" and "scalar" have rules of their own; every other kind
# is reported by the "other guard" rule, which names it.
SHAPE = "shape"
SCALAR = "scalar"  # an int/float Python value
ITEM = "item"  # a value that came out of the previous graph (.item(), .tolist())
DTYPE = "dtype"
DEVICE = "device"
REQUIRES_GRAD = "requires_grad"
RANK = "rank"
STRIDE = "stride"
GRAD_MODE = "grad_mode"
GLOBAL_STATE = "global_state"
TRAINING = "training"
MODULE_ATTR = "module_attribute"
GLOBAL = "global"
LENGTH = "length"
CONTAINER = "container_value"
FLAG = "flag"  # a bool / str / None value
IDENTITY = "identity"
TYPE = "type"
OTHER = "other"

DESCRIPTIONS = {
    SHAPE: "a tensor dimension changed",
    SCALAR: "a Python number changed",
    ITEM: "a value read out of the graph (.item()/.tolist()) changed",
    DTYPE: "a tensor's dtype changed",
    DEVICE: "a tensor's device (dispatch keys) changed",
    REQUIRES_GRAD: "a tensor's requires_grad changed",
    RANK: "a tensor's number of dimensions changed",
    STRIDE: "a tensor's strides (memory layout) changed",
    GRAD_MODE: "grad mode changed (torch.no_grad() vs. training)",
    GLOBAL_STATE: "global torch state changed",
    TRAINING: "module.training changed (train() / eval())",
    MODULE_ATTR: "a module attribute changed",
    GLOBAL: "a global variable changed",
    LENGTH: "the length of a list/tuple/dict changed",
    CONTAINER: "a value inside a dict/list changed",
    FLAG: "a Python flag (bool/str/None) changed",
    IDENTITY: "a different object was passed (identity guard)",
    TYPE: "a value's type changed",
    OTHER: "a guard failed",
}


@dataclass(frozen=True)
class Guard:
    kind: str
    name: str  # the guarded value as Dynamo names it: x, L['self'].scale, G['FLAG'], ___stack0
    dim: int | None = None
    expected: str | None = None
    actual: str | None = None
    text: str = ""  # the guard line, without the compile-id prefix and source comment
    file: str | None = None  # where the guarded value is used, if Dynamo says
    line: int | None = None
    code: str | None = None


_PREFIX = re.compile(r"^\s*(?:\d+/\d+|!\d+/\d+/\d+):\s*")
_TENSOR = re.compile(r"^tensor '(?P<name>.+?)' (?P<what>[\w ]+?) mismatch(?: at index (?P<dim>\d+))?\.?\s*(?P<rest>.*)$")
_EXPECTED = re.compile(r"expected (?P<exp>.+?)(?:, actual (?P<act>.+))?$")
_EQ = re.compile(r"^(?P<lhs>.+?)\s*==\s*(?P<rhs>.+?)\s*$")
_USER = re.compile(r'File "(?P<file>.+?)", line (?P<line>\d+), in (?P<fn>.+)\n\s+(?P<code>.+)')
_COMMENT_LOC = re.compile(r"#\s*(?P<code>.*?)\s*#\s*(?P<loc>\S+):(?P<line>\d+) in \S+\s*$")


def classify(reason: str) -> Guard:
    """Classify the first guard line of a recompile reason."""
    text = reason.strip()
    first = text.splitlines()[0] if text else ""
    first = _PREFIX.sub("", first)
    body, code = first, None
    m = _COMMENT_LOC.search(first)
    if m:
        body = first[: m.start()].rstrip()
        code = m.group("code") or None
    file = line = None
    u = _USER.search(text)
    if u:
        file, line = u.group("file"), int(u.group("line"))
        code = u.group("code").strip() or code
    g = _classify_body(body.strip())
    return Guard(g.kind, g.name, g.dim, g.expected, g.actual, body.strip(), file, line, code)


def _classify_body(body: str) -> Guard:
    t = _TENSOR.match(body)
    if t:
        name, what, dim, rest = t.group("name"), t.group("what").strip(), t.group("dim"), t.group("rest")
        e = _EXPECTED.search(rest or "")
        exp = e.group("exp").strip() if e else None
        act = e.group("act").strip() if e and e.group("act") else None
        kind = {
            "size": SHAPE,
            "stride": STRIDE,
            "dtype": DTYPE,
            "requires_grad": REQUIRES_GRAD,
            "rank": RANK,
            "dispatch key set": DEVICE,
            "device": DEVICE,
            "device index": DEVICE,
        }.get(what, OTHER)
        return Guard(kind, _clean_name(name), int(dim) if dim is not None else None, exp, act)
    if body.startswith("GLOBAL_STATE changed"):
        what = body.split(":", 1)[1].strip() if ":" in body else ""
        return Guard(GRAD_MODE if "grad_mode" in what else GLOBAL_STATE, what or "global state")
    if "___check_obj_id" in body or "___check_type_id" in body:
        inner = body[body.find("(") + 1 : body.rfind(",")] if "(" in body and "," in body else body
        return Guard(IDENTITY if "obj_id" in body else TYPE, _clean_name(inner.strip()))
    eq = _EQ.match(body)
    if eq:
        lhs, rhs = eq.group("lhs").strip(), eq.group("rhs").strip()
        if lhs.startswith("len(") and lhs.endswith(")"):
            return Guard(LENGTH, _clean_name(lhs[4:-1]), expected=rhs)
        if lhs.endswith(".training"):
            return Guard(TRAINING, _clean_name(lhs), expected=rhs)
        if lhs.startswith("___stack") or lhs.startswith("L['___stack"):
            return Guard(ITEM, lhs, expected=rhs)
        value_kind = _literal_kind(rhs)
        name = _clean_name(lhs)
        if lhs.startswith("G['") or lhs.startswith("G[\""):
            return Guard(GLOBAL, name, expected=rhs)
        if value_kind in ("bool", "str", "none"):
            return Guard(FLAG, name, expected=rhs)
        if "." in name and not name.startswith("["):
            return Guard(MODULE_ATTR, name, expected=rhs)
        if "[" in name:
            return Guard(CONTAINER, name, expected=rhs)
        if value_kind in ("int", "float"):
            return Guard(SCALAR, name, expected=rhs)
        return Guard(OTHER, name, expected=rhs)
    return Guard(OTHER, body[:80])


def _literal_kind(text: str) -> str:
    if text in ("True", "False"):
        return "bool"
    if text == "None":
        return "none"
    if text[:1] in ("'", '"'):
        return "str"
    try:
        int(text)
        return "int"
    except ValueError:
        pass
    try:
        float(text)
        return "float"
    except ValueError:
        return "other"


def _clean_name(name: str) -> str:
    """L['x'] -> x ; L['self'].scale -> self.scale ; G['FLAG'] -> FLAG."""
    name = name.strip()
    name = re.sub(r"^L\['([^']+)'\]", r"\1", name)
    name = re.sub(r"^G\['([^']+)'\]", r"\1", name)
    return name


def is_number(text: str | None) -> bool:
    return text is not None and _literal_kind(text) in ("int", "float")
