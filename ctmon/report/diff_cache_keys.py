"""``ctmon diff``: which part of a cache key changed between two runs.

Each FX graph and AOTAutograd cache record names its key and, where PyTorch
listed them, the key's components as ``[attr, hash]`` pairs (the agent's
``agent/cache_keys.py: cache_components``). A graph's records in BASE pair with the same graph's
in NEW: the same frame (as the diff pairs frames), the same cache and graph
(forward, backward, inference), the k-th of them in each run. Where the keys
differ, the entry names the components whose hashes differ and, for a
settings module's component (``inductor_config``: hundreds of settings
hashed as one), the settings in it whose values differ, from the settings
not at their defaults that each record carries (the agent's
``read_settings_in_force``)."""

from __future__ import annotations

from ctmon.report.diff_entries import Diff, frame_key, place
from ctmon.report.diff_model import CacheKeyRecord, FrameKey, RunSummary
from ctmon.store.compile_state import CompileState, record_settings
from ctmon.words.labels import CACHE_NAMES

NAMED_MAX = 8  # components named in an entry's line (its ``components`` has them all)
# a key's component that hashes a settings module -> the module's settings' prefix
SETTINGS_OF = {"inductor_config": "torch._inductor.config.", "autograd_config": "torch._functorch.config."}
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
            "settings": _settings_of(ev.settings),
        }
        for ev in cs.cache_keys
    ]


def _settings_of(raw: object) -> dict[str, object] | None:
    kept = record_settings(raw)
    return dict(kept[0]) if kept is not None else None


def changed_settings(components: list[str], old: CacheKeyRecord, now: CacheKeyRecord) -> dict[str, list[str]]:
    """For each changed component that hashes a settings module, the settings
    (qualified names) whose values differ between the two records: a setting
    one record lists and the other not is at its default in the other. None
    named where a record carried no settings (older recordings, TORCH_TRACE).

    Where neither key listed its components (AOTAutograd's, without debug
    logging), every module's settings that differ, under "" (the key hashes
    them all)."""
    a, b = old.get("settings"), now.get("settings")
    if a is None or b is None:
        return {}
    if not old["components"] and not now["components"]:
        components = [""]
    out: dict[str, list[str]] = {}
    for attr in components:
        prefix = SETTINGS_OF.get(attr) if attr else "torch."
        if prefix is None:
            continue
        names = sorted(n for n in set(a) | set(b) if n.startswith(prefix) and not _same(a, b, n))
        if names:
            out[attr] = names
    return out


def _same(a: dict[str, object], b: dict[str, object], name: str) -> bool:
    if (name in a) != (name in b):
        return False
    x, y = a.get(name), b.get(name)
    return x == y and type(x) is type(y)


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
            settings = changed_settings(names, old, now)
            subject = _subject(gkey)
            if (subject, tuple(names)) in said:  # each compile of a frame: one entry says it
                continue
            said.add((subject, tuple(names)))
            what = f"{_title(gkey)}: key changed {_which(names, old, now, settings)}"
            named = [n for attr in names or [""] for n in settings.get(attr, [])]
            if named:
                d.add("changed", "cache_key", subject, what, old["key"], now["key"], components=names, settings=named)
            else:
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


def _which(names: list[str], old: CacheKeyRecord, now: CacheKeyRecord, settings: dict[str, list[str]]) -> str:
    if names:
        more = f" and {len(names) - NAMED_MAX} more" if len(names) > NAMED_MAX else ""
        return "in " + "; ".join(_component(attr, settings) for attr in names[:NAMED_MAX]) + more
    if not old["components"] or not now["components"]:
        differ = settings.get("", [])
        if differ:
            more = f" and {len(differ) - NAMED_MAX} more" if len(differ) > NAMED_MAX else ""
            return f"(PyTorch listed no components of it; settings that differ: {', '.join(differ[:NAMED_MAX])}{more})"
        return "(PyTorch listed no components of it)"
    return "(in a component past the ones recorded)"


def _component(attr: str, settings: dict[str, list[str]]) -> str:
    """``inductor_config: max_autotune, triton.cudagraphs``: a settings
    module's component with the settings that changed in it, by their names
    inside the module."""
    names = settings.get(attr)
    if not names:
        return attr
    prefix = SETTINGS_OF[attr]
    more = f" and {len(names) - NAMED_MAX} more" if len(names) > NAMED_MAX else ""
    return f"{attr}: " + ", ".join(n[len(prefix) :] for n in names[:NAMED_MAX]) + more
