"""A cache record's key, as the parts PyTorch built it from.

PyTorch's FX graph and AOTAutograd cache artifacts list the key's components
(its debug lines). ctmon keeps each as ``[attr, hash]`` so that ``ctmon diff``
can say which part of a key changed between two runs (ctmon/report/
diff_cache_keys.py); the values are never copied.
"""

from __future__ import annotations

import hashlib
import re

# The cache key's components: PyTorch's debug lines, "[<hash>] <attr>[<sub>]: <value>",
# one JSON string each. Only the attr and its hash are kept (a value can be a
# whole graph's code); the rest of each string is skipped, never copied.
COMPONENTS_MAX = 64  # pairs kept per cache record
SUBS_MAX = 16  # an attr with more parts (inductor_config: hundreds) is kept as one pair
_LINES_MAX = 4000  # debug lines read at most
_COMPONENTS_START = re.compile(r'"components"\s*:\s*\[')
_COMPONENT = re.compile(r'"\[([^\]"\\]{1,100})\] ([^"\\:\[]{1,200})(\[[^"\\\]]{0,200}\])?: ')
_STRING_START = re.compile(r'\s*,?\s*"')
# the two values kept: which graph of a compile an FX graph cache record is for
_GRAPH_KINDS = {"fx_kwargs[is_backward]": "backward", "fx_kwargs[is_inference]": "inference"}


def cache_components(payload: str) -> tuple[list[list[str]], str | None]:
    """A cache artifact's key components as ``[attr, hash]`` pairs (at most
    COMPONENTS_MAX, each clipped), and which graph it keys ("forward",
    "backward", "inference"; None where the components do not say).

    An attr of up to SUBS_MAX parts keeps each (``fx_kwargs[cpp_wrapper]``);
    one of more is one pair, its hash a digest of its parts' hashes, so a
    change in any part still shows, under the attr's name."""
    start = _COMPONENTS_START.search(payload)
    if start is None:
        return [], None
    parts: dict[str, list[tuple[str, str]]] = {}  # attr -> [(sub, hash)], in PyTorch's order
    flags: dict[str, bool] = {}
    pos, lines = start.end(), 0
    while lines < _LINES_MAX:
        lines += 1
        opening = _STRING_START.match(payload, pos)
        if opening is None:  # the list's end
            break
        m = _COMPONENT.match(payload, opening.end() - 1)
        if m is not None:
            digest, attr, sub = m.group(1), m.group(2), m.group(3) or ""
            parts.setdefault(attr, []).append((sub, digest))
            if attr + sub in _GRAPH_KINDS:
                flags[attr + sub] = payload.startswith("True", m.end())
        # else not a "[hash] attr: value" line: passed over whole
        pos = _string_end(payload, m.end() if m is not None else opening.end())
        if pos < 0:
            break
    return _pairs(parts), _graph_kind(flags)


def _string_end(payload: str, pos: int) -> int:
    """Just past the quote that closes the JSON string ``pos`` is inside
    (-1: none). str.find runs at C speed: a value can be a whole graph's code."""
    while True:
        quote = payload.find('"', pos)
        if quote < 0:
            return -1
        backslashes = 0
        while payload[quote - 1 - backslashes] == "\\":
            backslashes += 1
        if backslashes % 2 == 0:
            return quote + 1
        pos = quote + 1


def _pairs(parts: dict[str, list[tuple[str, str]]]) -> list[list[str]]:
    out: list[list[str]] = []
    for attr, subs in parts.items():
        if len(subs) == 1 and not subs[0][0]:
            out.append([attr[:120], subs[0][1][:24]])
        elif len(subs) <= SUBS_MAX:
            out.extend([(attr + sub)[:120], digest[:24]] for sub, digest in subs)
        else:
            joined = "\n".join(f"{sub} {digest}" for sub, digest in subs)
            out.append([attr[:120], hashlib.sha256(joined.encode()).hexdigest()[:24]])
    return out[:COMPONENTS_MAX]


def _graph_kind(flags: dict[str, bool]) -> str | None:
    if not flags:
        return None
    for attr, kind in _GRAPH_KINDS.items():
        if flags.get(attr):
            return kind
    return "forward"
