"""A recompile's guard failures, bounded: what the agent sends and the store keeps.

On a recompile PyTorch lists the first failed guard of every cached version of
the frame, newest first, so its n-th recompile lists n reasons, and a frame
that recompiles on every call (a Python int guarded by value: ``k == 0``,
``k == 1``, ...) sends lists that grow without bound. Most of those reasons
are one guard at other values. ``summarize`` looks at the newest ``EXAMINED``
reasons (as many as the store ever read) and keeps, in PyTorch's order:

* the first reason (PyTorch's ``recompile_reason``);
* the first reason of each *kind* of failure: the text without its compile-id
  prefix, its values masked (``k == #``), so versions that failed the same
  guard at other values are one kind; the store reads the cause from each
  kind's first reason (ctmon/findings/guards.py ``cause``);
* the first few distinct reasons whatever their kind (a finding's "also
  failed" evidence);

at most ``MAX_KINDS`` kinds and ``TEXT_BUDGET`` characters in all, with how
many of the examined reasons each kept one stands for. Standard library
only: the agent in the job imports it (ctmon/agent/trace_convert.py), and the
store applies it to recordings written before the agent did (their whole
lists), so both give the same results.
"""

from __future__ import annotations

import re

#: Reasons looked at, newest cached version first (each costs a regex pass
#: on the sender thread; a storm has thousands, all alike past the first few).
EXAMINED = 64
#: Kinds of failure kept beyond the first reason.
MAX_KINDS = 16
#: Distinct reasons kept from the head of the list, whatever their kind.
HEAD = 6
#: Characters of reason text kept in all; the first reason is kept whatever
#: its length (the agent clips each reason to a few KB).
TEXT_BUDGET = 6000

_VERSION = re.compile(r"^\s*(?:!\d+/)?\d+/\d+:\s*")
# A number standing alone (a guarded value, a size, a line number), not one
# inside a name (``___stack0``, ``layer3``), a subscript (``size()[0]``,
# ``args[1]``), a hex address or the dimension of a tensor guard ("at index 1"):
# those say *which* value was guarded, and stay in the kind.
_VALUE = re.compile(r"(?<![\w\[.])(?<!index )-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w\]])")
_PADDING = re.compile(r"[ \t]{2,}")


def kind_of(reason: str) -> str:
    """The reason without its compile-id prefix, its values masked and its
    padding squeezed (Dynamo pads a guard to align its comment: ``k == 9``
    gets one space more than ``k == 10``)."""
    return _PADDING.sub(" ", _VALUE.sub("#", _VERSION.sub("", reason, count=1)))


def summarize(reasons: list[str]) -> tuple[list[str], list[int]]:
    """The reasons worth keeping, in PyTorch's order, and how many of the
    examined ones each stands for: a kind's first reason stands for the ones
    of its kind not kept; ``len(reasons) - sum(counts)`` were not examined or
    are in no kept kind."""
    reasons = reasons[:EXAMINED]
    kinds = [kind_of(r) for r in reasons]
    first: dict[str, int] = {}  # kind -> index of its first reason
    for i, k in enumerate(kinds):
        first.setdefault(k, i)
    leaders = list(first.values())
    # the first reason, then each kind's first (they decide the cause), then the head
    kept = _within_budget(reasons, leaders[: MAX_KINDS + 1] + _head(reasons))
    return [reasons[i] for i in kept], _counts(kinds, first, kept)


def _head(reasons: list[str]) -> list[int]:
    """Where the first HEAD distinct reasons are (a version's prefix aside)."""
    out: list[int] = []
    seen: set[str] = set()
    for i, r in enumerate(reasons):
        text = _VERSION.sub("", r, count=1)
        if text not in seen:
            seen.add(text)
            out.append(i)
            if len(out) == HEAD:
                break
    return out


def _within_budget(reasons: list[str], wanted: list[int]) -> list[int]:
    """The wanted reasons, in order of want, while their text fits TEXT_BUDGET
    (the first always); returned in PyTorch's order."""
    kept: set[int] = set()
    used = 0
    for i in wanted:
        n = len(reasons[i])
        if i in kept or (kept and used + n > TEXT_BUDGET):
            continue
        kept.add(i)
        used += n
    return sorted(kept)


def _counts(kinds: list[str], first: dict[str, int], kept: list[int]) -> list[int]:
    """Per kept reason, the examined ones it stands for: a kind's first, every
    one of its kind not kept itself; any other, itself."""
    size: dict[str, int] = {}
    for k in kinds:
        size[k] = size.get(k, 0) + 1
    kept_of: dict[str, int] = {}
    for i in kept:
        kept_of[kinds[i]] = kept_of.get(kinds[i], 0) + 1
    return [size[kinds[i]] - kept_of[kinds[i]] + 1 if first[kinds[i]] == i else 1 for i in kept]
