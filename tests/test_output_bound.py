"""A job's output under ctmon: byte-exact in the recording, compact, and
``record -q`` reads nothing back.

* Text and bytes that are not UTF-8 (no newline anywhere), characters cut
  in two between writes, a last incomplete character, control characters
  (six bytes each in JSON) in one large write: concatenated per stream, the
  recording's ``output`` events are the job's bytes, and ctmon's own stdout
  is too.
* The recording is the output plus its framing: text about the same size,
  bytes that are not UTF-8 a third larger (base64), not two to six times.
* ``record -q`` without a gate builds what it prints from the counts the
  supervisor kept: the recording is replaced by a directory under it before
  the job ends, and a read-back would say so; the capture warning -q still
  prints comes from the counts.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator

import msgspec
import pytest
from helpers import ROOT, env_with

from ctmon.store import Session
from ctmon.wire import events as E
from ctmon.wire.decode import Decoder
from ctmon.wire.protocol import MAX_LINE_BYTES

PY = sys.executable

BYTES_JOB = textwrap.dedent(
    """
    import os, random, sys
    out, err = sys.stdout.buffer, sys.stderr.buffer
    rnd = random.Random(7)
    parts = [
        "plain line\\n".encode(),
        "é€😀 ünïcödé\\n".encode()[:3],  # a character cut in two between writes
        "é€😀 ünïcödé\\n".encode()[3:],
        bytes(rnd.randrange(256) for _ in range(300_000)).replace(b"\\n", b"x"),  # not UTF-8, no newline
        b"\\x01" * 300_000,  # UTF-8, but six bytes each in JSON
        ("line %d\\n" % 7).encode() * 20_000,
        "€".encode()[:2],  # ends with an incomplete character
    ]
    for p in parts:
        out.write(p)
        out.flush()
    err.write(b"\\xff\\xfe on stderr\\n")
    err.flush()
    with open(sys.argv[1], "wb") as f:
        f.write(b"".join(parts))
    """
)


@pytest.fixture
def rt() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="cto-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _env(rt: str) -> dict[str, str]:
    return env_with(CTMON_RUNTIME_DIR=os.path.join(rt, "run"))


def _outputs(rec: str) -> tuple[dict[str, bytes], list[bytes]]:
    """Each stream's bytes as the recording has them, and its output lines as written."""
    dec = Decoder()
    got: dict[str, bytes] = {}
    lines = []
    with open(rec, "rb") as f:
        for line in f:
            ev = dec.decode(line)
            if isinstance(ev, E.Output):
                raw = ev.raw()
                assert raw is not None, line[:200]
                got[ev.stream] = got.get(ev.stream, b"") + raw
                lines.append(line)
    return got, lines


def test_output_round_trips_byte_exact(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    job, expected, rec = tmp_path / "job.py", tmp_path / "expected.bin", str(tmp_path / "r.jsonl")
    job.write_text(BYTES_JOB)
    p = subprocess.run(
        [PY, "-m", "ctmon", "record", "-q", "-o", rec, str(job), str(expected)],
        cwd=ROOT,
        env=_env(rt),
        capture_output=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    want = expected.read_bytes()
    assert p.stdout == want  # passed through as written
    got, lines = _outputs(rec)
    assert got["stdout"] == want  # recorded as written
    assert got["stderr"] == b"\xff\xfe on stderr\n"
    assert max(map(len, lines)) < MAX_LINE_BYTES  # no reader skips a line
    kinds = {("enc" in json.loads(line)) for line in lines}
    assert kinds == {True, False}  # base64 where it must be, text (as ever, no "enc") where it can
    # viewers and reports fold it: text as a terminal shows it
    with open(rec, "rb") as f:
        session = Session().apply_all(Decoder().decode_all(f.read().splitlines(), None))
    shown = [x.text for x in session.output.lines if x.stream == "stderr"]
    assert shown == ["\ufffd\ufffd on stderr"]


SIZE_JOB = textwrap.dedent(
    """
    import os, sys
    kind, mb = sys.argv[1], int(sys.argv[2])
    if kind == "text":
        block = ("x" * 99 + "\\n") * 10_000
        write, flush = sys.stdout.write, sys.stdout.flush
    else:
        block = os.urandom(1 << 20).replace(b"\\n", b"\\x0b")
        write, flush = sys.stdout.buffer.write, sys.stdout.buffer.flush
    written = 0
    while written < mb * 1_000_000:
        write(block)
        written += len(block)
    flush()
    with open(sys.argv[3], "w") as f:
        f.write(str(written))
    """
)


@pytest.mark.parametrize("kind, ratio", [("text", 1.02), ("binary", 4 / 3 + 0.01)])
def test_recording_is_the_output_plus_its_framing(tmp_path, rt, kind, ratio) -> None:  # type: ignore[no-untyped-def]
    job, written, rec = tmp_path / "job.py", tmp_path / "written", str(tmp_path / "r.jsonl")
    job.write_text(SIZE_JOB)
    p = subprocess.run(
        f"{PY} -m ctmon record -q -o {rec} {job} {kind} 8 {written} > /dev/null",
        shell=True,
        cwd=ROOT,
        env=_env(rt),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    out = int(written.read_text())
    size = os.path.getsize(rec)
    # text: 1 % for its escaped newlines; binary: base64's third; plus ~100 bytes of framing an event
    # and the run's own events (session, samples, exit)
    assert size <= out * ratio + (64 << 10), (kind, size, out, size / out)


QUIET_JOB = textwrap.dedent(
    """
    import os, socket, sys, time
    # what the agent sends when the job's logging switched compile capture off
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["CTMON_AGENT_SOCKET"])
    note = '{"kind":"note","t":%f,"level":"warning","source":"capture","message":"capture was off (test)"}\\n'
    s.sendall((note % time.time()).encode())
    s.close()
    print("READY", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.01)
    print("done")
    """
)


@pytest.mark.parametrize("quiet", [True, False])
def test_quiet_reads_nothing_back(tmp_path, rt, quiet) -> None:  # type: ignore[no-untyped-def]
    job, go, rec = tmp_path / "job.py", tmp_path / "go", str(tmp_path / "r.jsonl")
    job.write_text(QUIET_JOB)
    cmd = [PY, "-m", "ctmon", "record", *(["-q"] if quiet else []), "-o", rec, str(job), str(go)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(rt), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "READY\n"
        deadline = time.monotonic() + 30
        while b"capture was off" not in open(rec, "rb").read():  # the note is on disk
            assert time.monotonic() < deadline, "the note never reached the recording"
            time.sleep(0.02)
        # The supervisor writes through its open file; whoever opens the path
        # from now on finds a directory.
        os.rename(rec, rec + ".kept")
        os.mkdir(rec)
        go.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out == "done\n"
    with open(rec + ".kept", "rb") as f:
        assert json.loads(f.read().splitlines()[-1])["kind"] == "exit"  # the recording is whole
    if quiet:
        assert err == "ctmon: warning: capture was off (test)\n"  # from the counts, nothing read back
    else:  # the summary does read it back (and so would -q, were it to)
        assert "is a directory, not a recording" in err, err


def test_output_events_wire_compatibility() -> None:
    dec = Decoder()
    # a text chunk is written as it always was: no "enc"
    text = msgspec.json.encode(E.Output(t=1.0, stream="stdout", data="hé\n"))
    assert b'"enc"' not in text
    # bytes: base64, and the encoder's one-pass form is the same line
    raw = b"\xff\x00\x80ab"
    line = msgspec.json.encode(E.OutputBytes(t=1.0, stream="stderr", data=raw))
    ev = dec.decode(line)
    assert isinstance(ev, E.Output) and ev.enc == E.OUTPUT_BASE64 and ev.raw() == raw
    assert ev.text() == "\ufffd\x00\ufffdab"
    # an older recording's chunk, and what a reader must never trip on
    old = dec.decode(b'{"kind":"output","t":1.0,"stream":"stdout","data":"x\\ufffdy"}')
    assert isinstance(old, E.Output) and old.text() == "x\ufffdy" and old.raw() == "x\ufffdy".encode()
    future = dec.decode(b'{"kind":"output","t":1.0,"stream":"stdout","data":"QUJD","enc":"zstd"}')
    assert isinstance(future, E.Output) and future.raw() is None and "cannot read" in future.text()
    broken = dec.decode(b'{"kind":"output","t":1.0,"stream":"stdout","data":"@@@","enc":"base64"}')
    assert isinstance(broken, E.Output) and isinstance(broken.text(), str)


GONE_JOB = textwrap.dedent(
    """
    import random, sys
    block = random.Random(3).randbytes(1 << 20)
    for _ in range(16):
        sys.stdout.buffer.write(block)
    sys.stdout.buffer.flush()
    """
)


def test_a_reader_gone_mid_firehose_keeps_what_was_read_in_bounded_lines(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """``ctmon record job.py | head -c 10``: the read the broken pipe interrupts
    (up to 1 MiB) is still recorded, in lines a reader accepts."""
    job, rec = tmp_path / "job.py", str(tmp_path / "r.jsonl")
    job.write_text(GONE_JOB)
    p = subprocess.run(
        f"{PY} -m ctmon record -q -o {rec} {job} | head -c 10 > /dev/null",
        shell=True,
        cwd=ROOT,
        env=_env(rt),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "ctmon/" not in p.stderr, p.stderr  # the job's BrokenPipeError, never a traceback of ctmon's
    got, lines = _outputs(rec)
    block = random.Random(3).randbytes(1 << 20)
    assert got["stdout"] and (block * 16).startswith(got["stdout"])
    assert max(map(len, lines)) < MAX_LINE_BYTES
