"""What a failed guard says, in terms a user can act on.

Dynamo explains each recompile with the first guard that failed, one line per
cached version, e.g. (torch 2.13, real texts):

    0/0: tensor 'x' size mismatch at index 1. expected 8, actual 12
    0/0: tensor 'x' stride mismatch at index 0. expected 8, actual 1
    0/0: tensor 'x' rank mismatch. expected 2, actual 3
    0/0: tensor 'x' dtype mismatch. expected Float, actual Double
    0/0: tensor 'x' requires_grad mismatch. expected requires_grad=1
    0/0: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, ...), actual DispatchKeySet(Meta, ...)
    3/0: expected type of 'x' to be a tensor type, ' but found <class 'torch.nn.parameter.Parameter'>
    0/1: 2 <= x.size()[0]  # y = x * 2  # t.py:3 in f (user code shown is first use of this value--...)
    0/0: 2 <= t.size()[0] <= 16  # ...
    0/0: temperature == 1.0          # return logits / temperature  # t.py:13 in sample
    1/0: ___stack0 == 104.26         # return x / scale  # t.py:29 in torch_dynamo_resume_in_normalize_at_28
    0/0: self.step == 0              # ramp = ...  # t.py:41 in forward (HINT: torch.compile considers integer
         attributes of the nn.Module to be static. ... allow_unspec_int_on_nn_module = True, ...)
    0/1: self._modules['drop'].training == True   # return F.dropout(...)  # nn/modules/dropout.py:73 in forward
    1/0: G['NOISE_STEP'] == 0  /  len(xs) == 2  /  cfg['a'] == 1  /  s[0] == 1  /  b == True  /  m == 'sum'
    0/0: ___check_obj_id(f.__code__, 140287083186048), type=<class 'code'>  # ...
    0/0: GLOBAL_STATE changed: grad_mode   (also: autocast(cpu)_enabled, default_dtype, deterministic_algorithms)
    5/0: Cache line invalidated because L['___stack0'] got deallocated

followed by a "User stack trace:" naming the user's file and line.
``classify`` turns one such reason into a ``Guard`` with a kind, the name of
the value, the dimension where relevant, the expected/actual values, Dynamo's
own hint, and the user's file:line.

A recompile fails one guard per cached version (PyTorch's
``recompile_reasons`` artifact lists them all, and ctmon keeps the first of
each kind of them, ctmon/wire/guard_reasons.py; the compile record's
``recompile_reason`` is only the first). ``cause`` picks the one that says
what changed: the first, unless it is a weak guard (a container's length, an
object's identity ...) and another version failed on a tensor size, a number
or a dtype -- with a static cache, ``generate()``'s first failure is
``len(kwargs)``, while the others name the prompt length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

# Guard kinds. "shape" and "scalar"/"item" have rules of their own; every
# other kind is reported by the "other guard" rule, which names it.
SHAPE = "shape"
SCALAR = "scalar"  # an int/float Python value
LOOP_BOUND = "loop_bound"  # an int that bounds a Python loop Dynamo unrolled (range(k), while i < k)
ITEM = "item"  # a number that came out of the previous graph (.item(), .tolist(), time.time() ...)
DTYPE = "dtype"
DEVICE = "device"
DISPATCH = "dispatch_keys"  # same device, other dispatch keys (inference-mode tensors, ...)
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
INVALIDATED = "invalidated"
OTHER = "other"

DESCRIPTIONS = {
    SHAPE: "a tensor dimension changed",
    SCALAR: "a Python number changed",
    LOOP_BOUND: "a loop bound changed (the loop is unrolled into the graph)",
    ITEM: "a number read out of the graph (.item()/.tolist()) changed",
    DTYPE: "a tensor's dtype changed",
    DEVICE: "a tensor's device changed",
    DISPATCH: "a tensor's dispatch keys changed (e.g. an inference-mode tensor)",
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
    INVALIDATED: "a cached graph was dropped because an object it guards was freed",
    OTHER: "a guard failed",
}


@dataclass(frozen=True)
class Guard:
    kind: str
    name: str  # the guarded value, readable: x, self.step, self.drop.training, NOISE_STEP, ___stack0
    dim: int | None = None
    expected: str | None = None
    actual: str | None = None
    text: str = ""  # the guard itself, without the compile-id prefix and source comment
    file: str | None = None  # where the guarded value is used, if Dynamo says
    line: int | None = None
    code: str | None = None
    hint: str | None = None  # Dynamo's own advice, when it gives one


_PREFIX = re.compile(r"^\s*(?:\d+/\d+|!\d+/\d+/\d+):\s*")
_TENSOR = re.compile(
    r"^tensor '(?P<name>.+?)' (?P<what>[\w ]+?) mismatch(?: at index (?P<dim>\d+))?\.?\s*(?P<rest>.*)$"
)
_EXPECTED = re.compile(r"expected (?P<exp>.+?)(?:, actual (?P<act>.+))?$")
_TYPE = re.compile(r"^expected type of '(?P<name>.+?)' to be (?:a |an )?(?P<exp>.+?),.*?found <class '(?P<act>[^']+)'>")
_EQ = re.compile(r"^(?P<lhs>.+?)\s*==\s*(?P<rhs>.+?)\s*$")
# symbolic-shape guards on a dynamic dim: "2 <= x.size()[0]", "x.size()[1] <= 16", "L['x'].size()[0] == 4"
_SYM = re.compile(r"(?P<name>[\w.\[\]'\"]+?)\.(?P<what>size|stride)\(\)\[(?P<dim>\d+)\]")
_USER = re.compile(r'File "(?P<file>.+?)", line (?P<line>\d+), in (?P<fn>.+)\n\s+(?P<code>.+)')
# "<guard>   # <source line>  # <short path>:<line> in <function>[ (HINT: ...)]"
_COMMENT = re.compile(r"\s#\s")
_LOC = re.compile(r"#\s*(?P<loc>\S+):(?P<line>\d+) in \S+")
_HINT = re.compile(r"\s*\((?:HINT: )?(?P<hint>[^()]*(?:\([^()]*\)[^()]*)*)\)")
# "(_dynamo/variables/tensor.py:2606 in evaluate_expr)": torch's own line
# that made a symbolic guard, in the place where a hint would be
_TORCH_PLACE = re.compile(r"^[\w./-]+\.py:\d+ in \w+$")
_DISPATCH_DEVICES = ("CPU", "CUDA", "HIP", "XPU", "MPS", "Meta", "Lazy", "PrivateUse1", "XLA", "HPU", "MTIA")


def classify(reason: str) -> Guard:
    """Classify the first guard line of a recompile reason (memoised: every rule asks)."""
    # without its compile-id prefix, one reason recurs across frames and
    # compiles ("tensor 'x' size mismatch ... expected 3, actual 4"), so the
    # memo holds in a storm of thousands of recompiles
    return _classify(_PREFIX.sub("", (reason or "").strip(), count=1))


@lru_cache(maxsize=4096)
def _classify(text: str) -> Guard:
    first = text.splitlines()[0] if text else ""
    body, comment = _split_comment(first)
    code = hint = None
    if comment:
        src = comment.strip()
        src = src[1:].strip() if src.startswith("#") else src
        code = re.split(r"\s{2,}#\s", src)[0].strip() or None
        loc = _LOC.search(comment)
        if loc:
            h = _HINT.match(comment[loc.end() :])
            hint = h.group("hint").strip() or None if h else None
            if hint and _TORCH_PLACE.match(hint):
                hint = None  # where in torch the guard was made, not advice
    file = line = None
    u = _USER.search(text)
    if u:
        file, line = u.group("file"), int(u.group("line"))
        code = u.group("code").strip() or code
    g = _classify_body(body.strip())
    kind = LOOP_BOUND if bounds_loop(g, code) else g.kind
    return Guard(kind, g.name, g.dim, g.expected, g.actual, body.strip(), file, line, code, hint)


# Kinds that name a concrete change a user can act on, strongest first; the
# rest say only that *something* in a container or object differed.
_STRONG = (
    SHAPE,
    LOOP_BOUND,
    SCALAR,
    ITEM,
    DTYPE,
    DEVICE,
    RANK,
    STRIDE,
    REQUIRES_GRAD,
    DISPATCH,
    GRAD_MODE,
    GLOBAL_STATE,
    TRAINING,
    MODULE_ATTR,
    GLOBAL,
    FLAG,
)
_WEAK = (LENGTH, CONTAINER, IDENTITY, TYPE, INVALIDATED, OTHER)


def failed(reasons: list[str]) -> list[Guard]:
    """Every failed guard of one recompile, without repeats, in PyTorch's order."""
    out: list[Guard] = []
    for r in reasons:
        if not r or not r.strip():
            continue
        g = classify(r)
        if all(
            (g.kind, g.name, g.dim, g.expected, g.actual) != (x.kind, x.name, x.dim, x.expected, x.actual) for x in out
        ):
            out.append(g)
    return out


def cause(reasons: list[str]) -> Guard:
    """The failed guard that explains a recompile best (see the module docstring)."""
    guards = failed(reasons)
    if not guards:
        return classify("")
    first = guards[0]
    if first.kind not in _WEAK:
        return first
    strong = [g for g in guards if g.kind in _STRONG]
    return min(strong, key=lambda g: _STRONG.index(g.kind)) if strong else first


# Kinds of guard on a Python int, which a loop header can read as its bound.
INT_KINDS = (SCALAR, ITEM, MODULE_ATTR, GLOBAL, CONTAINER)
_FOR_RANGE = re.compile(r"\bfor\b.+?\bin\s+(?:[\w.]+\()*range\(")
_WHILE = re.compile(r"^\s*while\b(?P<cond>.+?):?\s*$")
_RANGE_ATTR = re.compile(r"^___stack\d+\.(?:start|stop|step)$")


def bounds_loop(g: Guard, code: str | None) -> bool:
    """Whether an int guard is the bound of the loop on its source line.

    Dynamo unrolls ``for _ in range(k)`` (and ``while i < k``): the graph holds
    one copy of the body per iteration, so it guards ``k == N`` even when
    ``k`` is dynamic (PyTorch's reason: ``range_refined_to_singleton``), and a
    tensor ``k`` breaks the graph at ``range()``. The guard's source line says
    so: ``k == 3  # for _ in range(k):``; after a break at ``range()``, the
    resumed frame guards the range itself: ``___stack0.stop == 3``.
    """
    if g.kind not in INT_KINDS or not is_int(g.expected) or not code:
        return False
    loop = loop_header(code)
    if loop is None:
        return False
    if g.kind == ITEM:
        # the range object built eagerly after a break at range(), or a
        # number a call on the loop's own line returned (range(int(t.item())))
        return _RANGE_ATTR.match(g.name) is not None or "(" in loop
    return names_in(g.name, loop)


def loop_header(code: str) -> str | None:
    """What bounds the loop a source line opens: the arguments of its
    ``range(...)``, or a ``while`` condition; None for any other line."""
    line = strip_comment(code)
    m = _FOR_RANGE.search(line)
    if m:
        depth, end = 1, m.end()
        while end < len(line) and depth:
            depth += {"(": 1, ")": -1}.get(line[end], 0)
            end += 1
        return line[m.end() : end - 1 if depth == 0 else end]
    w = _WHILE.match(line)
    return w.group("cond") if w else None


def names_in(name: str, text: str) -> bool:
    """Whether the guarded value's name is written in ``text`` (quotes alike:
    Dynamo's ``c['n']`` is the user's ``c["n"]``)."""
    quoted = re.escape(name.replace('"', "'"))
    return re.search(rf"(?<![\w.]){quoted}(?!\w)", text.replace('"', "'")) is not None


def as_loop_bound(g: Guard, header: str | None) -> Guard:
    """The same guard, read as the bound of the loop on line ``header``
    (where a record other than its own text says so: another guard on the
    value, or PyTorch's specialisation at a loop header). Its source line
    becomes the loop's, unless it is a loop header already (the file:line
    of the line it had then go: they are not the loop's)."""
    if g.code and loop_header(g.code) is not None:
        return replace(g, kind=LOOP_BOUND)
    return replace(g, kind=LOOP_BOUND, code=header, file=None, line=None)


def _split_comment(line: str) -> tuple[str, str]:
    """Split Dynamo's guard line into the guard and its trailing source comment."""
    if line.startswith(("tensor '", "expected type of", "GLOBAL_STATE", "Cache line invalidated")):
        m = re.search(r"\s{2,}#\s", line)  # tensor guards carry no comment, but their values might hold '#'
        return (line[: m.start()], line[m.end() :]) if m else (line, "")
    m = _COMMENT.search(line)
    if not m:
        return line, ""
    return line[: m.start()], line[m.start() :]


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
        if what == "dispatch key set" and exp and act and _devices(exp) == _devices(act):
            kind = DISPATCH
        if kind == REQUIRES_GRAD and exp and exp.startswith("requires_grad="):
            exp = exp.split("=", 1)[1]
            act = act or ("0" if exp == "1" else "1" if exp == "0" else None)
        return Guard(kind, clean_name(name), int(dim) if dim is not None else None, exp, act)
    ty = _TYPE.match(body)
    if ty:
        return Guard(TYPE, clean_name(ty.group("name")), expected=ty.group("exp").strip(), actual=ty.group("act"))
    if body.startswith("GLOBAL_STATE changed"):
        what = body.split(":", 1)[1].strip() if ":" in body else ""
        return Guard(GRAD_MODE if "grad_mode" in what else GLOBAL_STATE, what or "global state")
    if body.startswith("Cache line invalidated"):
        m = re.search(r"because (?P<name>.+?) got deallocated", body)
        return Guard(INVALIDATED, clean_name(m.group("name")) if m else "object")
    if "___check_obj_id" in body or "___check_type_id" in body:
        inner = body[body.find("(") + 1 :]
        inner = inner[: inner.rfind(",", 0, inner.find(")") if ")" in inner else len(inner))] if "," in inner else inner
        name = clean_name(inner.strip())
        if name.endswith(".__code__"):
            name = name[: -len(".__code__")]
        m = re.search(r"type=<class '([^']+)'>", body)
        return Guard(IDENTITY if "obj_id" in body else TYPE, name, expected=m.group(1) if m else None)
    sym = _SYM.search(body)
    if sym and ("<" in body or ">" in body or "==" in body):
        kind = SHAPE if sym.group("what") == "size" else STRIDE
        return Guard(kind, clean_name(sym.group("name")), int(sym.group("dim")), expected=_range(body, sym.group(0)))
    eq = _EQ.match(body)
    if eq:
        lhs, rhs = eq.group("lhs").strip(), eq.group("rhs").strip()
        if lhs.startswith("len(") and lhs.endswith(")"):
            return Guard(LENGTH, clean_name(lhs[4:-1]), expected=rhs)
        if lhs.endswith(".training"):
            return Guard(TRAINING, clean_name(lhs), expected=rhs)
        if lhs.startswith("___stack") or lhs.startswith("L['___stack"):
            return Guard(ITEM, clean_name(lhs), expected=rhs)
        value_kind = _literal_kind(rhs)
        name = clean_name(lhs)
        if lhs.startswith("G['") or lhs.startswith('G["'):
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


def _devices(keyset: str) -> set[str]:
    keys = {k.strip() for k in keyset[keyset.find("(") + 1 : keyset.rfind(")")].split(",")}
    return {k for k in keys if k in _DISPATCH_DEVICES}


def _range(body: str, term: str) -> str:
    """'2 <= x.size()[0] <= 16' -> '2 <= size <= 16' (what the cached graph accepts)."""
    return body.replace(term, "size").strip()


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


def clean_name(name: str) -> str:
    """Dynamo's source names, as the user wrote them.

    L['x'] -> x ; L['self'].scale -> self.scale ; G['FLAG'] -> FLAG ;
    self._modules['drop'].training -> self.drop.training ;
    L['self']._parameters['weight'] -> self.weight
    """
    name = name.strip()
    name = re.sub(r"^L\[['\"]([^'\"]+)['\"]\]", r"\1", name)
    name = re.sub(r"^G\[['\"]([^'\"]+)['\"]\]", r"\1", name)
    name = re.sub(r"\._(?:modules|parameters|buffers)\[['\"]([^'\"]+)['\"]\]", r".\1", name)
    return name


def strip_comment(code: str) -> str:
    """A source line without its trailing comment."""
    return re.split(r"\s+#\s", code, maxsplit=1)[0].strip() if "#" in code else code.strip()


def is_number(text: str | None) -> bool:
    return text is not None and _literal_kind(text) in ("int", "float")


def is_int(text: str | None) -> bool:
    return text is not None and _literal_kind(text) == "int"
