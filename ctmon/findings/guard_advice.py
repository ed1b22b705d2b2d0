"""What to tell the user about one failed guard: what changed, in words, and
the change to their code that stops it (one place, so every rule and the
cascades give the same advice for the same guard)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ctmon.findings import guards as G
from ctmon.findings import levers as L
from ctmon.findings.causes import Group
from ctmon.findings.guard_names import (
    capitalised,
    tensor_names,
)
from ctmon.findings.model import Fix, code_fix, compile_arg_fix
from ctmon.findings.pages import TROUBLESHOOTING_PAGE
from ctmon.findings.pytorch_hints import CAPTURE_SCALARS, Setting, already_set, is_on, setting_fixes, suggest
from ctmon.findings.shape_advice import (
    shape_fix,
    shape_fixes,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ctmon.store.compiles import ConfigValue

# torch._dynamo.config.allow_unspec_int_on_nn_module: int module attributes traced as dynamic values.
UNSPEC_INT_ATTRS = Setting("allow_unspec_int_on_nn_module", True)


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
    tests/test_findings_advice_guards.py): the loop outside the compiled code, its
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
        # what is known only: a move across devices needs two devices to show, and which device the job
        # wants its inputs on is its own choice
        return (
            f"{capitalised(tensor_names(name, site).who)} arrived on another device than the cached graphs were "
            "compiled for: Dynamo guards each input's device, so every device an input arrives on compiles a "
            f"graph of its own. PyTorch's page on recompilations: {TROUBLESHOOTING_PAGE}"
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
        return (
            f"Global torch state '{name}' changed between calls: Dynamo guards it for every compiled function, so "
            f"each change can recompile them. PyTorch's page on recompilations: {TROUBLESHOOTING_PAGE}"
        )
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
                # measured (tests/test_findings_advice_older.py): with the setting on, the attribute's first change
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
        # measured (tests/test_findings_advice_proven_guards.py): a stacked tensor whose length still changes
        # recompiles on its size instead, so the length is what to fix
        return (
            f"'{name}' has a different length on some calls: Dynamo unrolls the loop over its items, so each length "
            "is a graph of its own. Keep its length fixed: pad it to the longest (e.g. zeros) and pass one stacked "
            "tensor (torch.stack), so one graph serves every call."
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
            f"A different function or object was passed as '{name}' than the cached graphs were compiled for: "
            "Dynamo guards its identity (a function by its code), so each one compiles a graph of its own, which "
            "is fine for a few. If it changes often, pass one function and give it what differs as an argument "
            "(a tensor), or call it outside the compiled function."
        )
    if k == G.TYPE:
        if g.actual and "Parameter" in g.actual:
            return (
                f"'{name}' is sometimes an nn.Parameter and sometimes a plain tensor: pass {name}.detach() (or "
                "always the parameter) so it has one type."
            )
        # what is known only: the Parameter case above is the one a test applies
        return (
            f"'{name}' changed type between calls: Dynamo guards each input's type, so every type it arrives as "
            f"compiles a graph of its own. PyTorch's page on recompilations: {TROUBLESHOOTING_PAGE}"
        )
    if k == G.INVALIDATED:
        # what is known only: no workload of ctmon's tests frees a guarded object on purpose
        return (
            f"An object a cached graph depends on ('{name}') was freed, so Dynamo dropped that graph and compiled "
            f"again. PyTorch's page on recompilations: {TROUBLESHOOTING_PAGE}"
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
        return shape_fixes(g, site, file, line)
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
