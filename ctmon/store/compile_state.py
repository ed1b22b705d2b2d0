"""The compile state of a session: its frames, compile attempts, graph
breaks and caches, folded from compile events (the records themselves are
ctmon/store/compiles.py's).

Pairing rules (PyTorch emits, per compile id: ``recompile_reasons`` ->
``dynamo_start`` -> graph breaks / cache results -> ``compilation_metrics``):

* a compile attempt is final when its ``compile`` event arrives; the start
  event's stack and the guard failures are merged into it by compile id;
* a compile refused by the recompile limit has no start event and no code
  name: it is attributed to its frame by ``frame_id``;
* frames are keyed by ``frame_id`` (one per code object, stable for a run).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from ctmon.store.compiles import (
    BreakSite,
    CacheCounts,
    CompileRecord,
    ConfigValue,
    Frame,
    GuardFailures,
    Location,
    display_name,
    guard_failures,
    is_limit_hit,
)
from ctmon.store.phases import PhaseTimers
from ctmon.store.values import nonempty
from ctmon.wire import events as E
from ctmon.wire import events_compile as EC

# Dynamo settings in force at a compile, as ``compile_start`` carries them:
# sorted (key, scalar) pairs, one shared tuple per distinct combination (a job
# has one or a few), so a run of 50,000 compiles keeps a reference each.
Config = tuple[tuple[str, ConfigValue], ...]
MAX_CONFIGS = 256  # distinct combinations kept; later ones are not recorded
MAX_CONFIG_KEYS = 64
MAX_CONFIG_STR = 200


# Inductor and AOTAutograd settings not at their defaults, as a cache record
# carries them (``cache`` events' ``settings``): sorted (qualified name, value)
# pairs, interned as Config is.
SettingValue = ConfigValue | None
Settings = tuple[tuple[str, SettingValue], ...]


def record_settings(raw: object) -> tuple[Settings, dict[str, SettingValue]] | None:
    """A cache record's settings, bounded: (the values, sorted, and the
    defaults where the record says them), at most MAX_CONFIG_KEYS, scalars
    only; None where the record has none (an older recording, TORCH_TRACE)."""
    if not isinstance(raw, dict):
        return None
    values: list[tuple[str, SettingValue]] = []
    defaults: dict[str, SettingValue] = {}
    for name, pair in list(raw.items())[:MAX_CONFIG_KEYS]:
        if not isinstance(name, str) or not isinstance(pair, list) or not pair:
            continue
        if pair[0] is not None and not _config_scalar(pair[0]):
            continue
        values.append((name, pair[0]))
        if len(pair) > 1 and (pair[1] is None or _config_scalar(pair[1])):
            defaults[name] = pair[1]
    return tuple(sorted(values)), defaults


def _config_scalar(v: object) -> bool:
    return isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= MAX_CONFIG_STR)


def _same_setting(a: SettingValue, b: SettingValue) -> bool:
    return a is b or (a is not None and b is not None and _same_value(a, b))


def _same_value(a: ConfigValue, b: ConfigValue) -> bool:
    """Equal and of one kind: True is not 1 here."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _merge_failures(rec: CompileRecord, failures: GuardFailures | None) -> None:
    if failures is not None:
        rec.guard_failures, rec.guard_counts = failures.reasons, failures.counts
        rec.versions_failed = failures.total
    if rec.recompile_reason and not rec.guard_failures:  # no reasons artifact: the metrics' one
        rec.guard_failures, rec.guard_counts, rec.versions_failed = [rec.recompile_reason], [1], 1


class CompileState:
    MAX_COMPILES = 50_000
    MAX_SITE_IDS = 50
    MAX_CALLS = 100
    MAX_CACHE_KEYS = 2000

    def __init__(self) -> None:
        self.frames: dict[int | None, Frame] = {}
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
        self.breaks: dict[tuple[str | None, int | None], BreakSite] = {}
        # what a library logged, by the line that logged it (a logging call
        # inside compiled code is also a graph break at that line)
        self.library_logs: dict[tuple[str | None, int | None], E.LibraryLog] = {}
        self.specializations: list[EC.Specialization] = []  # the first SPECIALIZATIONS_MAX
        self.cache: dict[str, CacheCounts] = {"fx_graph": CacheCounts(), "aot_autograd": CacheCounts()}
        self.bypass_reasons: Counter[str] = Counter()
        # the first MAX_CACHE_KEYS records that name their key, in order: what
        # ``ctmon diff`` pairs with another run's to say which component changed
        self.cache_keys: list[EC.CacheResult] = []
        self.guard_misses: dict[str, int] = {}  # misses where the graph was cached under other shape guards
        self.time_saved_s = 0.0
        self.autotune_kernels = 0
        self.autotune_cached = 0
        self.autotune_events: list[EC.Autotune] = []
        self.cudagraph_skips: Counter[str] = Counter()
        self.recompile_limit: int | None = None
        self.active: dict[str, EC.CompileStart] = {}  # compile id -> its start
        self.calls: list[EC.CompileCall] = []  # the job's torch.compile calls (the first MAX_CALLS)
        self.call_count = 0
        self._breaks_by_compile: dict[str, int] = {}
        self._reasons: dict[str, GuardFailures] = {}
        self._configs: dict[Config, Config] = {}
        # the distinct settings sets the run's cache records carry (None: no
        # record carried any), and the defaults they name
        self._settings: dict[Settings, Settings] | None = None
        self._setting_defaults: dict[str, SettingValue] = {}
        self._config_by_compile: dict[str, Config] = {}

    # ---- events ----

    def on_call(self, ev: EC.CompileCall) -> None:
        self.call_count += 1
        if len(self.calls) < self.MAX_CALLS:
            self.calls.append(ev)

    def on_start(self, ev: EC.CompileStart) -> None:
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

    def _new_frame(self, fid: int | None, start: EC.CompileStart | None, metrics: EC.Compile | None = None) -> Frame:
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

    def on_reasons(self, ev: EC.RecompileReasons) -> None:
        self._reasons[str(ev.compile_id)] = guard_failures(ev)

    def pending_reasons(self, compile_id: str) -> list[str]:
        """The guard failures behind a compile that has started and not ended."""
        found = self._reasons.get(compile_id)
        return found.reasons if found is not None else []

    def on_compile(self, ev: EC.Compile) -> CompileRecord:
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

    def on_bwd(self, ev: EC.BwdCompile) -> None:
        self.phases.backward_done(str(ev.compile_id))
        self.bwd_compiles += 1
        dur = ev.duration_us
        secs = dur / 1e6 if dur is not None else (ev.inductor_compile_time_s or 0.0)
        self.bwd_time_s += max(0.0, secs)
        if ev.cudagraph_skip_reason:
            self.cudagraph_skips[ev.cudagraph_skip_reason[:300]] += 1

    def on_graph_break(self, ev: EC.GraphBreak) -> BreakSite:
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

    def on_cache(self, ev: EC.CacheResult) -> None:
        cache, result = ev.cache, ev.result
        if cache is None or result not in ("hit", "miss", "bypass"):
            return
        counts = self.cache.setdefault(cache, CacheCounts())
        setattr(counts, result, getattr(counts, result) + 1)
        if ev.key and len(self.cache_keys) < self.MAX_CACHE_KEYS:
            self.cache_keys.append(ev)
        if ev.settings is not None:
            self._keep_settings(ev.settings)
        if result == "miss" and ev.detail == "guard_miss":
            self.guard_misses[cache] = self.guard_misses.get(cache, 0) + 1
        if result == "bypass" and ev.reason:
            self.bypass_reasons[f"{cache}: {ev.reason[:300]}"] += 1
        saved = ev.time_saved_s
        if saved is not None and saved > 0 and result == "hit" and cache == "aot_autograd":
            self.time_saved_s += saved

    def on_autotune(self, ev: EC.Autotune) -> None:
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

    def _keep_settings(self, raw: object) -> None:
        kept = record_settings(raw)
        if kept is None:
            return
        values, defaults = kept
        if self._settings is None:
            self._settings = {}
        if len(self._settings) < MAX_CONFIGS:
            self._settings.setdefault(values, values)
        for name, default in defaults.items():
            if len(self._setting_defaults) < MAX_CONFIGS:
                self._setting_defaults.setdefault(name, default)

    # ---- views ----

    def settings_in_force(self) -> tuple[dict[str, SettingValue], dict[str, SettingValue], list[str]] | None:
        """The Inductor and AOTAutograd settings not at their defaults in
        every cache record of the run: (their values, the defaults the records
        name, the settings whose value differed between records, so the run
        cannot be said to have one). None when no record carried its settings
        (an older recording, torch's own trace, a job that compiled none)."""
        if self._settings is None:
            return None
        sets = [dict(one) for one in self._settings]
        names = sorted({name for one in sets for name in one})
        same = {n for n in names if all(n in one and _same_setting(one[n], sets[0][n]) for one in sets)}
        values = {n: sets[0][n] for n in names if n in same}
        return values, dict(self._setting_defaults), [n for n in names if n not in same]

    def config_in_force(self, compile_ids: Iterable[object]) -> dict[str, ConfigValue]:
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
