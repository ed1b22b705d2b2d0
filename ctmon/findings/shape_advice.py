"""Advice for a tensor dimension that changed size: mark it dynamic at the
user's call in their names (and every input tied to it), pad or bucket it,
or, where a library builds the batches and makes the call, that library's
own setting."""

from __future__ import annotations

import re

from ctmon.findings import guards as G
from ctmon.findings import levers as L
from ctmon.findings.guard_names import Named, plain_name, reachable, tensor_names
from ctmon.findings.model import Fix, code_fix, compile_arg_fix
from ctmon.findings.pages import TROUBLESHOOTING_PAGE

KV_CACHE = re.compile(r"past_key_values|key_cache|value_cache|\bcache\b", re.IGNORECASE)


def kv_cache_fix(dim: int | None) -> str:
    """A key/value cache whose length changes (transformers' static cache is
    sized prompt + max_new_tokens, so each new length compiles again). What
    is known only: the fix (one cache length for every request) needs a GPU
    run of transformers' compiled generate() to prove."""
    return (
        f"Dim {dim} of the key/value cache is its length, set from the prompt length plus max_new_tokens: each new "
        "total is a new size, which compiles again. transformers' page on caches and compiled generate() says how "
        "it sizes a static cache: https://huggingface.co/docs/transformers/en/kv_cache ; PyTorch's page on "
        f"recompilations: {TROUBLESHOOTING_PAGE}"
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


def library_loop_fix(g: G.Guard, values: list[str] | None, lever: str) -> str:
    """A library's loop builds the batches and calls the compiled model:
    transformers' Trainer (TrainingArguments(torch_compile=True)), or
    Lightning's fit loop. The user makes no call to mark or compile; the
    batches are theirs to shape, through the library's settings (each fix
    applied in tests/test_findings_advice_levers.py)."""
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


def shape_fixes(g: G.Guard, site: L.CallSite | None, file: str | None, line: int | None) -> list[Fix]:
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
    if n.expr is None and not reachable(g.name) and KV_CACHE.search(g.name):
        return []  # what is known, in words: kv_cache_fix
    if n.expr is not None or reachable(g.name):
        out.append(code_fix(f"torch._dynamo.mark_dynamic({n.code}, {g.dim})", file, line))
    if lever == L.ACCELERATE:
        out.append(code_fix("Accelerator(dynamo_plugin=TorchDynamoPlugin(backend=..., dynamic=True))"))
    else:
        out.append(compile_arg_fix("dynamic", True))
    if g.dim == 0:
        out.append(code_fix("DataLoader(..., drop_last=True)"))
    return out
