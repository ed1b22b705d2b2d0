"""The Inductor and AOTAutograd settings a cache record carries (the agent's
``read_settings_in_force``): those not at their defaults, as in force on the
compiling thread, bounded, and never an exception into the job. Real torch
config modules; a stand-in module only for a config that breaks."""

from __future__ import annotations

import json
import logging
import sys
import threading
import zlib
from typing import Any

import pytest
import torch  # noqa: F401  (the config modules below need torch imported first)
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config

from ctmon.agent.config_reads import SETTINGS_MAX, SETTINGS_STR_MAX, _setting_value, read_settings_in_force
from ctmon.agent.trace import TraceHandler
from ctmon.agent.trace_convert import TraceConverter
from ctmon.store import Session
from ctmon.store.compile_state import record_settings
from ctmon.wire.decode import Decoder

INDUCTOR = "torch._inductor.config."


def test_defaults_send_nothing_and_a_patch_is_seen_on_its_thread_only() -> None:
    before = read_settings_in_force()
    assert before is not None and not any(n.startswith(INDUCTOR + "epilogue_fusion") for n in before)
    seen: dict[str, Any] = {}
    with inductor_config.patch(epilogue_fusion=False, **{"triton.cudagraphs": True}):
        inside = read_settings_in_force()
        other = threading.Thread(target=lambda: seen.update(read_settings_in_force() or {}))
        other.start()
        other.join(timeout=60)
    assert inside is not None
    assert inside[INDUCTOR + "epilogue_fusion"] == [False, True]  # [value, default]
    assert inside[INDUCTOR + "triton.cudagraphs"] == [True, False]
    assert INDUCTOR + "epilogue_fusion" not in seen  # torch keeps a patch per context: not another thread's
    assert read_settings_in_force() == before  # the patch is gone with its context


def test_a_setting_set_by_hand_and_one_set_back_to_its_default() -> None:
    try:
        inductor_config.max_autotune_pointwise = True
        functorch_config.donated_buffer = not functorch_config._config["donated_buffer"].default
        now = read_settings_in_force() or {}
        assert now[INDUCTOR + "max_autotune_pointwise"] == [True, False]
        assert "torch._functorch.config.donated_buffer" in now
        inductor_config.max_autotune_pointwise = False  # set, but to its default: not a change
        assert INDUCTOR + "max_autotune_pointwise" not in (read_settings_in_force() or {})
    finally:
        del inductor_config.max_autotune_pointwise
        inductor_config._config["max_autotune_pointwise"].hide = False
        del functorch_config.donated_buffer
        functorch_config._config["donated_buffer"].hide = False


def test_what_the_cache_key_leaves_out_is_left_out() -> None:
    # compile_threads and trace.* are not in the FX graph cache key (_cache_config_ignore_prefix)
    with inductor_config.patch(compile_threads=3, **{"trace.enabled": True}):
        now = read_settings_in_force() or {}
    assert not [n for n in now if n.startswith((INDUCTOR + "compile_threads", INDUCTOR + "trace."))], now


def test_bounds_at_most_64_settings_and_short_values() -> None:
    bools = [k for k, e in inductor_config._config.items() if isinstance(e.default, bool) and not e.alias]
    flips = {k: not inductor_config._config[k].default for k in bools[:100] if not k.startswith("trace")}
    assert len(flips) > SETTINGS_MAX
    with inductor_config.patch(flips):
        now = read_settings_in_force() or {}
    assert len(now) == SETTINGS_MAX
    assert len(json.dumps(now)) < SETTINGS_MAX * (SETTINGS_STR_MAX + 80)


def test_values_are_scalars_or_short_texts_without_addresses() -> None:
    long_a, long_b = "x" * 500 + "a", "x" * 500 + "b"
    a, b = _setting_value(long_a), _setting_value(long_b)
    assert isinstance(a, str) and len(a) <= SETTINGS_STR_MAX and a != b  # clipped, still told apart
    assert a.endswith(f"{zlib.crc32(long_a.encode()):08x}")
    assert _setting_value([1, 2]) == "[1, 2]"
    assert _setting_value(test_bounds_at_most_64_settings_and_short_values) == (
        f"{__name__}.test_bounds_at_most_64_settings_and_short_values"
    )
    assert _setting_value(object()) == "<object>"  # its repr names an address: different every run
    assert _setting_value(float("nan")) == "nan" and _setting_value(1 << 70) == str(1 << 70)
    assert _setting_value(None) is None and _setting_value(2.5) == 2.5


class _Broken:
    """A config module of some future torch that this code does not understand."""

    _config: dict[str, Any] = {}

    def _get_dict(self, **_: Any) -> dict[str, Any]:
        raise RuntimeError("not like this")


def test_a_config_that_breaks_sends_no_settings_and_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch._inductor.config", _Broken())
    monkeypatch.setitem(sys.modules, "torch._functorch.config", object())
    assert read_settings_in_force() is None  # "not recorded", never "all at their defaults"
    # the handler still sends the cache record, without settings
    puts: list[tuple[Any, ...]] = []

    class Channel:
        disabled, event_drops = False, 0

        def put(self, record: tuple[Any, ...], urgent: bool = False) -> None:
            puts.append(record)

    rec = logging.LogRecord("torch.__trace", logging.DEBUG, __file__, 1, "", None, None)
    rec.metadata = {"artifact": {"name": "fx_graph_cache_miss", "encoding": "json"}, "frame_id": 0}
    rec.payload = "{}"
    TraceHandler(Channel(), attribute=lambda: None).handle(rec)  # type: ignore[arg-type]
    ((_, name, _, _, extra),) = puts
    assert name == "fx_graph_cache_miss" and extra == ("{}", None)
    (ev,) = TraceConverter().convert(name, 1.0, rec.metadata, extra)
    assert "settings" not in ev


def test_settings_round_trip_and_older_recordings_still_load() -> None:
    with inductor_config.patch(epilogue_fusion=False):
        extra = ("{}", read_settings_in_force())
    md = {"artifact": {"name": "fx_graph_cache_miss", "encoding": "json"}, "frame_id": 0, "frame_compile_id": 0}
    (ev,) = TraceConverter().convert("fx_graph_cache_miss", 1.0, md, extra)
    line = json.dumps({**ev, "key": "k1"})
    decoded = Decoder().decode(line)
    assert decoded.settings[INDUCTOR + "epilogue_fusion"] == [False, True]  # type: ignore[union-attr]
    old = Decoder().decode(json.dumps({k: v for k, v in ev.items() if k != "settings"}))
    assert old.settings is None  # type: ignore[union-attr]
    s = Session()
    s.apply({**ev, "key": "k1"})
    assert s.bad_events == 0
    assert s.compile.settings_in_force() == (
        {INDUCTOR + "epilogue_fusion": False, **_functorch_of(ev)},
        {INDUCTOR + "epilogue_fusion": True, **_functorch_defaults_of(ev)},
        [],
    )


def _functorch_of(ev: dict[str, Any]) -> dict[str, Any]:
    return {k: v[0] for k, v in ev["settings"].items() if k.startswith("torch._functorch")}


def _functorch_defaults_of(ev: dict[str, Any]) -> dict[str, Any]:
    return {k: v[1] for k, v in ev["settings"].items() if k.startswith("torch._functorch") and len(v) > 1}


def test_the_store_keeps_settings_bounded() -> None:
    raw: dict[str, Any] = {f"torch._inductor.config.s{i:03d}": [True, False] for i in range(100)}
    raw["torch._inductor.config.s000"] = ["x" * 1000, "y"]  # too long: dropped
    raw["torch._inductor.config.s001"] = [{"nested": 1}]  # not a scalar: dropped
    raw["torch._inductor.config.s002"] = []  # no value: dropped
    raw["torch._inductor.config.s003"] = [None]  # a setting set to None, default not said
    kept = record_settings(raw)
    assert kept is not None
    values, defaults = kept
    assert len(values) == 64 - 3 and ("torch._inductor.config.s003", None) in values
    assert "torch._inductor.config.s003" not in defaults
    assert record_settings(None) is None and record_settings("junk") is None


def test_a_setting_that_differs_between_a_runs_records_is_not_said_of_the_run() -> None:
    s = Session()
    for i, settings in enumerate(({"a.x": [True, False], "a.y": [1, 0]}, {"a.y": [1, 0]})):
        s.apply({"kind": "cache", "t": 1.0 + i, "cache": "fx_graph", "result": "miss", "settings": settings})
    assert s.bad_events == 0
    assert s.compile.settings_in_force() == ({"a.y": 1}, {"a.x": False, "a.y": 0}, ["a.x"])
    assert Session().compile.settings_in_force() is None
