"""``ctmon diff``: which part of a cache key changed between two runs.

Each FX graph and AOTAutograd cache record names its key and, where PyTorch
listed them, the key's components as ``[attr, hash]`` pairs (the agent's
``agent/cache_keys.py: cache_components``). A graph's records in BASE pair with the same graph's
in NEW: the same frame (as the diff pairs frames), the same cache and graph
(forward, backward, inference), the k-th of them in each run. Where the keys
differ, the entry names the components whose hashes differ."""

from __future__ import annotations

from ctmon.report.diff_entries import Diff, frame_key, place
from ctmon.report.diff_model import CacheKeyRecord, FrameKey, RunSummary
from ctmon.store.compile_state import CompileState
from ctmon.words.labels import CACHE_NAMES

NAMED_MAX = 8  # components named in an entry's line (its ``components`` has them all)
GraphKey = tuple[FrameKey, str, str | None]


def cache_key_records(cs: CompileState) -> list[CacheKeyRecord]:
    """The store's cache records that name a key, as a run summary holds them."""
    return [
        {
            "frame_id": ev.frame_id,
            "cache": ev.cache,
            "graph": ev.graph,
            "key": ev.key,
            "components": [[attr, digest] for attr, digest in ev.components],
        }
        for ev in cs.cache_keys
    ]


def changed_components(base: list[list[str]], new: list[list[str]]) -> list[str]:
    """The attrs whose hashes differ, or that one key has and the other not,
    in the order the keys list them (none where a side listed none: PyTorch
    lists AOTAutograd's only under debug logging)."""
    if not base or not new:
        return []
    a, b = dict((x[0], x[1]) for x in base), dict((x[0], x[1]) for x in new)
    order = [attr for attr, _ in new] + [attr for attr, _ in base if attr not in b]
    return [attr for attr in order if a.get(attr) != b.get(attr)]


def cache_keys(d: Diff, base: RunSummary, new: RunSummary) -> None:
    a, b = _by_graph(base), _by_graph(new)
    said: set[tuple[str, tuple[str, ...]]] = set()
    for gkey, records in b.items():
        for old, now in zip(a.get(gkey, []), records, strict=False):
            if old["key"] == now["key"]:
                continue
            names = changed_components(old["components"], now["components"])
            subject = _subject(gkey)
            if (subject, tuple(names)) in said:  # each compile of a frame: one entry says it
                continue
            said.add((subject, tuple(names)))
            what = f"{_title(gkey)}: key changed {_which(names, old, now)}"
            d.add("changed", "cache_key", subject, what, old["key"], now["key"], components=names)


def _by_graph(run: RunSummary) -> dict[GraphKey, list[CacheKeyRecord]]:
    frames = {f["frame_id"]: frame_key(f, run) for f in run["frames"]}
    out: dict[GraphKey, list[CacheKeyRecord]] = {}
    for r in run.get("cache_keys") or []:
        fkey = frames.get(r["frame_id"])
        if fkey is not None and r["cache"]:
            out.setdefault((fkey, r["cache"], r["graph"]), []).append(r)
    return out


def _subject(gkey: GraphKey) -> str:
    (file, line, _name), cache, graph = gkey
    return f"{cache}:{place(file, line)}" + (f":{graph}" if graph else "")


def _title(gkey: GraphKey) -> str:
    (file, line, _name), cache, graph = gkey
    label = f"{CACHE_NAMES.get(cache, cache)} cache for {place(file, line)}"
    return f"{label} {graph}" if graph else label


def _which(names: list[str], old: CacheKeyRecord, now: CacheKeyRecord) -> str:
    if names:
        more = f" and {len(names) - NAMED_MAX} more" if len(names) > NAMED_MAX else ""
        return "in " + ", ".join(names[:NAMED_MAX]) + more
    if not old["components"] or not now["components"]:
        return "(PyTorch listed no components of it)"
    return "(in a component past the ones recorded)"
