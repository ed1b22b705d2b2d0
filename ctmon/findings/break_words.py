"""The words of the graph-break findings: each cause's name, title and
ctmon's own fix (breaks.py puts PyTorch's explanation and hints first)."""

LOGGING, SCALAR_OUT, BRANCH, DYN_SHAPE, NUMPY, CALL, AUTOGRAD, EXPLICIT, OTHER = (
    "logging",
    "scalar-output",
    "data-dependent-branch",
    "dynamic-shape-op",
    "numpy",
    "unsupported-call",
    "autograd",
    "explicit",
    "other",
)

TITLES = {
    LOGGING: "Graph breaks on logging / print",
    SCALAR_OUT: "Graph breaks on .item() / .tolist()",
    BRANCH: "Graph breaks on data-dependent branches",
    DYN_SHAPE: "Graph breaks on operators with data-dependent output shapes",
    NUMPY: "Graph breaks on NumPy calls",
    CALL: "Graph breaks on calls Dynamo cannot trace",
    AUTOGRAD: "Graph breaks on autograd calls (backward/grad)",
    EXPLICIT: "Explicit graph breaks (torch._dynamo.graph_break())",
    OTHER: "Graph breaks",
}

FIXES = {
    LOGGING: (
        "Move the print/log call out of the compiled function (log the returned tensors after the call), or let "
        "Dynamo defer it: torch._dynamo.config.reorderable_logging_functions.add(print) (works for print and "
        "logging functions whose arguments are constants or tensors); for logging.Logger methods, "
        "torch._dynamo.config.ignore_logging_functions.add(logger.info) drops the call under compile."
    ),
    SCALAR_OUT: (
        "Keep the value a tensor: replace `t.item()` with tensor ops (`torch.where`, broadcasting, `t.clamp`) "
        "and return tensors, calling .item()/.tolist() after the compiled call."
    ),
    BRANCH: (
        "Make the branch tensor code: `y = torch.where(cond, a, b)` computes both sides without leaving the graph; "
        "for expensive or side-effecting branches use torch.cond(pred, true_fn, false_fn, (operands,)). "
        "Branch on Python values (shapes, flags) instead of tensor values where you can."
    ),
    DYN_SHAPE: (
        "Or rewrite with fixed-shape ops (torch.where with a mask, padding), so no output shape depends on the data."
    ),
    NUMPY: (
        "Use the torch equivalent of the NumPy call on the tensor, so it stays in the graph (Dynamo traces only "
        "the NumPy functions torch._numpy implements); convert to NumPy only outside the compiled function."
    ),
    # for a call Dynamo marks as skipped only: other unsupported calls have
    # reasons of their own, which PyTorch's explanation and hints give
    CALL: (
        "Wrap the call as a custom operator (torch.library.custom_op) so Dynamo treats it as one opaque op in the "
        "graph, or — if it is traceable Python — allow it: torch.compiler.allow_in_graph(fn). Calls with side effects "
        "only (timers, pids) can move outside the compiled function."
    ),
    EXPLICIT: (
        "Remove the torch._dynamo.graph_break() call if the split is not needed; each one costs a graph "
        "boundary on every call."
    ),
    AUTOGRAD: (
        "With trace_autograd_ops on, a compiled function that returns the loss it called backward() on breaks again "
        "(GB4927, the backward consumed the loss's graph): return `loss.detach()` instead."
    ),
    OTHER: "See PyTorch's explanation and hints for this break (the link in the evidence), and the source line.",
}

# NumPy functions torch._numpy lacks, and what to use instead.
TORCH_FOR_NUMPY = {
    "digitize": "torch.bucketize(x, boundaries, right=True)",
    "interp": "torch.searchsorted on the x-points, then torch.lerp between neighbours",
    "ediff1d": "torch.diff(x.flatten())",
    "polyval": "Horner's rule with tensor ops (y = y * x + c for each coefficient)",
    "histogram": "torch.histc or torch.histogram",
    "percentile": "torch.quantile(x, q / 100)",
    "nanpercentile": "torch.nanquantile(x, q / 100)",
    "median": "torch.median",
    "unique": "torch.unique",
    "searchsorted": "torch.searchsorted",
    "convolve": "torch.nn.functional.conv1d",
    "trapz": "torch.trapezoid",
    "isin": "torch.isin",
    "bincount": "torch.bincount",
    "unwrap": "tensor ops (torch.diff, torch.remainder, torch.cumsum)",
}
