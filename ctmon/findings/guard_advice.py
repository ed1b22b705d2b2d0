"""What to tell the user about one failed guard: what changed, in words, and
the change to their code that stops it (one place, so every rule and the
cascades give the same advice for the same guard)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctmon.findings import guards as G
from ctmon.findings import levers as L
from ctmon.findings.causes import Group
from ctmon.findings.model import Fix, code_fix, compile_arg_fix
from ctmon.findings.pytorch_hints import CAPTURE_SCALARS, Setting, already_set, is_on, setting_fixes, suggest

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ctmon.store.compiles import ConfigValue

_ARG = re.compile(r"^(?:args\[\d+\]|kwargs\[['\"].+['\"]\])$")
_NAME = re.compile(r"^[A-Za-z_]\w*$")
# torch._dynamo.config.allow_unspec_int_on_nn_module: int module attributes traced as dynamic values.
UNSPEC_INT_ATTRS = Setting("allow_unspec_int_on_nn_module", True)
KV_CACHE = re.compile(r"past_key_values|key_cache|value_cache|\bcache\b", re.IGNORECASE)


def reachable(name: str) -> bool:
    """Whether the user holds the guarded tensor at the compiled call (a
    local name or an argument), so ``mark_dynamic`` on it is a fix they can
    write; a tensor inside an object (a library's KV cache layer) is not."""
    return bool(_NAME.match(name) or _ARG.match(name))


def kv_cache_fix(dim: int | None) -> str:
    """A key/value cache whose length changes (transformers' static cache is
    sized prompt + max_new_tokens, so each new length compiles again)."""
    return (
        f"Dim {dim} of the key/value cache is its length, set from the prompt length plus max_new_tokens: each new "
        "total compiles again. Size the cache once for the longest request: pass "
        "`past_key_values=StaticCache(config=model.config, max_cache_len=N)` to generate() (transformers' "
        "StaticCache; newer versions also take `model.generation_config.max_cache_len = N`), and pad prompts to a "
        "few lengths (`tokenizer(..., padding=True, pad_to_multiple_of=64)`) so the prompt's own length repeats."
    )


def batch_advice(g: G.Guard, values: list[str] | None) -> str:
    """Dim 0 is the batch of most models (a vision model's images, a text
    model's sequences): the sizes a loop or a server sees, and a batch of one."""
    if g.dim != 0:
        return ""
    text = (
        " If dim 0 is the batch: bucket batch sizes (pad each batch up to one of a few sizes, e.g. 8, 16, 32) "
        "and drop or pad the short last batch of an epoch (DataLoader(drop_last=True)), so each size compiles once."
    )
    if values and "1" in values:
        text += (
            " A batch of one always keeps a graph of its own (Dynamo specialises sizes 0 and 1 even for a dynamic "
            "dim): that compile is expected once; warm it up before serving single requests."
        )
    return text


def values_taken(pairs: Group) -> list[str]:
    """The values the guarded thing took, in order, without repeats."""
    out: list[str] = []
    for c, g in pairs:
        actual = g.actual
        if actual is None and g.kind == G.SHAPE and g.expected and "<=" in g.expected:
            actual = _size_beside(c.guard_failures, g)
        for v in (g.expected, actual):
            if g.kind == G.SHAPE and not G.is_int(v):
                continue  # a range ('2 <= size') is not a size the dim took
            if v is not None and v not in out:
                out.append(v)
    return out


def _size_beside(failures: list[str], g: G.Guard) -> str | None:
    """The size a range guard ('2 <= size') refused, where Dynamo says it:
    the same compile's guard against an older, static version of the dim
    ('... size mismatch at index 0. expected 4, actual 1')."""
    for other in G.failed(failures):
        if other.kind == G.SHAPE and other.name == g.name and other.dim == g.dim and G.is_int(other.actual):
            return other.actual
    return None


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


def what_changed(g: G.Guard) -> str:
    """A short phrase for titles and evidence: what changed."""
    if g.kind == G.SHAPE:
        return f"dim {g.dim} of tensor '{g.name}' changed"
    if g.kind == G.SCALAR:
        return f"the Python number '{g.name}' changed"
    if g.kind == G.ITEM:
        return "a number read out of the previous graph changed"
    if g.kind == G.LOOP_BOUND:
        return f"the bound of the loop `{loop_header(g)}` changed ({bound_name(g)}; the loop is unrolled)"
    if g.kind in (G.GRAD_MODE, G.GLOBAL_STATE):
        return f"global state '{g.name}' changed"
    return f"{G.DESCRIPTIONS.get(g.kind, 'a guard failed')}: {g.name}"


def loop_header(g: G.Guard) -> str:
    """The loop a loop-bound guard belongs to, as the user wrote it."""
    if g.code and G.loop_header(g.code) is not None:
        return G.strip_comment(g.code).rstrip(":")
    return "for _ in range(k)"


def bound_name(g: G.Guard) -> str:
    """The bound as the user names it: 'k', 'self.n_layers' -- or, for the
    range a resumed frame received after a break at range(), 'the range's
    stop value'."""
    if g.name.startswith("___stack"):
        attr = g.name.rsplit(".", 1)[-1] if "." in g.name else ""
        return f"the range's {attr} value" if attr in ("start", "stop", "step") else "the loop's bound"
    return f"'{g.name}'"


def values_seen(pairs: Group, limit_hit: bool) -> str:
    """How many values a loop bound took: the cached versions' values, and
    the one that recompiled last. Past the recompile limit the refused
    values are not in the guards, so the count is a lower bound."""
    n = len({g.expected for _, g in pairs if g.expected}) + 1
    return f"at least {n}" if limit_hit else str(n)


def loop_bound_fix(g: G.Guard, seen: str | None = None) -> str:
    """What works for a loop Dynamo unrolls (each measured on torch 2.13,
    tests/test_advice_guards.py): the loop outside the compiled code, its
    body compiled; torch.while_loop without autograd; or, for a Python int
    that takes a few values, a recompile limit that holds a graph per value
    (not for a bound that arrives after a graph break: that frame's later
    compiles can fail, and it runs eager whatever the limit)."""
    header = loop_header(g)
    text = (
        f"Compile the loop's body, not the loop: keep `{header}` in Python and call a compiled function once "
        "per iteration (e.g. `step = torch.compile(body)`, then `x = step(x)` inside the loop); the body's graph is "
        "the same for every bound, so it compiles once. Without autograd (inference under torch.no_grad()), "
        "torch.while_loop(cond_fn, body_fn, (i, x)) with the bound passed in as a 0-d tensor also keeps one graph "
        "for every bound."
    )
    if g.name.startswith("___stack"):
        return text
    bound = bound_name(g)
    count = f" ({bound} has taken {seen} values so far)" if seen else ""
    return (
        f"{text} If {bound} only ever takes a few values, each can keep a graph of its own: set "
        f"torch._dynamo.config.recompile_limit to at least the number of values it takes{count}."
    )


# Guards on state a library changes on its own, with the library's setting
# that keeps it still: (what the guard's text contains, the fix).
LIBRARY_GUARDS = (
    (
        # 'self.config.problem_type is None' (torch 2.13), or
        # "object.__getattribute__(self.config, 'problem_type') is None" (2.11)
        re.compile(r"config\b\W*(?:,\s*)?'?problem_type"),
        "transformers sets model.config.problem_type on the first call with labels (its classification "
        "loss picks 'regression', 'single_label_classification' or 'multi_label_classification'), so the "
        "second call sees a changed config and recompiles. Set it yourself before compiling, e.g. "
        'model.config.problem_type = "single_label_classification" (integer class labels), or pass it to the '
        "model's config: from_pretrained(..., problem_type=...).",
    ),
)


def library_guard_fix(g: G.Guard) -> str | None:
    for marker, fix in LIBRARY_GUARDS:
        if marker.search(g.text) or marker.search(g.name):
            return fix
    return None


def capitalised(text: str) -> str:
    return text[:1].upper() + text[1:] if text[:1].isalpha() else text


def shape_fix(g: G.Guard, values: list[str] | None, site: L.CallSite | None) -> str:
    """A tensor's dim changed size: mark it dynamic at the user's call, in
    their names (and every input tied to it), or pad it to a few sizes --
    or, where a library builds the batches and makes the call, that
    library's own setting."""
    lever = site.lever if site is not None else L.USER
    if lever in L.LIBRARY_LOOPS:
        return library_loop_fix(g, values, lever)
    n = tensor_names(g.name, site)
    if n.expr is None and not reachable(g.name):
        if KV_CACHE.search(g.name):
            return kv_cache_fix(g.dim)
        return (
            f"Dim {g.dim} of '{g.name}', a tensor inside an object the compiled code receives, changed size: "
            "keep that size fixed (pad or bucket what it is built from), or compile with "
            f"{dynamic_true(lever)} so sizes are traced symbolically." + batch_advice(g, values)
        )
    if g.expected and "<=" in g.expected:
        return (
            f"Dim {g.dim} of {n.who} left the range the graph was compiled for ({g.expected}): widen the range "
            f"given to torch._dynamo.mark_dynamic({n.code}, {g.dim}, min=..., max=...){n.note}, or pad/bucket that "
            "dim into it." + batch_advice(g, values)
        )
    return (
        f"Make dim {g.dim} of {n.who} dynamic before the compiled call: "
        f"torch._dynamo.mark_dynamic({n.code}, {g.dim}){n.note}.{tied_inputs(site, n)} Or compile with "
        f"{dynamic_true(lever)}. If only a few sizes occur, pad/bucket dim {g.dim} to them (e.g. multiples of 64) "
        "so each compiles once." + batch_advice(g, values)
    )


def tied_inputs(site: L.CallSite | None, n: Named) -> str:
    """Marking one of two inputs whose sizes the graph ties together (ids
    and their targets) stops the job with a ConstraintViolationError
    (measured on torch 2.13): the fix names the others the line passes."""
    parts = []
    holder = L.container_of(n.expr) if n.expr is not None else None
    if holder is not None:
        parts.append(f"the other tensors in `{holder}`")
    others = L.other_arguments(site, n.expr) if site is not None and n.expr is not None else []
    if others:
        parts.append(f"your line also passes {', '.join(f'`{o}`' for o in others)}")
    also = f" ({'; '.join(parts)})" if parts else ""
    return (
        f" Mark every other input whose dim has the same size too{also}: marking one of two tensors the graph "
        "ties together stops with a ConstraintViolationError."
    )


def dynamic_true(lever: str) -> str:
    """The compile argument that makes every size symbolic, where the user
    can give it: accelerate makes the torch.compile call from its plugin."""
    if lever == L.ACCELERATE:
        return (
            "dynamic=True, given to accelerate's compile: Accelerator(dynamo_plugin=TorchDynamoPlugin(backend=..., "
            "dynamic=True))"
        )
    return "torch.compile(..., dynamic=True)"


def plain_name(name: str) -> str:
    """``kwargs['input_ids']`` -> ``input_ids``: the keyword a library passed."""
    m = re.match(r"^kwargs\[['\"](?P<key>[^'\"]+)['\"]\]$", name)
    return m.group("key") if m else name


def library_loop_fix(g: G.Guard, values: list[str] | None, lever: str) -> str:
    """A library's loop builds the batches and calls the compiled model:
    transformers' Trainer (TrainingArguments(torch_compile=True)), or
    Lightning's fit loop. The user makes no call to mark or compile; the
    batches are theirs to shape, through the library's settings (each fix
    applied in tests/test_advice_levers.py)."""
    name = plain_name(g.name)
    sizes = f" ({' → '.join(values[:8])})" if values else ""
    if lever == L.TRAINER:
        lead = (
            "Trainer builds the batches and calls the model itself (its torch.compile comes from "
            "TrainingArguments(torch_compile=True)), so the levers are Trainer's arguments and your data collator, "
            "not mark_dynamic or torch.compile(dynamic=...) in a call of yours."
        )
        if g.dim == 0:
            return (
                f"{lead} Dim 0 of '{name}' is the batch{sizes}: the last batch of an epoch is short when the "
                "dataset's size is not a multiple of the batch size. Set TrainingArguments(dataloader_drop_last=True), "
                "so every batch has per_device_train_batch_size rows and one graph serves them all."
            )
        return (
            f"{lead} Dim {g.dim} of '{name}'{sizes} is the length the data collator pads each batch to (the longest "
            "sample in it): pad to one length or a few instead, with pad_to_multiple_of in your collator "
            "(DataCollatorWithPadding(tokenizer, pad_to_multiple_of=64), DataCollatorForLanguageModeling(tokenizer, "
            'mlm=False, pad_to_multiple_of=64)) or padding="max_length", max_length=N where you tokenize, so each '
            "length compiles once."
        )
    lead = (
        "Lightning's loop calls training_step with each batch of your train DataLoader, so the lever is that "
        "DataLoader, not a call of yours."
    )
    if g.dim == 0:
        return (
            f"{lead} Dim 0 of '{name}' is the batch{sizes}: the last batch of an epoch is short when the dataset's "
            "size is not a multiple of the batch size. Create the train DataLoader with drop_last=True (in "
            "train_dataloader(), or the DataLoader you pass to trainer.fit), so every batch has the same size."
        )
    return (
        f"{lead} Dim {g.dim} of '{name}'{sizes} changes from batch to batch: pad each batch to one length or a few "
        "in the DataLoader's collate_fn, so each length compiles once."
    )


def fix_for(
    g: G.Guard,
    values: list[str] | None = None,
    config: Mapping[str, ConfigValue] | None = None,
    *,
    seen: str | None = None,
    site: L.CallSite | None = None,
) -> str:
    """The change that stops the guard failing. ``values``: what the guarded
    thing took; ``config``: the settings in force; ``seen``: how many values
    a loop bound took (values_seen); ``site``: the call into the compiled
    code (levers.call_site), whose names and caller the fix uses."""
    name = g.name
    k = g.kind
    known = library_guard_fix(g)
    if known is not None:
        return known
    if k == G.SHAPE:
        return shape_fix(g, values, site)
    if k == G.LOOP_BOUND:
        return loop_bound_fix(g, seen)
    if k == G.ITEM:
        return (
            "Keep the value a tensor instead of calling .item()/.tolist() on it (e.g. `x / t` rather than "
            "`x / t.item()`; torch.where/clamp instead of Python branches), so it stays inside the graph. "
        ) + suggest(  # config: the settings in force in the compiles behind the advice (never one already on)
            CAPTURE_SCALARS,
            config or {},
            lead="Or set ",
            why=" so .item() is traced as a symbolic value instead of breaking the graph and being baked in as a "
            "constant",
            not_covering="the call that produced this number (.tolist() of a float tensor is one)",
        )
    if k == G.SCALAR:
        return (
            f"Pass '{name}' as a 0-d tensor (torch.tensor({name})) rather than a Python number, or compile with "
            "dynamic=True so Dynamo treats it symbolically. A value that takes only a few fixed values is fine: "
            "each compiles once."
        )
    if k == G.DTYPE:
        vals = values or [v for v in (g.expected, g.actual) if v]
        seen = f" (it arrived as {', '.join(vals[:-1])} and {vals[-1]})" if len(vals) >= 2 else ""
        n = tensor_names(name, site)
        return (
            f"Give {n.who} one dtype on every call{seen}: cast it before the compiled call, e.g. "
            f"{n.code}.to(torch.float32){n.note}, or keep autocast settings consistent."
        )
    if k == G.DEVICE:
        n = tensor_names(name, site)
        return (
            f"Keep {n.who} on one device: move it before the compiled call "
            f"({n.code}.to(device){n.note}); a tensor on another device needs a different graph."
        )
    if k == G.DISPATCH:
        return (
            f"{capitalised(tensor_names(name, site).who)} was created differently on some calls — typically under torch.inference_mode(), "
            "which makes inference tensors with other dispatch keys: create the inputs the same way every time "
            "(torch.no_grad() instead of torch.inference_mode() around code that feeds the compiled function)."
        )
    if k == G.REQUIRES_GRAD:
        n = tensor_names(name, site)
        return (
            f"{capitalised(n.who)} sometimes requires grad and sometimes not: pass {n.code}.detach(){n.note} where "
            "no gradient is needed (or set requires_grad the same way every time); each variant otherwise keeps its "
            "own graph."
        )
    if k == G.RANK:
        return (
            f"{capitalised(tensor_names(name, site).who)} arrives with a different number of dimensions: reshape it consistently before "
            "the compiled call (e.g. always keep the batch dimension)."
        )
    if k == G.STRIDE:
        n = tensor_names(name, site)
        return (
            f"{capitalised(n.who)} arrives with a different memory layout (e.g. a transposed or sliced view): call "
            f"{n.code}.contiguous(){n.note} before the compiled call."
        )
    if k == G.GRAD_MODE:
        return (
            "Expected once per mode: the graphs with and without torch.no_grad() both stay cached, so switching "
            "back and forth costs nothing more. If the no-grad calls are rare (evaluation), run them on the "
            "uncompiled function/module to skip this compile; never toggle grad mode inside the compiled region."
        )
    if k == G.GLOBAL_STATE:
        low = name.lower()
        if "autocast" in low:
            return (
                "The function ran both inside and outside torch.autocast (or with another autocast dtype): call "
                "it under the same autocast context every time, or move the autocast block inside it."
            )
        if "default_dtype" in low:
            return "torch.set_default_dtype() changed between calls: set it once at start-up, before compiling."
        if "deterministic" in low:
            return "torch.use_deterministic_algorithms() was toggled between calls: set it once at start-up."
        return f"Global torch state '{name}' changed between calls: set it once at start-up, not inside the loop."
    if k == G.TRAINING:
        return (
            "Expected once per mode: after module.train()/eval() both graphs stay cached, so switching back and "
            "forth costs nothing more. If evaluation is rare, run it on the uncompiled module (the module you "
            "passed to torch.compile, or compiled._orig_mod) to skip this compile."
        )
    if k == G.MODULE_ATTR:
        attr = name.rsplit(".", 1)[-1]
        owner = name.rsplit(".", 1)[0] if "." in name else "self"
        if G.is_int(g.expected) or (g.hint and "integer attributes" in g.hint):
            buffer = (
                f"Keep it in a tensor instead — {owner}.register_buffer('{attr}', torch.zeros((), "
                f"dtype=torch.long)) and update it in place ({name}.fill_(value) or {name} += 1)"
            )
            if already_set(UNSPEC_INT_ATTRS, config or {}):
                # measured (tests/test_advice_older.py): with the setting on, the attribute's first change
                # still recompiles once, as automatic dynamic makes it dynamic; no later change does
                return (
                    f"'{name}' is an int attribute. {is_on(UNSPEC_INT_ATTRS)}: its first change recompiles once "
                    f"(Dynamo then traces it as a dynamic value) and later ones do not. {buffer}: no recompile at all."
                )
            return (
                f"'{name}' is an int attribute, which torch.compile treats as a constant: every new value is a "
                f"new graph. {buffer} — or set torch._dynamo.config.allow_unspec_int_on_nn_module = True so int "
                "attributes are traced as dynamic values (one recompile remains, at the first change)."
            )
        return (
            f"'{name}' is read as a Python constant and changed between calls: if it changes often, store it as a "
            f"tensor ({owner}.register_buffer('{attr}', torch.tensor(...))) and update it in place "
            f"({name}.fill_(value)); otherwise keep it fixed while the loop runs."
        )
    if k == G.GLOBAL:
        return (
            f"The global '{name}' is read inside the compiled function and changed between calls: pass it as an "
            f"argument instead — a tensor if it changes every step (e.g. fn(x, torch.tensor({name}))) — or keep "
            "it constant while the loop runs."
        )
    if k == G.LENGTH:
        return (
            f"'{name}' has a different length on each call: stack its items into one tensor (torch.stack, "
            "padding if needed), or keep its length fixed."
        )
    if k == G.CONTAINER:
        return (
            f"A value inside '{name}' changed between calls: pass values that change as tensors, or read them "
            "outside the compiled function."
        )
    if k == G.FLAG:
        return (
            f"The flag '{name}' changed: each value compiles its own graph, which is fine for a few values; if it "
            "flips every call, move the branch out of the compiled function."
        )
    if k == G.IDENTITY:
        return (
            f"A new object is passed as '{name}' on each call (e.g. a lambda, closure or module built inside the "
            "loop): create it once, outside the loop, and reuse it."
        )
    if k == G.TYPE:
        if g.actual and "Parameter" in g.actual:
            return (
                f"'{name}' is sometimes an nn.Parameter and sometimes a plain tensor: pass {name}.detach() (or "
                "always the parameter) so it has one type."
            )
        return f"'{name}' changed type between calls: pass the same type every time (e.g. always a tensor, or always an int)."
    if k == G.INVALIDATED:
        return (
            "An object a cached graph depends on was freed, so the graph was dropped and compiled again: create "
            "models, modules and helper objects once and keep them alive instead of re-creating them in the loop."
        )
    return "Keep the values the compiled code reads (arguments, globals, module attributes) stable between calls; see the guard text above."


def fixes_for(
    g: G.Guard,
    values: list[str] | None = None,
    config: Mapping[str, ConfigValue] | None = None,
    *,
    seen: str | None = None,
    site: L.CallSite | None = None,
) -> list[Fix]:
    """``fix_for``'s advice as data (Finding.fixes), best first: the change at
    the user's calling line, the compile argument, the setting -- never a
    setting the job already has. Takes fix_for's arguments."""
    config = config or {}
    if library_guard_fix(g) is not None:
        return []  # the library's own setting, in words
    k = g.kind
    file, line = (site.line.file, site.line.line) if site is not None and site.line is not None else (None, None)
    if k == G.SHAPE:
        return _shape_fixes(g, site, file, line)
    if k == G.LOOP_BOUND:
        return [
            code_fix(f"keep `{loop_header(g)}` in Python; compile its body: step = torch.compile(body)", g.file, g.line)
        ]
    if k == G.ITEM:
        return setting_fixes([CAPTURE_SCALARS], config)
    if k == G.SCALAR:
        tensor = code_fix(f"pass torch.tensor({g.name}) instead of the Python number", file, line)
        compiled_dynamic = site is not None and site.call is not None and site.call.dynamic is True
        return [tensor] if compiled_dynamic else [tensor, compile_arg_fix("dynamic", True)]
    expression = {
        G.DTYPE: "{}.to(torch.float32)",
        G.DEVICE: "{}.to(device)",
        G.REQUIRES_GRAD: "{}.detach()",
        G.STRIDE: "{}.contiguous()",
    }.get(k)
    if expression is not None:
        return [code_fix(expression.format(tensor_names(g.name, site).code), file, line)]
    if k == G.GLOBAL:
        return [code_fix(f"pass {g.name} in as an argument (a tensor if it changes every step)", g.file, g.line)]
    if k == G.MODULE_ATTR and (G.is_int(g.expected) or (g.hint and "integer attributes" in g.hint)):
        owner, _, attr = g.name.rpartition(".")
        buffer = f"{owner or 'self'}.register_buffer('{attr}', torch.zeros((), dtype=torch.long)); update it in place"
        return [*setting_fixes([UNSPEC_INT_ATTRS], config), code_fix(buffer, g.file, g.line)]
    return []


def _shape_fixes(g: G.Guard, site: L.CallSite | None, file: str | None, line: int | None) -> list[Fix]:
    """shape_fix's advice as data: mark_dynamic at the user's line, then
    dynamic=True where the user makes the torch.compile call; a library's
    loop: its own argument."""
    lever = site.lever if site is not None else L.USER
    if lever == L.TRAINER:
        text = (
            "TrainingArguments(..., dataloader_drop_last=True)"
            if g.dim == 0
            else "DataCollatorWithPadding(tokenizer, pad_to_multiple_of=64)"
        )
        return [code_fix(text)]
    if lever == L.LIGHTNING:
        return [code_fix("DataLoader(..., drop_last=True)" if g.dim == 0 else "pad each batch in the collate_fn")]
    if g.expected and "<=" in g.expected:
        return []  # already dynamic, out of its range: the range to widen is in words
    out: list[Fix] = []
    n = tensor_names(g.name, site)
    if n.expr is not None or reachable(g.name):
        out.append(code_fix(f"torch._dynamo.mark_dynamic({n.code}, {g.dim})", file, line))
    if lever == L.ACCELERATE:
        out.append(code_fix("Accelerator(dynamo_plugin=TorchDynamoPlugin(backend=..., dynamic=True))"))
    else:
        out.append(compile_arg_fix("dynamic", True))
    if g.dim == 0:
        out.append(code_fix("DataLoader(..., drop_last=True)"))
    return out
