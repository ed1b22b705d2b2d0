"""The names ctmon gives PyTorch's own parts, written one way everywhere.

PyTorch's keys (``fx_graph``, ``dynamo_tracing``) are how the recording and
the report JSON name them; these are how a sentence on the screen or in a
report does.
"""

from __future__ import annotations

# The two compile caches whose hits and misses ctmon counts, by report key.
CACHE_NAMES = {"fx_graph": "FX graph", "aot_autograd": "AOTAutograd"}

# A compile's phases as PyTorch's timers name them (wire/protocol.py COMPILE_PHASES).
PHASE_NAMES = {
    "dynamo_tracing": "Dynamo tracing",
    "guards": "guards",
    "aot_autograd": "AOTAutograd",
    "inductor": "Inductor",
    "code_gen": "code generation",
    "autotune": "autotuning",
    "backward": "backward graphs",
}


def cache_name(key: str) -> str:
    """``FX graph`` for ``fx_graph``; an unknown key as it is."""
    return CACHE_NAMES.get(key, key)
