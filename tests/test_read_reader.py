"""Reading recordings: every failure is a one-line RecordingError, every cut is survivable."""

from __future__ import annotations

import io
import json
import os

import pytest

from ctmon.read.recording import READ_CHUNK, ReadStats, RecordingError, iter_stream, open_recording, read_recording
from ctmon.store import Session
from ctmon.wire import protocol
from ctmon.wire.decode import typed
from ctmon.wire.events import kind_of

SESSION = {
    "kind": "session",
    "t": 1795346328.5,
    "v": 1,
    "ctmon": "0.1.0",
    "id": "20261122-111848-x-1",
    "mode": "record",
    "command": ["python", "x.py"],
    "cwd": "/tmp",
    "host": "vm",
    "pid": 10,
    "job_pid": 11,
}
EVENTS = [
    SESSION,
    {"kind": "process", "t": 1795346328.7, "pid": 11, "python": "3.11.7"},
    {"kind": "steps", "t": 1795346334.1, "src": "compiled_call", "i0": 0, "ns": [0]},
    {
        "kind": "compile_start",
        "t": 1795346334.15,
        "compile_id": "0/0",
        "frame_id": 0,
        "name": "pool",
        "file": "/w/recompile_limit.py",
        "line": 7,
        "user_code": True,
    },
    {
        "kind": "compile",
        "t": 1795346334.43,
        "compile_id": "0/0",
        "frame_id": 0,
        "co_name": "pool",
        "co_filename": "/w/recompile_limit.py",
        "co_firstlineno": 7,
        "entire_frame_compile_time_s": 0.279,
    },
    {"kind": "output", "t": 1795346334.63, "stream": "stdout", "data": "ok\n"},
    {"kind": "exit", "t": 1795346336.28, "code": 0, "signal": None},
]


def write(tmp_path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def recording_bytes(events=EVENTS) -> bytes:
    return b"".join(protocol.encode(e) for e in events)


def typed_all(events: list[dict]) -> list:
    """Events as the reader gives them: typed, validated."""
    return [typed(e) for e in events]


def read_all(path: str) -> tuple[list, ReadStats]:
    st = ReadStats()
    return list(read_recording(path, st)), st


def error_for(path: str) -> str:
    with pytest.raises(RecordingError) as ei:
        list(read_recording(path))
    msg = str(ei.value)
    assert msg and "\n" not in msg, f"message must be one line: {msg!r}"
    assert "Traceback" not in msg
    return msg


# ------------------------------------------------------------ unreadable


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.jsonl")
    msg = error_for(path)
    assert "no such recording" in msg and path in msg


def test_directory(tmp_path):
    msg = error_for(str(tmp_path))
    assert "directory" in msg


@pytest.mark.parametrize("data", [b"", b"\n", b"   \n\n\t\n"], ids=["empty", "newline", "whitespace"])
def test_empty_file(tmp_path, data):
    msg = error_for(write(tmp_path, "e.jsonl", data))
    assert "empty" in msg


@pytest.mark.parametrize(
    "data",
    [
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)),
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + os.urandom(64),  # gzip
        bytes(1024),
        recording_bytes()[:50] + b"\x00" + recording_bytes()[50:],  # NUL inside the head
    ],
    ids=["png", "gzip", "zeros", "nul-in-head"],
)
def test_binary_file(tmp_path, data):
    msg = error_for(write(tmp_path, "b.jsonl", data))
    assert "not a ctmon recording" in msg


@pytest.mark.parametrize(
    "first",
    [
        b"hello world",
        b"[1, 2, 3]",
        b'{"no_kind": true, "t": 1}',
        b'{"kind": 3, "t": 1}',
        "caf\xe9 latin-1 text".encode("latin-1"),
        b"# ctmon recording",
    ],
)
def test_first_line_not_an_event(tmp_path, first):
    msg = error_for(write(tmp_path, "t.jsonl", first + b"\n" + recording_bytes()))
    assert "not a ctmon recording" in msg
    assert "first line" in msg


def test_text_without_any_event(tmp_path):
    # a single long line with no newline in the first 4 KiB, never an event
    msg = error_for(write(tmp_path, "t.txt", b"lorem ipsum " * 1000))
    assert "not a ctmon recording" in msg


def test_open_recording_returns_file_at_start(tmp_path):
    path = write(tmp_path, "r.jsonl", recording_bytes())
    with open_recording(path) as f:
        assert f.tell() == 0
        assert f.read() == recording_bytes()


# --------------------------------------------------------------- readable


def test_full_recording(tmp_path):
    evs, st = read_all(write(tmp_path, "r.jsonl", recording_bytes()))
    assert evs == typed_all(EVENTS)
    assert st.events == len(EVENTS) and st.lines == len(EVENTS)
    assert st.bad_lines == 0 and st.oversized == 0
    assert not st.truncated_tail
    assert st.first_kind == "session" and st.version == 1
    assert st.warnings == []


def test_recording_cut_mid_line_yields_everything_before(tmp_path):
    data = recording_bytes()
    # cut inside the last line (the exit event)
    cut = len(data) - 10
    evs, st = read_all(write(tmp_path, "cut.jsonl", data[:cut]))
    assert evs == typed_all(EVENTS[:-1])
    assert st.truncated_tail
    assert any("cut" in w for w in st.warnings)
    assert st.bad_lines == 0


@pytest.mark.parametrize("keep_lines", [1, 3, 5])
def test_cut_at_every_byte_of_a_line(tmp_path, keep_lines):
    lines = [protocol.encode(e) for e in EVENTS]
    head = b"".join(lines[:keep_lines])
    nxt = lines[keep_lines]
    for k in range(1, len(nxt) - 1):
        evs, st = read_all(write(tmp_path, f"c{k}.jsonl", head + nxt[:k]))
        assert evs == typed_all(EVENTS[:keep_lines]), k
        assert st.truncated_tail, k


def test_newer_protocol_version_warns_but_reads(tmp_path):
    newer = dict(SESSION, v=protocol.PROTOCOL_VERSION + 7, fancy={"x": 1})
    future = {"kind": "quantum_flux", "t": 1795346330.0, "level": 11}
    evs, st = read_all(write(tmp_path, "n.jsonl", recording_bytes([newer, future, *EVENTS[1:]])))
    assert st.version == protocol.PROTOCOL_VERSION + 7
    assert any("newer" in w for w in st.warnings)
    assert len(evs) == len(EVENTS) + 1
    s = Session().apply_all(evs)
    assert s.newer_protocol
    assert s.unknown["quantum_flux"] == 1
    assert s.exit is not None and s.exit.code == 0
    assert s.compile.compile_count == 1


def test_unknown_kinds_and_fields_are_skipped_by_the_store(tmp_path):
    extra = [
        {"kind": "hologram", "t": 1795346331.0, "x": [1, 2]},
        {
            "kind": "compile_start",
            "t": 1795346334.16,
            "compile_id": "1/0",
            "frame_id": 1,
            "name": "g",
            "file": "/w/a.py",
            "line": 3,
            "new_field": {"deep": [None]},
        },
    ]
    evs, st = read_all(write(tmp_path, "u.jsonl", recording_bytes([*EVENTS[:3], *extra, *EVENTS[3:]])))
    assert st.bad_lines == 0
    s = Session().apply_all(evs)
    assert s.unknown == {"hologram": 1}
    assert s.bad_events == 0
    assert set(s.compile.frames) == {0, 1}


def test_bad_lines_are_counted_and_skipped(tmp_path):
    lines = [protocol.encode(e) for e in EVENTS]
    junk = [b"this is not json\n", b"[1,2]\n", b'{"kind": 42}\n', b"\xff\xfe\xfd\n", b'{"t": 1}\n']
    data = lines[0] + lines[1] + b"".join(junk) + b"".join(lines[2:])
    evs, st = read_all(write(tmp_path, "bad.jsonl", data))
    assert evs == typed_all(EVENTS)
    assert st.bad_lines == len(junk)
    assert st.lines == len(EVENTS) + len(junk)
    assert any(str(len(junk)) in w and "skipped" in w for w in st.warnings)


def test_blank_lines_are_not_bad_lines(tmp_path):
    data = recording_bytes().replace(b"\n", b"\n\n")
    evs, st = read_all(write(tmp_path, "blank.jsonl", data))
    assert evs == typed_all(EVENTS)
    assert st.bad_lines == 0 and st.warnings == []


def test_crlf_recording(tmp_path):
    data = recording_bytes().replace(b"\n", b"\r\n")
    evs, st = read_all(write(tmp_path, "crlf.jsonl", data))
    assert evs == typed_all(EVENTS)
    assert st.bad_lines == 0


def test_oversized_line_in_the_middle_is_skipped(tmp_path):
    lines = [protocol.encode(e) for e in EVENTS]
    huge = b'{"kind":"output","t":1.0,"data":"' + b"x" * (protocol.MAX_LINE_BYTES + 10) + b'"}\n'
    data = lines[0] + lines[1] + huge + b"".join(lines[2:])
    evs, st = read_all(write(tmp_path, "big.jsonl", data))
    assert evs == typed_all(EVENTS)
    assert st.oversized == 1


def test_events_spanning_read_chunks(tmp_path):
    evs = [SESSION] + [
        {"kind": "output", "t": 1795346330.0 + i, "stream": "stdout", "data": f"line {i} " + "z" * (i % 500)}
        for i in range(2000)
    ]
    data = recording_bytes(evs)
    assert len(data) > 3 * READ_CHUNK
    got, st = read_all(write(tmp_path, "long.jsonl", data))
    assert got == typed_all(evs)
    assert st.bad_lines == 0 and not st.truncated_tail


def test_iter_stream_on_a_pipe_like_object():
    class Dribble(io.RawIOBase):
        """Returns at most 7 bytes per read, like a slow socket."""

        def __init__(self, data: bytes) -> None:
            self._b = io.BytesIO(data)

        def read(self, n: int = -1) -> bytes:
            return self._b.read(min(7, n if n > 0 else 7))

        def readable(self) -> bool:
            return True

    st = ReadStats()
    got = list(iter_stream(Dribble(recording_bytes()), st))
    assert got == typed_all(EVENTS)
    assert st.events == len(EVENTS)


def test_iter_stream_partial_tail_flagged():
    st = ReadStats()
    data = recording_bytes() + b'{"kind":"steps","t":1,"ns":[1,2'
    assert list(iter_stream(io.BytesIO(data), st)) == typed_all(EVENTS)
    assert st.truncated_tail


def test_first_line_longer_than_the_sniffed_head(tmp_path):
    big = dict(SESSION, command=["python", "x" * 10_000])
    evs, st = read_all(write(tmp_path, "wide.jsonl", recording_bytes([big, *EVENTS[1:]])))
    assert evs[0] == typed(big) and len(evs) == len(EVENTS)


def test_utf8_bom_is_tolerated(tmp_path):
    evs, _ = read_all(write(tmp_path, "bom.jsonl", b"\xef\xbb\xbf" + recording_bytes()))
    assert [kind_of(e) for e in evs] == [e["kind"] for e in EVENTS]


def test_only_a_cut_first_line(tmp_path):
    msg = error_for(write(tmp_path, "c.jsonl", recording_bytes()[:30]))
    assert "not a ctmon recording" in msg


def test_recording_of_only_non_events_after_a_valid_head(tmp_path):
    # head sniff passes (first line is an event) but then nothing else is; still readable
    evs, st = read_all(write(tmp_path, "x.jsonl", protocol.encode(SESSION) + b"junk\n" * 3))
    assert evs == typed_all([SESSION])
    assert st.bad_lines == 3


def test_real_recording_shape_round_trips_through_report(tmp_path):
    from ctmon.report.build import build_report

    evs, _ = read_all(write(tmp_path, "r.jsonl", recording_bytes()))
    r = build_report(Session().apply_all(evs))
    json.dumps(r)
    assert r["exit_code"] == 0
    assert r["compile"]["compiles"] == 1
    assert r["session_id"] == SESSION["id"]


# ------------------------------------------------------------ what the user is told


def _ctmon_report(path: str, *args: str):
    import subprocess
    import sys

    from helpers import ROOT, env_with

    return subprocess.run(
        [sys.executable, "-m", "ctmon", "report", path, *args],
        cwd=ROOT,
        env=env_with(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_second_session_header_keeps_the_first_and_warns(tmp_path):
    other = dict(SESSION, id="20261122-999999-other-2", command=["python", "other.py"], job_pid=99)
    data = recording_bytes() + recording_bytes([other, *EVENTS[1:]])  # cat a.jsonl b.jsonl
    evs, _ = read_all(write(tmp_path, "cat.jsonl", data))
    s = Session().apply_all(evs)
    assert s.meta.session_id == SESSION["id"] and s.meta.command == ["python", "x.py"] and s.meta.pid == 11
    (note,) = s.notes
    assert note.level == "warning"
    assert note.message == (
        f"recording holds a second session header at event {len(EVENTS) + 1} "
        "(two recordings concatenated?); showing the first"
    )
    out = _ctmon_report(write(tmp_path, "cat2.jsonl", data), "--json")
    rep = json.loads(out.stdout)
    assert rep["session_id"] == SESSION["id"]
    assert any("second session header" in n["message"] for n in rep["notes"])


def test_unreadable_lines_become_a_warning_note_in_report_and_replay(tmp_path):
    from ctmon.read.feeds import RecordingFeed

    lines = [protocol.encode(e) for e in EVENTS]
    huge = b'{"kind":"output","t":1.0,"data":"' + b"x" * (protocol.MAX_LINE_BYTES + 10) + b'"}\n'
    data = lines[0] + lines[1] + huge + b"not json\n" + b"".join(lines[2:]) + b'{"kind":"out'
    path = write(tmp_path, "bad.jsonl", data)
    want = "3 line(s) of the recording could not be read (1 oversized, 1 unterminated, 1 corrupt) and were skipped"
    out = _ctmon_report(path, "--json")
    assert out.returncode == 0, out.stderr
    assert any(n["message"] == want and n["level"] == "warning" for n in json.loads(out.stdout)["notes"])
    assert "longer than" in out.stderr and "Traceback" not in out.stderr
    feed = RecordingFeed(path)
    s = Session().apply_all(ev for batch in feed.batches() for ev in batch)
    assert [n.message for n in s.notes] == [want]
    assert s.exit is not None and s.compile.compile_count == 1


def test_replay_reads_a_last_line_without_its_newline(tmp_path):
    from ctmon.read.feeds import RecordingFeed

    path = write(tmp_path, "nonl.jsonl", recording_bytes().rstrip(b"\n"))
    evs = [ev for batch in RecordingFeed(path).batches() for ev in batch]
    assert evs == typed_all(EVENTS)
