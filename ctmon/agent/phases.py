"""The compile phases ctmon follows, from PyTorch's own timers.

PyTorch wraps each phase of a compile in ``dynamo_timed``, which logs a
``chromium_event`` record to the structured trace when the phase begins
("B") and ends ("E"), with the compile's id and a timestamp in µs. A compile
logs a few hundred of these (every Inductor pass has one); ctmon keeps the
few a user acts on, named as the user knows them:

* ``dynamo_tracing``: Dynamo turning the frame's bytecode into a graph;
* ``guards``: building the guards that decide when the graph is reused;
* ``aot_autograd``: AOTAutograd tracing the joint forward/backward graph and
  partitioning it (Inductor's forward compile runs inside it);
* ``inductor``: Inductor compiling one graph (forward, or the backward);
* ``code_gen``: Inductor generating and loading the kernels' code;
* ``autotune``: benchmarking kernel choices (max-autotune's templates);
* ``backward``: the backward graph, compiled lazily at the first backward.

The handler on the compiling thread calls ``phase_of`` on every chromium
record: one anchored regex match and one dict lookup.
"""

from __future__ import annotations

import re

PHASES = {
    "bytecode_tracing": "dynamo_tracing",
    "build_guards": "guards",
    "create_aot_dispatcher_function": "aot_autograd",
    "inductor_compile": "inductor",
    "code_gen": "code_gen",
    "entire_backward_compile": "backward",
}
AUTOTUNE_SUFFIX = "_template_autotuning"  # mm_template_autotuning, ...

# PyTorch writes the event as a dict whose first key is its name (pretty-printed).
_NAME = re.compile(r'\s*\{\s*"name":\s*"([^"\n]{1,200})"')


def phase_of(payload: str) -> str | None:
    """The phase a chromium event's payload marks, or None for one ctmon skips."""
    m = _NAME.match(payload)
    if m is None:
        return None
    name = m.group(1)
    phase = PHASES.get(name)
    if phase is None and name.endswith(AUTOTUNE_SUFFIX):
        return "autotune"
    return phase
