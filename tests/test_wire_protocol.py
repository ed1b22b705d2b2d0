"""The wire format: encoding, decoding and splitting a byte stream into lines."""

from __future__ import annotations

import json
import math
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctmon.wire import events as E
from ctmon.wire import protocol
from ctmon.wire.decode import Decoder
from ctmon.wire.protocol import LineSplitter, decode, encode

# ---------------------------------------------------------------- strategies

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.text(max_size=10), children, max_size=5),
    ),
    max_leaves=25,
)
events = st.builds(
    lambda kind, t, fields: {**fields, "kind": kind, "t": t},
    st.sampled_from(sorted(protocol.KNOWN_KINDS)) | st.text(min_size=1, max_size=20),
    st.floats(min_value=0, max_value=4e9, allow_nan=False),
    st.dictionaries(st.text(max_size=12), json_values, max_size=6),
)


# ------------------------------------------------------------------- encode


def test_encode_is_one_utf8_line_ending_in_newline():
    ev = {"kind": "output", "t": 1.5, "stream": "stdout", "data": "a\nb\r\nc\u2028d ünïcødé ✓"}
    line = encode(ev)
    assert isinstance(line, bytes)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1, "newlines inside strings must be escaped"
    # non-ASCII is written as UTF-8, not \u escapes (ensure_ascii=False)
    assert "ünïcødé ✓".encode() in line
    assert decode(line) == ev


def test_encode_is_compact():
    assert encode({"kind": "note", "t": 1, "a": [1, 2]}) == b'{"kind":"note","t":1,"a":[1,2]}\n'


@pytest.mark.parametrize(
    "ev",
    [
        {
            "kind": "session",
            "t": 1795346317.653325,
            "v": 1,
            "ctmon": "0.1.0",
            "id": "20261122-111837-x-5458",
            "mode": "record",
            "command": ["python", "x.py"],
            "cwd": "/tmp",
            "host": "vm",
            "pid": 5458,
            "job_pid": 5465,
        },
        {"kind": "steps", "t": 1795346343.371579, "src": "optimizer", "i0": 0, "ns": [0, 14742597, 8585432]},
        {
            "kind": "compile",
            "t": 1.0,
            "compile_id": "0/3",
            "frame_id": 0,
            "entire_frame_compile_time_s": 0.003193,
            "fail_type": "Unsupported",
            "fail_reason": "Dynamo recompile limit exceeded\n  Explanation: ...",
        },
        {"kind": "exit", "t": 2.0, "code": None, "signal": "SIGKILL"},
        {"kind": "some_future_kind", "t": 3.0, "new_field": {"nested": [1, 2.5, None, True]}},
    ],
)
def test_round_trip_real_shapes(ev):
    assert decode(encode(ev)) == ev
    assert decode(encode(ev).decode()) == ev  # str input works too


def test_non_finite_floats_are_written_as_null():
    nan, inf = float("nan"), float("inf")
    ev = {"kind": "sample", "t": 5.0, "a": nan, "b": [inf, {"c": -inf, "d": 1.5}], "e": (1, nan), "ok": 2.0}
    line = encode(ev)
    # strict JSON: no NaN / Infinity tokens
    json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c} written"))
    out = decode(line)
    assert out == {"kind": "sample", "t": 5.0, "a": None, "b": [None, {"c": None, "d": 1.5}], "e": [1, None], "ok": 2.0}


def test_non_finite_t_is_not_written_as_a_number():
    out = decode(encode({"kind": "note", "t": float("nan")}))
    assert out is not None
    assert math.isfinite(out["t"])


def test_unserialisable_values_are_written_as_strings():
    line = encode({"kind": "note", "t": 1.0, "path": pathlib.PurePosixPath("/a/b"), "s": {3}})
    out = decode(line)
    assert out["path"] == "/a/b"
    assert out["s"] == "{3}"


def test_lone_surrogates_become_replacement_characters_in_valid_utf8():
    """A file name whose bytes are not UTF-8 reaches Python as lone
    surrogates; the line written is still valid UTF-8 (readers require it),
    the odd bytes shown as U+FFFD."""
    ev = {"kind": "output", "t": 1.0, "data": "bad \udcff byte"}
    line = encode(ev)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    line.decode("utf-8")  # strict
    assert decode(line) == dict(ev, data="bad \ufffd byte")
    assert Decoder().decode(line) == E.Output(t=1.0, stream="stdout", data="bad \ufffd byte")
    # a line an earlier writer encoded with surrogatepass is read the same way
    old = b'{"kind":"output","t":1.0,"data":"bad ' + "\udcff".encode("utf-8", "surrogatepass") + b' byte"}'
    assert Decoder().decode(old) == E.Output(t=1.0, stream="stdout", data="bad \ufffd byte")


@settings(max_examples=150, deadline=None)
@given(events)
@pytest.mark.slow
def test_round_trip_property(ev):
    line = encode(ev)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line) == ev


# ------------------------------------------------------------------- decode


def test_decode_unknown_kinds_and_fields_are_kept():
    ev = decode(b'{"kind":"from_the_future","t":1.0,"x":{"y":[1]},"z":null}')
    assert ev == {"kind": "from_the_future", "t": 1.0, "x": {"y": [1]}, "z": None}
    ev = decode(b'{"kind":"steps","t":1.0,"src":"api","i0":0,"ns":[0],"brand_new":1}')
    assert ev["brand_new"] == 1


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"   ",
        b"not json",
        b"[1, 2, 3]",
        b'"a string"',
        b"42",
        b"null",
        b"true",
        b"{}",
        b'{"t": 1.0}',
        b'{"kind": 5, "t": 1.0}',
        b'{"kind": null, "t": 1.0}',
        b'{"kind": ["steps"], "t": 1.0}',
        b'{"kind": "steps", "t": 1.0',  # cut
        b'{"kind": "note", "t": 1.0}}',  # trailing garbage
        b'\xff\xfe{"kind":"note"}',  # not UTF-8
        b'{"kind": "note", "msg": "\xc3"}',  # invalid UTF-8 inside a string
        b"\x00\x01\x02",
    ],
)
def test_decode_rejects_non_events(line):
    assert decode(line) is None
    if line.isascii():
        assert decode(line.decode("ascii")) is None


def test_decode_rejects_too_deep_nesting_without_raising():
    depth = 100_000
    line = b'{"kind":"note","t":1,"x":' + b"[" * depth + b"]" * depth + b"}"
    assert decode(line) is None


def test_decode_rejects_oversized_lines():
    pad = "x" * protocol.MAX_LINE_BYTES
    assert decode(('{"kind":"note","t":1,"p":"' + pad + '"}').encode()) is None
    # just under the limit is fine
    small = '{"kind":"note","t":1,"p":"' + "x" * (protocol.MAX_LINE_BYTES - 40) + '"}'
    assert len(small) <= protocol.MAX_LINE_BYTES
    assert decode(small.encode())["kind"] == "note"


@pytest.mark.parametrize(
    "raw, expected",
    [
        ('{"kind":"note"}', 0.0),
        ('{"kind":"note","t":null}', 0.0),
        ('{"kind":"note","t":"1795346317.6"}', 0.0),
        ('{"kind":"note","t":true}', 0.0),
        ('{"kind":"note","t":false}', 0.0),
        ('{"kind":"note","t":[1]}', 0.0),
        ('{"kind":"note","t":{"s":1}}', 0.0),
        ('{"kind":"note","t":1795346317}', 1795346317),
        ('{"kind":"note","t":1795346317.25}', 1795346317.25),
    ],
)
def test_decode_bad_t_is_replaced(raw, expected):
    ev = decode(raw.encode())
    assert ev is not None and ev["kind"] == "note"
    assert ev["t"] == expected
    assert not isinstance(ev["t"], bool)


@pytest.mark.parametrize(
    "raw",
    [
        '{"kind":"note","t":NaN}',
        '{"kind":"note","t":Infinity}',
        '{"kind":"note","t":-Infinity}',
        '{"kind":"note","t":1e400}',
        '{"kind":"note","t":1' + "0" * 400 + "}",
    ],
    ids=["nan", "inf", "-inf", "float-overflow", "huge-int"],
)
def test_decode_t_that_is_not_a_finite_time_is_replaced(raw):
    """``t`` is documented as float Unix seconds; a value that is not a finite
    float (NaN, +-Infinity, an integer too large for a float) is as invalid as
    a string and must not reach the store, where it poisons durations or
    raises OverflowError on float()."""
    ev = decode(raw.encode())
    assert ev is not None
    t = ev["t"]
    assert isinstance(t, (int, float)) and not isinstance(t, bool)
    try:
        ft = float(t)
    except OverflowError:
        pytest.fail(f"t is an integer too large for a float ({len(str(t))} digits)")
    assert math.isfinite(ft), f"t decoded as {ft}"


def test_decoding_lines_skips_blank_and_bad_lines():
    lines = [b"", b"  ", b'{"kind":"note","t":1}', b"garbage", b"\r", b'{"kind":"exit","t":2,"code":0}\r']
    dec = Decoder()
    assert [E.kind_of(e) for e in dec.decode_all(lines)] == ["note", "exit"]
    assert dec.bad == 1  # blank lines are not lines


def test_clip():
    assert protocol.clip(None) is None
    assert protocol.clip(12) == "12"
    assert protocol.clip("short", 10) == "short"
    s = "y" * 1000
    c = protocol.clip(s, 100)
    assert len(c) <= 100 + 30
    assert c.startswith("y" * 80)
    assert "chars cut" in c
    assert protocol.clip("z" * 100, 100) == "z" * 100


def test_step_sources_rank():
    assert protocol.STEP_RANK["api"] > protocol.STEP_RANK["optimizer"] > protocol.STEP_RANK["compiled_call"]


# ------------------------------------------------------------- LineSplitter


def test_splitter_lines_split_across_chunks():
    sp = LineSplitter()
    assert sp.feed(b'{"kind":"no') == []
    assert sp.pending == b'{"kind":"no'
    assert sp.feed(b'te","t":1}\n{"kind"') == [b'{"kind":"note","t":1}']
    assert sp.pending == b'{"kind"'
    assert sp.feed(b':"exit","t":2}\n') == [b'{"kind":"exit","t":2}']
    assert sp.pending == b""
    assert sp.oversized == 0


def test_splitter_many_lines_in_one_chunk():
    sp = LineSplitter()
    assert sp.feed(b"a\nb\nc\nd") == [b"a", b"b", b"c"]
    assert sp.pending == b"d"


def test_splitter_crlf_lines_still_decode():
    sp = LineSplitter()
    lines = sp.feed(b'{"kind":"note","t":1}\r\n{"kind":"exit","t":2,"code":0}\r\n')
    assert len(lines) == 2
    assert [decode(x)["kind"] for x in lines] == ["note", "exit"]


def test_splitter_empty_lines_are_harmless():
    sp = LineSplitter()
    lines = sp.feed(b'\n\n{"kind":"note","t":1}\n\n\n')
    assert [x for x in lines if x] == [b'{"kind":"note","t":1}']
    assert all(x == b"" for x in lines if x != b'{"kind":"note","t":1}')
    assert [E.kind_of(e) for e in Decoder().decode_all(lines)] == ["note"]
    assert sp.pending == b""


def test_splitter_exactly_max_is_kept():
    sp = LineSplitter(max_line=10)
    assert sp.feed(b"0123456789\n") == [b"0123456789"]
    assert sp.oversized == 0
    sp.feed(b"01234")
    assert sp.feed(b"56789\n") == [b"0123456789"]
    assert sp.oversized == 0


def test_splitter_oversized_line_in_one_chunk_is_dropped_and_counted():
    sp = LineSplitter(max_line=10)
    assert sp.feed(b"x" * 11 + b"\nok\n") == [b"ok"]
    assert sp.oversized == 1
    assert sp.pending == b""


def test_splitter_oversized_line_streamed_is_dropped_and_resyncs():
    sp = LineSplitter(max_line=10)
    assert sp.feed(b"x" * 8) == []
    assert sp.feed(b"x" * 8) == []  # now over the limit: discarded as it streams
    assert sp.oversized == 1
    assert len(sp.pending) <= 10
    for _ in range(100):  # a very long line costs nothing to skip
        assert sp.feed(b"y" * 1000) == []
        assert len(sp.pending) <= 10
    assert sp.oversized == 1, "one long line counts once"
    assert sp.feed(b"zz\nok\nne") == [b"ok"]  # the rest of the long line is dropped, then back in sync
    assert sp.pending == b"ne"
    assert sp.feed(b"xt\n") == [b"next"]
    assert sp.oversized == 1


def test_splitter_oversized_when_newline_arrives():
    sp = LineSplitter(max_line=10)
    assert sp.feed(b"x" * 8) == []
    assert sp.feed(b"xxx\nok\n") == [b"ok"]
    assert sp.oversized == 1


def test_splitter_two_oversized_lines_count_twice():
    sp = LineSplitter(max_line=4)
    assert sp.feed(b"aaaaaa\nbb\ncccccccc") == [b"bb"]
    assert sp.feed(b"cc\nd\n") == [b"d"]
    assert sp.oversized == 2


def test_splitter_newline_only_chunks():
    sp = LineSplitter(max_line=4)
    sp.feed(b"abc")
    assert sp.feed(b"\n") == [b"abc"]
    assert sp.feed(b"\n") == [b""]


def _model(stream: bytes, max_line: int) -> tuple[list[bytes], int, bytes]:
    parts = stream.split(b"\n")
    complete, tail = parts[:-1], parts[-1]
    lines = [p for p in complete if len(p) <= max_line]
    oversized = sum(1 for p in complete if len(p) > max_line) + (1 if len(tail) > max_line else 0)
    return lines, oversized, (tail if len(tail) <= max_line else b"")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"\n")), max_size=20),
    st.integers(min_value=1, max_value=24),
)
def test_splitter_matches_a_model(chunks, max_line):
    sp = LineSplitter(max_line=max_line)
    out: list[bytes] = []
    for c in chunks:
        out.extend(sp.feed(c))
        assert len(sp.pending) <= max_line
    lines, oversized, pending = _model(b"".join(chunks), max_line)
    assert out == lines
    assert sp.oversized == oversized
    assert sp.pending == pending


@settings(max_examples=40, deadline=None)
@given(st.lists(events, min_size=1, max_size=5), st.data())
@pytest.mark.slow
def test_splitter_any_chunking_gives_the_same_events(evs, data):
    stream = b"".join(encode(e) for e in evs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    sp = LineSplitter()
    lines = [ln for c in chunks for ln in sp.feed(c)]
    assert [decode(x) for x in lines] == evs
    assert sp.pending == b""
