"""The findings engine: what is wrong, where, and what to change.

Pure: a function of the session store alone, so it runs the same live (the
TUI recomputes it when the store changes), on replay and in reports, and tests
can drive it with events alone. Rules live by topic:

* recompiles.py -- recompile limit (hit and approaching), shape recompiles,
  Python-scalar recompiles (including .item() values after a graph break),
  other guard kinds, compile failures;
* cascades.py   -- one cause that recompiled several frames at once (causes.py
  decides which recompiles share a cause);
* breaks.py     -- graph breaks by cause, each site at file:line; breaks in
  the step loop (warnings) apart from one-offs (info);
* glue.py       -- eager code between a frame's graphs that costs a share of
  the step time (sampled);
* caches.py     -- misses where hits were expected, bypasses, disabled caches;
* perf.py       -- compile cost, late compiles, step-time spikes, cudagraph
  skips, an idle GPU;
* silent.py     -- what a run does not say by itself: a job that failed (the
  exception and where), compiles that captured no operation;
* generate_eager.py -- generate() on a compiled model that ran eager.

A clean run has no ``warning`` or ``critical`` finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctmon.findings import (
    breaks,
    caches,
    cascades,
    compile_failures,
    generate_eager,
    glue,
    perf,
    rank_divergence,
    recompiles,
    silent,
)
from ctmon.findings.guard_names import name_users_tensor
from ctmon.findings.model import SEVERITIES, Finding, order
from ctmon.wire.events_compile import StackFrame

if TYPE_CHECKING:
    from ctmon.store.session import Session

__all__ = ["SEVERITIES", "Finding", "analyze"]

_RULES = (
    recompiles.RULES
    + compile_failures.RULES
    + cascades.RULES
    + breaks.RULES
    + glue.RULES
    + caches.RULES
    + perf.RULES
    + silent.RULES
    + generate_eager.RULES
    + rank_divergence.RULES
)


def analyze(session: Session, *, strict: bool = False) -> list[Finding]:
    """Every rule's findings, most severe first.

    ``strict`` lets a rule's exception through: tests set it, so a rule that
    breaks on a real recording fails the test instead of vanishing.
    """
    out: list[Finding] = []
    for rule in _RULES:
        try:
            out.extend(rule(session))
        except (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError):
            if strict:
                raise
            # A malformed recording must not hide the other findings.
            continue
    _lead_in(session, out)
    rank_divergence.say_scope(session, out)  # figures of one rank's store say which
    return order(out)


def _lead_in(session: Session, found: list[Finding]) -> None:
    """A finding located in a library's code (a frame or break site inside
    transformers, say) also names the user's own line that leads there,
    as the frame or site it points at recorded it."""
    cs = session.compile
    known: dict[tuple[str | None, int | None], StackFrame] = {}
    for site in cs.breaks.values():
        if site.called_from is not None:
            known.setdefault((site.file, site.line), site.called_from)
    for frame in cs.frames.values():
        if frame.called_from is not None:
            known.setdefault((frame.loc.file, frame.loc.line), frame.called_from)
            known.setdefault((frame.code.file, frame.code.line), frame.called_from)
    if not known:
        return
    # a line of a library file no frame or site starts at (a guard's source
    # line inside the compiled frame): the user's line, if that file has one
    by_file: dict[str | None, set[tuple[str | None, int | None]]] = {}
    for (file, _), c in known.items():
        by_file.setdefault(file, set()).add((c.file, c.line))
    for f in found:
        if f.called_from is None and f.file:
            f.called_from = known.get((f.file, f.line))
            if f.called_from is None and len(by_file.get(f.file, ())) == 1:
                f.called_from = next(c for (file, _), c in known.items() if file == f.file)
        if f.argument is not None and f.called_from is not None:
            f.fix = name_users_tensor(f.fix, f.argument, f.called_from.code)
