"""The typed events: every recording ever written decodes into them, what the
agent sends in a real run does too, and a line that is not a valid event is
refused where it enters (counted as bad, or as an unknown kind)."""

from __future__ import annotations

import json

import msgspec
import pytest
from golden import recordings
from helpers import record, workload

from ctmon.wire import events as E
from ctmon.wire import events_compile as EC
from ctmon.wire.decode import MAX_DEPTH, Decoder, from_dict
from ctmon.wire.event_base import Unknown


@pytest.mark.parametrize("path", recordings(), ids=lambda p: p.rsplit("/", 2)[-1])
def test_every_recording_kept_as_a_fixture_decodes_whole(path: str) -> None:
    dec = Decoder()
    with open(path, "rb") as f:
        lines = [ln for ln in f if ln.strip()]
    events = dec.decode_all(lines)
    assert (dec.bad, dict(dec.unknown)) == (0, {})
    assert len(events) == len(lines)
    # decoding is faithful: every field a line holds is the struct's, with the same value
    # (a null and an absent field both mean "not known")
    for line, ev in zip(lines, events, strict=True):
        raw = json.loads(line)
        assert raw["kind"] == ev.__struct_config__.tag
        for key, value in raw.items():
            if key in ev.__struct_fields__:
                assert known(msgspec.to_builtins(getattr(ev, key))) == known(value), (key, raw["kind"])


def known(value: object) -> object:
    """``value`` without its nulls (JSON's null and a missing key say the same)."""
    if isinstance(value, dict):
        return {k: known(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):  # JSON has no tuples: a tuple field is written as a list
        return [known(v) for v in value]
    return value


@pytest.mark.slow
def test_what_a_real_agent_sends_decodes_strictly(tmp_path) -> None:
    run = record(tmp_path, [workload("graph_breaks.py"), "--steps", "3"], torch_trace=False)
    assert run.returncode == 0, run.proc.stderr[-2000:]
    dec = Decoder()
    with open(run.recording, "rb") as f:
        lines = [ln for ln in f if ln.strip()]
    kinds = {json.loads(ln)["kind"] for ln in lines}
    assert {"process", "torch", "compile_start", "compile", "graph_break", "steps"} <= kinds
    assert len(dec.decode_all(lines)) == len(lines)
    assert (dec.bad, dict(dec.unknown)) == (0, {})
    # and no field the agent writes is unknown to the types (a rename would drift silently)
    for ln in lines:
        raw = json.loads(ln)
        fields = set(E.KINDS[raw["kind"]].__struct_fields__) | {"kind"}
        assert set(raw) <= fields, (raw["kind"], set(raw) - fields)


def test_an_unknown_kind_is_counted_by_kind_not_as_bad() -> None:
    dec = Decoder()
    assert dec.decode(b'{"kind":"hologram","t":1,"x":[1,2]}') == Unknown(kind="hologram", t=1.0)
    assert dec.unknown == {"hologram": 1} and dec.bad == 0


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"[1,2]",
        b'{"t":1}',
        b'{"kind":7}',
        b'{"kind":"steps","src":"optimizer","i0":"zero","ns":[1]}',
        b'{"kind":"compile","frame_id":true}',
        b'{"kind":"exit","code":1.5}',
        b'{"kind":"output","t":null,"data":"x"}',
    ],
)
def test_a_line_that_is_not_a_valid_event_is_bad(line: bytes) -> None:
    dec = Decoder()
    assert dec.decode(line) is None
    assert dec.bad == 1 and not dec.unknown


def test_unknown_fields_are_ignored_and_missing_ones_take_defaults() -> None:
    ev = Decoder().decode(b'{"kind":"compile","compile_id":"0/1","future_field":{"a":1}}')
    assert isinstance(ev, EC.Compile)
    assert ev.compile_id == "0/1" and ev.frame_id is None and ev.restart_reasons == [] and ev.t == 0.0


def test_free_form_fields_nested_past_the_limit_are_refused() -> None:
    deep: object = 1
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    line = json.dumps({"kind": "autotune", "t": 1.0, "kernels": [{"k": deep}]}).encode()
    dec = Decoder()
    assert dec.decode(line) is None and dec.bad == 1
    very_deep = b'{"kind":"note","x":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    assert dec.decode(very_deep) is None and dec.bad == 2


def test_oversized_lines_are_refused_before_parsing() -> None:
    dec = Decoder()
    line = json.dumps({"kind": "output", "data": "x" * (2 << 20)}).encode()
    assert dec.decode(line) is None and dec.bad == 1


def test_events_built_in_memory_are_validated_the_same_way() -> None:
    assert isinstance(from_dict({"kind": "steps", "t": 2.0, "src": "api", "i0": 0, "ns": [0, 5]}), E.Steps)
    assert from_dict({"kind": "steps", "ns": "no"}) is None
    assert from_dict({"kind": "nope"}) is None


def test_encoding_a_struct_gives_the_line_it_came_from() -> None:
    line = b'{"kind":"cache","t":1.5,"compile_id":"0/0","cache":"fx_graph","result":"hit"}'
    ev = Decoder().decode(line)
    assert json.loads(msgspec.json.encode(ev)) == json.loads(line)


def test_a_cache_event_without_key_components_still_decodes() -> None:
    """Recordings made before cache records carried their key's components."""
    old = Decoder().decode(b'{"kind":"cache","t":1.5,"compile_id":"0/0","cache":"fx_graph","result":"miss","key":"f1"}')
    assert isinstance(old, EC.CacheResult) and old.key == "f1"
    assert (old.components, old.graph) == ([], None)


def test_a_cache_key_s_components_travel_bounded_without_their_values() -> None:
    """What the agent makes of an FX graph cache artifact: [attr, hash] pairs,
    an attr of hundreds of parts (inductor_config) as one, no value kept."""
    from ctmon.agent.cache_keys import COMPONENTS_MAX
    from ctmon.agent.trace_convert import TraceConverter

    lines = ["[gmhash] gm: " + "x = y\\n" * 50_000, "[f0] fx_kwargs[is_backward]: True", "not a debug line"]
    lines += [f"[c{k}] inductor_config[setting_{k}]: {k}" for k in range(300)]
    lines += [f"[p{k}] pass_{k}: None" for k in range(100)]
    payload = json.dumps({"key": "fabc", "components": lines, "cache_event_time": 1})
    (ev,) = TraceConverter().convert("fx_graph_cache_miss", 1.0, {"frame_id": 0, "frame_compile_id": 0}, payload)
    got = from_dict(json.loads(json.dumps(ev)))
    assert isinstance(got, EC.CacheResult) and got.graph == "backward" and got.key == "fabc"
    assert got.components[:2] == [("gm", "gmhash"), ("fx_kwargs[is_backward]", "f0")]
    assert got.components[2][0] == "inductor_config" and len(got.components) == COMPONENTS_MAX
    assert len(json.dumps(ev)) < 8000  # the graph's code is not in it
