"""What the compiling thread has in force, read for each compile and cache
record (ctmon/agent/trace.py sends it along): the recompile limit, the
Dynamo settings the findings advise on, and the Inductor and AOTAutograd
settings not at their defaults (what the FX graph and AOTAutograd cache keys
hash), so that advice never suggests a setting already on and ``ctmon diff``
names the setting that changed a cache key. Each reader never raises: the
record it rides on is sent whatever a future torch's config does."""

from __future__ import annotations

import math
import os
import sys
import zlib
from typing import Any


def read_dynamo_config() -> dict[str, object]:
    cfg = sys.modules.get("torch._dynamo.config")
    if cfg is None:
        return {}
    for name in ("recompile_limit", "cache_size_limit"):
        val = getattr(cfg, name, None)
        if isinstance(val, int):
            return {"recompile_limit": val}
    return {}


# The Dynamo settings findings advise on, recorded at each compile so that a
# setting already on in the job is never suggested (and the advice says so).
# Names only: a key this torch lacks, hides or deprecates is left out.
CONFIG_KEYS = (
    "capture_scalar_outputs",
    "capture_dynamic_output_shape_ops",
    "trace_autograd_ops",
    "automatic_dynamic_shapes",
    "assume_static_by_default",
    "specialize_int",
    "specialize_float",
    "allow_unspec_int_on_nn_module",
    "compiled_autograd",
    "optimize_ddp",
    "suppress_errors",
    "recompile_limit",
)
CONFIG_STR_MAX = 200


def read_config_in_force() -> dict[str, object]:
    """The values of ``CONFIG_KEYS`` in force on the calling (compiling)
    thread: torch keeps ``config.patch`` overrides per context, so this sees
    them. Scalars only (bool, int, float, str up to CONFIG_STR_MAX); about
    50 us for the twelve reads. Never raises: the compile record it rides on
    must be sent whatever a future torch's config does."""
    cfg = sys.modules.get("torch._dynamo.config")
    if cfg is None:
        return {}
    entries = getattr(cfg, "_config", None)
    out: dict[str, object] = {}
    for name in CONFIG_KEYS:
        try:
            entry = entries.get(name) if isinstance(entries, dict) else None
            if entry is not None and getattr(entry, "deprecated", False):
                continue  # reading it would print PyTorch's deprecation warning in the job's output
            val = getattr(cfg, name)
        except Exception:
            continue
        if isinstance(val, float) and not math.isfinite(val):
            continue  # JSON has no NaN or infinity
        if isinstance(val, int) and not -(1 << 63) <= val < 1 << 63:
            continue  # past what a 64-bit reader decodes
        if isinstance(val, (bool, int, float)) or (isinstance(val, str) and len(val) <= CONFIG_STR_MAX):
            out[name] = val
    return out


# The settings modules whose values a cache key hashes, each with what the key
# leaves out: the FX graph key hashes torch._inductor.config as
# save_config_portable gives it (less the prefixes in
# _cache_config_ignore_prefix), AOTAutograd's hashes torch._functorch.config as
# save_config does (less the keys in _save_config_ignore).
SETTINGS_MODULES = (
    ("torch._inductor.config", "_cache_config_ignore_prefix", None),
    ("torch._functorch.config", None, "_save_config_ignore"),
)
SETTINGS_MAX = 64  # settings sent per cache record
SETTINGS_STR_MAX = 200
# Most of Inductor's environment variables set a setting's default itself
# (``max_autotune = os.environ.get("TORCHINDUCTOR_MAX_AUTOTUNE") == "1"``), so
# the config module cannot tell them from defaults; PyTorch names them after
# the setting, and a setting so named is sent, its default left out.
_ENV_PREFIX = {"torch._inductor.config": "TORCHINDUCTOR_"}
_env_named: dict[str, tuple[str, ...]] = {}  # module -> its settings the environment named, read once


def read_settings_in_force() -> dict[str, list[object]] | None:
    """The Inductor and AOTAutograd settings not at their defaults, as in
    force on the calling (compiling) thread: ``{qualified name: [value,
    default]}`` (no default where the environment set it), at most
    SETTINGS_MAX, values scalars or clipped reprs (``_setting_value``).
    None when neither module could be read (nothing to compare a run by).

    Reads them as the cache key does (the module's ``_get_dict``, with the
    key's exclusions), asking for those not at their defaults only and with
    ``readonly_values``: PyTorch keeps that dict per context and recomputes
    only the settings changed since, so a call costs a copy of the few
    settings changed. Each is then compared with its entry's default (one
    set back to its default is left out). Never raises."""
    out: dict[str, list[object]] = {}
    read = False
    for module, prefix_attr, keys_attr in SETTINGS_MODULES:
        cfg = sys.modules.get(module)
        if cfg is None:
            continue
        try:
            _module_settings(cfg, module, prefix_attr, keys_attr, out)
            read = True
        except Exception:  # a future torch's config: the record is sent without its settings
            continue
    return out if read else None


def _module_settings(
    cfg: Any, module: str, prefix_attr: str | None, keys_attr: str | None, out: dict[str, list[object]]
) -> None:
    entries = cfg._config
    prefixes = list(getattr(cfg, prefix_attr, None) or []) if prefix_attr else []
    ignored = list(getattr(cfg, keys_attr, None) or []) if keys_attr else []
    get_dict = cfg._get_dict
    try:
        values = get_dict(ignored_keys=ignored, ignored_prefixes=prefixes, skip_default=True, readonly_values=True)
    except TypeError:  # torch before readonly_values
        values = get_dict(ignored_keys=ignored, ignored_prefixes=prefixes, skip_default=True)
    for key, value in values.items():
        if len(out) >= SETTINGS_MAX:
            return
        entry = entries.get(key)
        default = getattr(entry, "default", None)
        if not _is_default(value, default):
            out[f"{module}.{key}"] = [_setting_value(value), _setting_value(default)]
    for key in _env_settings(module, entries):
        name = f"{module}.{key}"
        hashed = key not in ignored and not key.startswith(tuple(prefixes))
        if name not in out and hashed and len(out) < SETTINGS_MAX:
            # not overridden since: its value is the default the environment set
            out[name] = [_setting_value(getattr(entries[key], "default", None))]


def _is_default(value: object, default: object) -> bool:
    if value is default:
        return True
    try:
        return type(value) is type(default) and bool(value == default)
    except Exception:
        return False


def _env_settings(module: str, entries: dict[str, object]) -> tuple[str, ...]:
    """The settings of ``module`` that a variable of the job's environment is
    named after (TORCHINDUCTOR_MAX_AUTOTUNE: max_autotune). Read once: the
    module read its environment when imported."""
    named = _env_named.get(module)
    if named is None:
        prefix = _ENV_PREFIX.get(module)
        named = ()
        if prefix:
            keys = (var[len(prefix) :].lower() for var in list(os.environ) if var.startswith(prefix))
            named = tuple(key for key in keys if key in entries)
        _env_named[module] = named
    return named


def _setting_value(value: object) -> object:
    """A setting's value as the wire carries it: a scalar as it is, anything
    else as a short text (a function or class by its qualified name; a repr
    with an address by its type), clipped to SETTINGS_STR_MAX with a digest
    of the whole, so two long values that differ still read as different."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and -(1 << 63) <= value < 1 << 63:
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, str):
        text = value
    elif callable(value):
        text = f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__qualname__)}"
    else:
        text = repr(value)
        if " at 0x" in text:  # an address differs in every run
            text = f"<{type(value).__qualname__}>"
    if len(text) <= SETTINGS_STR_MAX:
        return text
    return f"{text[: SETTINGS_STR_MAX - 10]}…{zlib.crc32(text.encode('utf-8', 'replace')):08x}"
