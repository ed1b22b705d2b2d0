"""Compile caches: misses where hits were expected, bypasses, disabled caches."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ctmon.findings.model import RANK_CACHE, Finding
from ctmon.findings.pages import CACHING_PAGE
from ctmon.words.phrases import cut

if TYPE_CHECKING:
    from ctmon.store.session import Session

PORTABLE = (
    "torch.compiler.save_cache_artifacts() after a warm run and torch.compiler.load_cache_artifacts() "
    "before compiling in a fresh environment (e.g. a new container)"
)


def tmp_default(cache_dir: str | None) -> bool:
    """Inductor's default: a torchinductor_<user> directory in the temp dir."""
    name = (cache_dir or "").rstrip("/").rsplit("/", 1)[-1]
    return name.startswith("torchinductor_") and (cache_dir or "").startswith(("/tmp/", "/var/tmp/"))


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_TARGET = re.compile(r"Unsupported call_(?:function|method) target (?P<target>.+?)\.\s*(?:\n|$)")
_FN_NAME = re.compile(r"Function name: (?P<name>\S+)")
_FN_MODULE = re.compile(r"Function module: (?P<module>[^,\s]+)")


def _stable(text: str) -> str:
    """Without object addresses, so ids and titles are the same on every run."""
    return " ".join(_ADDRESS.sub("", text).split())


def used_inductor(s: Session) -> bool:
    cs = s.compile
    if any(c.inductor_s for c in cs.compiles):
        return True
    return any(c.hit or c.miss or c.bypass for c in cs.cache.values())


def _location(s: Session, misses_only: bool = False) -> tuple[str | None, int | None]:
    for c in s.compile.compiles:
        if misses_only and not c.fx_misses:
            continue
        frame = s.compile.frames.get(c.frame_id)
        if frame is not None:
            return frame.loc.file, frame.loc.line
    return None, None


def _known(fact: str) -> str:
    """What is known about a bypass no workload here has been fixed for: the
    fact, no change claimed, and PyTorch's page on the caches."""
    return f"{fact} ctmon knows no change proven to make it cacheable; PyTorch's page on the compile caches: {CACHING_PAGE}"


def _bypass_fix(reason: str) -> str:
    low = reason.lower()
    target = _TARGET.search(reason)
    if target:
        name = _FN_NAME.search(reason)
        module = _FN_MODULE.search(reason)
        what = name.group("name") if name else _stable(target.group("target"))
        where = f" (from {module.group('module')})" if module and module.group("module") != "None" else ""
        return (
            f"The graph calls `{what}`{where} as an opaque function — typically one marked with "
            "torch.compiler.allow_in_graph or torch.fx.wrap — and AOTAutograd cannot key such a call, so this "
            f"graph is recompiled on every start. Let Dynamo trace `{what}` (remove allow_in_graph): the graph "
            "is then cached."
        )
    if "higherorderoperator" in low or "higher order" in low:
        return _known(
            "The graph contains a higher-order op the cache cannot key (e.g. a custom autograd.Function or "
            "flex_attention with a closure): PyTorch compiles it again on every start."
        )
    if "unpicklable" in low or "pickle" in low:
        return _known(
            "Something the graph captures cannot be pickled into a cache key (often a closure, lambda or custom "
            "object baked in as a constant)."
        )
    if "freezing" in low:
        return _known("PyTorch does not cache the AOTAutograd graphs of a compile with freezing enabled.")
    if "not enabled" in low or "disabled" in low:
        return (
            "The cache was turned off for this compile. Enable the caches: unset TORCHINDUCTOR_FORCE_DISABLE_CACHES "
            "(the next start then hits them); torch._inductor.config.fx_graph_cache and "
            "torch._functorch.config.enable_autograd_cache turn each cache off too (both on by default)."
        )
    if "torchbind" in low or "scriptobject" in low:
        return _known("Graphs holding TorchScript/torchbind objects are not cached.")
    return _known("PyTorch could not cache this graph for the reason above.")


def rule_caches(s: Session) -> list[Finding]:
    out: list[Finding] = []
    cs, meta = s.compile, s.meta
    fx, aot = cs.cache.get("fx_graph"), cs.cache.get("aot_autograd")
    env = meta.env or {}
    if env.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES") not in (None, "", "0") and used_inductor(s):
        # Only worth saying when Inductor compiled something: the eager and
        # aot_eager backends use no Inductor cache.
        file, line = _location(s)
        out.append(
            Finding(
                id="cache:disabled",
                rule="caches",
                severity="warning",
                title="Inductor's compile caches are disabled (TORCHINDUCTOR_FORCE_DISABLE_CACHES)",
                file=file,
                line=line,
                detail=(
                    f"Every start compiles from scratch ({cs.total_time_s + cs.bwd_time_s:.1f} s of compiling in "
                    "this run); with caches, a restart would reuse earlier compiles."
                ),
                evidence=[f"TORCHINDUCTOR_FORCE_DISABLE_CACHES={env['TORCHINDUCTOR_FORCE_DISABLE_CACHES']}"],
                fix="Unset TORCHINDUCTOR_FORCE_DISABLE_CACHES (it is meant for debugging the caches themselves).",
                rank=RANK_CACHE + 30,
            )
        )
    entries = meta.cache_entries or {}
    for cache, n in sorted(cs.guard_misses.items()):
        label = {"fx_graph": "FX graph", "aot_autograd": "AOTAutograd"}.get(cache, cache)
        out.append(
            Finding(
                id=f"cache:guard-miss:{cache}",
                rule="caches",
                severity="warning",
                title=f"{label} cache held these graphs but missed {n}× on their shape guards",
                detail=(
                    "The same graph was cached, compiled for other input sizes; with dynamic shapes the cached entry "
                    "is only reused when the new sizes satisfy its guards."
                ),
                evidence=[f"{label}: {n} guard miss(es) (PyTorch: cache_status_detailed = guard_miss)"],
                # what is known: no workload here has turned guard misses into hits
                fix=(
                    "What is known: a cached graph is reused only for sizes its guards accept (a static graph: its "
                    "own sizes; a dynamic one, as torch._dynamo.mark_dynamic makes it: the range and "
                    "specialisations it was compiled for), and this run's compiles are stored for this run's sizes. "
                    f"PyTorch's page on the compile caches: {CACHING_PAGE}"
                ),
                rank=RANK_CACHE + 26,
            )
        )
    if fx is not None and fx.miss and not fx.hit and entries.get("fx_graph", 0) > 0:
        # The entries counted at start are the directory's, not this job's:
        # a directory set with TORCHINDUCTOR_CACHE_DIR is as often shared by
        # every job of a team as kept for one. One run cannot tell entries
        # of other graphs (the first run of new code: the normal case) from
        # this job's own under a key that changed (all full misses alike),
        # so this is said, not warned about. Where PyTorch says the job's
        # own graph was there (a guard miss), cache:guard-miss warns.
        file, line = _location(s, misses_only=True)
        out.append(
            Finding(
                id="cache:expected-hits",
                rule="caches",
                severity="info",
                file=file,
                line=line,
                title=(
                    f"FX graph cache missed {fx.miss}×: none of the {entries['fx_graph']} entries already in "
                    f"{meta.cache_dir} matched this run's graphs"
                ),
                detail=(
                    "The directory held compiled graphs at start, but not these: they may be other models' or other "
                    "code's graphs (a shared directory holds every job's; the first run of new code misses every "
                    "graph there). If they were this job's from an earlier run, something in the cache key changed — "
                    "code, shapes, dtypes, torch/triton version, Inductor config, or Python values baked into the graph."
                ),
                evidence=[
                    f"cache dir: {meta.cache_dir}",
                    f"entries at start: {entries}",
                    f"FX graph: {fx.hit} hit / {fx.miss} miss / {fx.bypass} bypass",
                ]
                + ([f"AOTAutograd: {aot.hit} hit / {aot.miss} miss / {aot.bypass} bypass"] if aot else []),
                fix=(
                    "If other jobs share the directory, these misses are expected: give this job a TORCHINDUCTOR_CACHE_DIR "
                    "of its own to see whether its graphs come back. Otherwise keep what the graph depends on stable "
                    "between runs (same shapes and dtypes, same config, no Python values that change baked into the "
                    f"graph), and keep TORCHINDUCTOR_CACHE_DIR the same. To reuse compiles across machines, use {PORTABLE}."
                ),
                rank=RANK_CACHE + 25,
            )
        )
    bypasses: dict[tuple[str, str], list[str]] = {}
    for reason, n in cs.bypass_reasons.most_common():
        cache, _, why = reason.partition(": ")
        first = _stable(why.strip().splitlines()[0] if why.strip() else why).rstrip(". ")
        bypasses.setdefault((cache, first), []).extend([why] * n)
    for (cache, first), whys in bypasses.items():
        label = {"fx_graph": "FX graph", "aot_autograd": "AOTAutograd"}.get(cache, cache)
        n = len(whys)
        file, line = _location(s)
        out.append(
            Finding(
                id=f"cache:bypass:{cache}:{first[:60]}",
                rule="caches",
                severity="warning",
                title=f"{label} cache bypassed {n}×: {cut(first, 120)}",
                file=file,
                line=line,
                detail="A bypassed graph is never cached: it compiles again on every start.",
                evidence=[f"{label} cache bypass: {' '.join(_stable(w).split())[:300]}" for w in dict.fromkeys(whys)][
                    :5
                ],
                fix=_bypass_fix(whys[0]),
                rank=RANK_CACHE + 20 + n,
            )
        )
    if (
        fx is not None
        and fx.miss
        and not fx.hit
        and not entries.get("fx_graph")
        and tmp_default(meta.cache_dir)
        and not env.get("TORCHINDUCTOR_CACHE_DIR")
    ):
        out.append(
            Finding(
                id="cache:cold-tmp",
                rule="caches",
                severity="info",
                title="Compiled from a cold cache in a temporary directory",
                detail=(
                    f"Inductor's cache is {meta.cache_dir}, which is lost on reboot and is private to each container; "
                    "the next start of this job can reuse this run's compiles only if the directory survives."
                ),
                evidence=[f"FX graph: {fx.miss} miss; AOTAutograd: {aot.miss if aot else 0} miss"],
                fix=(
                    "Set TORCHINDUCTOR_CACHE_DIR to a directory that persists: the next start with the same code "
                    "and config then hits the cache. To carry compiles to a fresh machine or container, PyTorch "
                    "describes torch.compiler.save_cache_artifacts() / load_cache_artifacts() on its page on the "
                    f"compile caches: {CACHING_PAGE}"
                ),
                rank=RANK_CACHE - 100,
            )
        )
    return out


RULES = (rule_caches,)
