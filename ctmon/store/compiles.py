"""Frames, compiles, graph breaks and caches, folded from compile events.

Pairing rules (PyTorch emits, per compile id: ``recompile_reasons`` ->
``dynamo_start`` -> graph breaks / cache results -> ``compilation_metrics``):

* a compile attempt is final when its ``compile`` event arrives; the start
  event's stack and the guard failures are merged into it by compile id;
* a compile refused by the recompile limit has no start event and no code
  name: it is attributed to its frame by ``frame_id``;
* frames are keyed by ``frame_id`` (one per code object, stable for a run).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ctmon.store.phases import PhaseTimers
from ctmon.store.values import nonempty
from ctmon.wire import events as E
from ctmon.wire import guard_reasons

LIMIT_MARKERS = ("recompile limit", "recompile_limit", "cache_size_limit", "cache size limit")

# Dynamo settings in force at a compile, as ``compile_start`` carries them:
# sorted (key, scalar) pairs, one shared tuple per distinct combination (a job
# has one or a few), so a run of 50,000 compiles keeps a reference each.
ConfigValue = bool | int | float | str
Config = tuple[tuple[str, ConfigValue], ...]
MAX_CONFIGS = 256  # distinct combinations kept; later ones are not recorded
MAX_CONFIG_KEYS = 64
MAX_CONFIG_STR = 200


def _config_scalar(v: Any) -> bool:
    return isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= MAX_CONFIG_STR)


def _same_value(a: ConfigValue, b: ConfigValue) -> bool:
    """Equal and of one kind: True is not 1 here."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


_RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")


_VERSION_PREFIX = re.compile(r"^(\d+/\d+): ")


def split_reason(reason: str) -> tuple[str | None, str]:
    """PyTorch's recompile reason "2/0: tensor 'x' size mismatch ..." names
    the cached version whose guard failed (2/0), not the recompile (2/1):
    that version's id, and the reason without it, for saying so apart."""
    m = _VERSION_PREFIX.match(reason)
    return (m.group(1), reason[m.end() :]) if m else (None, reason)


def display_name(name: str | None) -> str | None:
    """Dynamo's resume functions, named for the user: 'forward (resumed at line 14)'."""
    if not name:
        return name
    m = _RESUME.match(name)
    if m:
        return f"{m.group(1)} (resumed at line {m.group(2)})"
    return name


def is_limit_hit(fail_type: Any, fail_reason: Any) -> bool:
    if not isinstance(fail_reason, str):
        return False
    head = fail_reason.lower()[:400]
    return any(m in head for m in LIMIT_MARKERS) and ("exceeded" in head or "hit" in head or "reached" in head)


@dataclass(slots=True)
class Location:
    file: str | None = None
    line: int | None = None
    name: str | None = None

    def text(self) -> str:
        if not self.file:
            return self.name or "?"
        return f"{self.file}:{self.line}" if self.line is not None else self.file


@dataclass(slots=True)
class GuardFailures:
    reasons: list[str]
    counts: list[int]
    total: int


_MAX_KEPT = 1 + guard_reasons.MAX_KINDS + guard_reasons.HEAD


def guard_failures(ev: E.RecompileReasons) -> GuardFailures:
    """The guard failures a ``recompile_reasons`` event carries. A recording
    made before the agent summarized them holds PyTorch's whole list (n
    reasons on the n-th recompile): summarized here the same way, so it gives
    the same results as a newer recording of the same run."""
    if ev.total is None:
        kept, counts = guard_reasons.summarize(ev.reasons)
        return GuardFailures(kept, counts, len(ev.reasons))
    kept = ev.reasons[:_MAX_KEPT]
    counts = ev.counts[: len(kept)] + [1] * (len(kept) - len(ev.counts))
    return GuardFailures(kept, counts, max(ev.total, sum(counts)))


@dataclass(slots=True)  # thousands a second in a recompile storm
class CompileRecord:
    compile_id: str
    frame_id: Any
    t: float
    start_t: float | None = None
    time_s: float = 0.0
    backend_s: float | None = None
    inductor_s: float | None = None
    code_gen_s: float | None = None
    recompile_reason: str | None = None
    # the kinds of guard failure behind a recompile (ctmon/wire/guard_reasons.py),
    # how many cached versions each stands for, and how many failed in all
    guard_failures: list[str] = field(default_factory=list)
    guard_counts: list[int] = field(default_factory=list)
    versions_failed: int = 0
    fail_type: str | None = None
    fail_reason: str | None = None
    limit_hit: bool = False
    cache_size: int | None = None
    graph_ops: int | None = None
    guards: int | None = None
    restarts: list[str] = field(default_factory=list)
    cudagraph_skip: str | None = None
    graph_breaks: int = 0
    fx_hits: int = 0
    fx_misses: int = 0
    ok: bool = True
    called_from: E.StackFrame | None = None  # the user's own line into a library's frame
    started_at: E.StackFrame | None = None  # the innermost line of the user's code when it began
    guard: Any = field(default=None, repr=False, compare=False)  # the findings engine's parse of the reason

    @property
    def is_recompile(self) -> bool:
        # a refused attempt is a recompile's, with or without its reason
        # (the limit counts a code object's compiled versions)
        return bool(self.recompile_reason) or self.limit_hit

    @property
    def span(self) -> tuple[float, float]:
        start = self.start_t if self.start_t is not None else self.t - self.time_s
        return (start, start + self.time_s)


def _merge_failures(rec: CompileRecord, failures: GuardFailures | None) -> None:
    if failures is not None:
        rec.guard_failures, rec.guard_counts = failures.reasons, failures.counts
        rec.versions_failed = failures.total
    if rec.recompile_reason and not rec.guard_failures:  # no reasons artifact: the metrics' one
        rec.guard_failures, rec.guard_counts, rec.versions_failed = [rec.recompile_reason], [1], 1


@dataclass
class Frame:
    frame_id: Any
    loc: Location  # where the user should look
    code: Location  # the code object Dynamo compiled
    module: str | None = None
    compiles: list[CompileRecord] = field(default_factory=list)
    limit_hit: bool = False
    entries: int = 0  # cache entries (compiled versions) held for the code object
    recompile_limit: int | None = None
    called_from: E.StackFrame | None = None  # a library's frame: the user's line that first led there

    @property
    def recompiles(self) -> int:
        return sum(1 for c in self.compiles if c.is_recompile)

    @property
    def time_s(self) -> float:
        return sum(c.time_s for c in self.compiles)

    @property
    def last_reason(self) -> str | None:
        for c in reversed(self.compiles):
            if c.recompile_reason:
                return c.recompile_reason
        return None

    @property
    def title(self) -> str:
        return self.loc.name or self.code.name or "?"


@dataclass
class BreakSite:
    file: str | None
    line: int | None
    reason: str  # one-line summary (PyTorch's graph-break type)
    detail: str | None = None  # full reason text
    explanation: str | None = None
    hints: list[str] = field(default_factory=list)
    user_stack: list[E.StackFrame] = field(default_factory=list)
    url: str | None = None
    gb_id: str | None = None
    called_from: E.StackFrame | None = None  # a library's break: the user's line that leads there
    count: int = 0
    first_t: float = 0.0
    last_t: float = 0.0
    compile_ids: list[str] = field(default_factory=list)
    frame_ids: set[Any] = field(default_factory=set)
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def loc(self) -> Location:
        return Location(self.file, self.line)


@dataclass
class CacheCounts:
    hit: int = 0
    miss: int = 0
    bypass: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"hit": self.hit, "miss": self.miss, "bypass": self.bypass}


class CompileState:
    MAX_COMPILES = 50_000
    MAX_SITE_IDS = 50
    MAX_CALLS = 100

    def __init__(self) -> None:
        self.frames: dict[Any, Frame] = {}
        self.compiles: list[CompileRecord] = []
        self.compile_count = 0
        self.recompile_count = 0
        self.limit_hits = 0
        self.failures = 0
        self.total_time_s = 0.0
        self.bwd_compiles = 0
        self.bwd_time_s = 0.0
        self.phases = PhaseTimers()  # PyTorch's own phase timers
        self.graph_break_count = 0
        self.breaks: dict[tuple[Any, Any], BreakSite] = {}
        # what a library logged, by the line that logged it (a logging call
        # inside compiled code is also a graph break at that line)
        self.library_logs: dict[tuple[str | None, int | None], E.LibraryLog] = {}
        self.specializations: list[E.Specialization] = []  # the first SPECIALIZATIONS_MAX
        self.cache: dict[str, CacheCounts] = {"fx_graph": CacheCounts(), "aot_autograd": CacheCounts()}
        self.bypass_reasons: Counter[str] = Counter()
        self.guard_misses: dict[str, int] = {}  # misses where the graph was cached under other shape guards
        self.time_saved_s = 0.0
        self.autotune_kernels = 0
        self.autotune_cached = 0
        self.autotune_events: list[E.Autotune] = []
        self.cudagraph_skips: Counter[str] = Counter()
        self.recompile_limit: int | None = None
        self.active: dict[str, E.CompileStart] = {}  # compile id -> its start
        self.calls: list[E.CompileCall] = []  # the job's torch.compile calls (the first MAX_CALLS)
        self.call_count = 0
        self._breaks_by_compile: dict[str, int] = {}
        self._reasons: dict[str, GuardFailures] = {}
        self._configs: dict[Config, Config] = {}
        self._config_by_compile: dict[str, Config] = {}

    # ---- events ----

    def on_call(self, ev: E.CompileCall) -> None:
        self.call_count += 1
        if len(self.calls) < self.MAX_CALLS:
            self.calls.append(ev)

    def on_start(self, ev: E.CompileStart) -> None:
        self.active[str(ev.compile_id)] = ev
        if ev.recompile_limit is not None:
            self.recompile_limit = ev.recompile_limit
        if ev.dynamo_config:
            self._keep_config(str(ev.compile_id), ev.dynamo_config)
        fid = ev.frame_id
        frame = self.frames.get(fid)
        if frame is None:
            self.frames[fid] = self._new_frame(fid, ev)
        elif (
            frame.called_from is None
            and ev.called_from is not None
            and (ev.called_from.file, ev.called_from.line) != (frame.loc.file, frame.loc.line)
        ):
            frame.called_from = ev.called_from

    def _new_frame(self, fid: Any, start: E.CompileStart | None, metrics: E.Compile | None = None) -> Frame:
        if start is not None:
            code = Location(nonempty(start.file), start.line, nonempty(start.name))
        else:
            code = Location()
        if metrics is not None and not code.file:
            code = Location(nonempty(metrics.co_filename), metrics.co_firstlineno, nonempty(metrics.co_name))
        module = start.module if start is not None else None
        loc = Location(code.file, code.line, display_name(code.name))
        if start is None or start.user_code:
            if module and start is not None and start.module_file == code.file and start.module_line == code.line:
                loc.name = f"{module}.{code.name}"  # the user's forward(), compiled directly
        elif module and start.module_user:
            # torch.compile(module): Dynamo compiled torch's wrapper; point at the module's forward()
            loc = Location(nonempty(start.module_file), start.module_line, f"{module}.forward")
        elif start.user is not None:
            u = start.user
            loc = Location(nonempty(u.file), u.line, self._told_apart(module, code) if module else code.name)
        called = start.called_from if start is not None else None
        if called is not None and (called.file, called.line) == (loc.file, loc.line):
            called = None  # the place shown is the user's own line already
        return Frame(frame_id=fid, loc=loc, code=code, module=module, called_from=called)

    def _told_apart(self, module: str, code: Location) -> str:
        """A library's frame run for ``module`` is titled by the module; when an
        earlier frame already has that title, by the code too
        (``DistributedDataParallel › contextlib.helper``): DDP's bookkeeping
        compiles four frames at one line of the user's, four names otherwise alike."""
        if not any(f.loc.name == module for f in self.frames.values()):
            return module
        stem = (code.file or "").replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".py")
        return f"{module} › {stem + '.' if stem else ''}{display_name(code.name) or '?'}"

    def on_reasons(self, ev: E.RecompileReasons) -> None:
        self._reasons[str(ev.compile_id)] = guard_failures(ev)

    def pending_reasons(self, compile_id: str) -> list[str]:
        """The guard failures behind a compile that has started and not ended."""
        found = self._reasons.get(compile_id)
        return found.reasons if found is not None else []

    def on_compile(self, ev: E.Compile) -> CompileRecord:
        cid = str(ev.compile_id)
        start = self.active.pop(cid, None)
        fid = ev.frame_id
        if fid is None and start is not None:
            fid = start.frame_id
        frame = self.frames.get(fid)
        if frame is None:
            frame = self.frames[fid] = self._new_frame(fid, start, ev)
        elif not frame.code.name and nonempty(ev.co_name):
            frame.code = Location(nonempty(ev.co_filename), ev.co_firstlineno, nonempty(ev.co_name))
        time_s = max(0.0, ev.entire_frame_compile_time_s or 0.0)
        rec = CompileRecord(
            compile_id=cid,
            frame_id=fid,
            t=ev.t,
            start_t=ev.start_time or (start.t if start is not None else None),
            time_s=time_s,
            backend_s=ev.backend_compile_time_s,
            inductor_s=ev.inductor_compile_time_s,
            code_gen_s=ev.code_gen_time_s,
            recompile_reason=ev.recompile_reason or None,
            fail_type=ev.fail_type or None,
            fail_reason=ev.fail_reason or None,
            cache_size=ev.cache_size,
            graph_ops=ev.graph_op_count,
            guards=ev.guard_count,
            restarts=[r for r in ev.restart_reasons if r][:10],
            cudagraph_skip=ev.cudagraph_skip_reason or None,
            fx_hits=ev.inductor_fx_local_cache_hit_count or 0,
            fx_misses=ev.inductor_fx_local_cache_miss_count or 0,
            called_from=start.called_from if start is not None else None,
            started_at=(start.caller or start.called_from or start.user) if start is not None else None,
        )
        _merge_failures(rec, self._reasons.pop(cid, None))
        rec.limit_hit = is_limit_hit(rec.fail_type, rec.fail_reason)
        rec.ok = rec.fail_type is None
        rec.graph_breaks = self._breaks_by_compile.pop(cid, 0)
        if ev.recompile_limit is not None:
            self.recompile_limit = ev.recompile_limit
        frame.recompile_limit = self.recompile_limit
        frame.compiles.append(rec)
        if rec.limit_hit:
            frame.limit_hit = True
            self.limit_hits += 1
        elif rec.ok and ev.has_guarded_code is not False:
            frame.entries = max(frame.entries, (rec.cache_size or 0) + 1)
        if not rec.ok and not rec.limit_hit:
            self.failures += 1
        if rec.cudagraph_skip:
            self.cudagraph_skips[rec.cudagraph_skip[:300]] += 1
        self.compile_count += 1
        if rec.is_recompile:
            self.recompile_count += 1
        self.total_time_s += time_s
        if len(self.compiles) < self.MAX_COMPILES:
            self.compiles.append(rec)
        return rec

    def on_bwd(self, ev: E.BwdCompile) -> None:
        self.phases.backward_done(str(ev.compile_id))
        self.bwd_compiles += 1
        dur = ev.duration_us
        secs = dur / 1e6 if dur is not None else (ev.inductor_compile_time_s or 0.0)
        self.bwd_time_s += max(0.0, secs)
        if ev.cudagraph_skip_reason:
            self.cudagraph_skips[ev.cudagraph_skip_reason[:300]] += 1

    def on_graph_break(self, ev: E.GraphBreak) -> BreakSite:
        file, line = nonempty(ev.file), ev.line
        summary = ev.summary or ev.reason or "graph break"
        key = (file, line)
        site = self.breaks.get(key)
        t = ev.t
        if site is None:
            site = self.breaks[key] = BreakSite(file=file, line=line, reason=summary, first_t=t)
        site.count += 1
        site.last_t = t
        reasons = site.reasons
        reasons[summary] += 1
        if summary != site.reason and reasons[summary] >= reasons[site.reason]:
            # another reason caught up: the most common one, the first seen of equals
            site.reason = reasons.most_common(1)[0][0]
        if summary == site.reason or site.detail is None:
            site.detail = ev.reason or None
            site.explanation = ev.explanation or None
            site.hints = list(ev.hints[:6])
            site.user_stack = list(ev.user_stack[:12])
            site.url = ev.url or None
            site.gb_id = ev.gb_id or None
        if site.called_from is None:
            site.called_from = ev.called_from
        if ev.compile_id is not None:
            cid = ev.compile_id
            if len(site.compile_ids) < self.MAX_SITE_IDS:
                site.compile_ids.append(cid)
            if len(self._breaks_by_compile) < 100_000:
                self._breaks_by_compile[cid] = self._breaks_by_compile.get(cid, 0) + 1
        site.frame_ids.add(ev.frame_id)
        self.graph_break_count += 1
        return site

    def on_cache(self, ev: E.CacheResult) -> None:
        cache, result = ev.cache, ev.result
        if cache is None or result not in ("hit", "miss", "bypass"):
            return
        counts = self.cache.setdefault(cache, CacheCounts())
        setattr(counts, result, getattr(counts, result) + 1)
        if result == "miss" and ev.detail == "guard_miss":
            self.guard_misses[cache] = self.guard_misses.get(cache, 0) + 1
        if result == "bypass" and ev.reason:
            self.bypass_reasons[f"{cache}: {ev.reason[:300]}"] += 1
        saved = ev.time_saved_s
        if saved is not None and saved > 0 and result == "hit" and cache == "aot_autograd":
            self.time_saved_s += saved

    def on_autotune(self, ev: E.Autotune) -> None:
        for k in ev.kernels:
            self.autotune_kernels += 1
            state = str(k.get("autotune_cache_state") or k.get("cache_state") or "")
            if state in ("hit", "local_hit", "remote_hit") or k.get("cached") is True:
                self.autotune_cached += 1
        if len(self.autotune_events) < 1000:
            self.autotune_events.append(ev)

    def _keep_config(self, compile_id: str, raw: dict[str, Any]) -> None:
        pairs = [(k, v) for k, v in list(raw.items())[:MAX_CONFIG_KEYS] if isinstance(k, str) and _config_scalar(v)]
        if not pairs:
            return
        config: Config = tuple(sorted(pairs))
        kept = self._configs.get(config)
        if kept is None:
            if len(self._configs) >= MAX_CONFIGS:
                return
            kept = self._configs[config] = config
        if compile_id in self._config_by_compile or len(self._config_by_compile) < self.MAX_COMPILES:
            self._config_by_compile[compile_id] = kept

    # ---- views ----

    def config_in_force(self, compile_ids: Any) -> dict[str, ConfigValue]:
        """The Dynamo settings with one value in every compile of
        ``compile_ids`` that recorded its settings ({} when none did: an
        older recording, or torch's own trace). A setting that differs
        between them is left out: the job cannot be said to have it."""
        found = [self._config_by_compile.get(str(c)) for c in compile_ids]
        known = [c for c in found if c is not None]
        if not known:
            return {}
        out: dict[str, ConfigValue] = dict(known[0])
        for other in set(known[1:]):
            if other is known[0]:
                continue
            theirs = dict(other)
            out = {k: v for k, v in out.items() if k in theirs and _same_value(theirs[k], v)}
        return out

    @property
    def compiled_count(self) -> int:
        """Attempts that compiled: ``compile_count`` less the recompile
        limit's refusals (said apart: "8 compiles, 7 recompiles + 1 refused")."""
        return self.compile_count - self.limit_hits

    @property
    def recompiled_count(self) -> int:
        """Recompiles that compiled (every refusal is a recompile's)."""
        return max(0, self.recompile_count - self.limit_hits)

    def frames_sorted(self) -> list[Frame]:
        return sorted(self.frames.values(), key=lambda f: (-len(f.compiles), str(f.frame_id)))

    def breaks_sorted(self) -> list[BreakSite]:
        return sorted(self.breaks.values(), key=lambda b: (-b.count, str(b.file or ""), b.line or 0))
