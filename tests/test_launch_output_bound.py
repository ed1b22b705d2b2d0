"""A job's output under ctmon: byte-exact in the recording, compact, and
``record -q`` reads nothing back.

* Text and bytes that are not UTF-8 (no newline anywhere), characters cut
  in two between writes, a last incomplete character, control characters
  (six bytes each in JSON) in one large write: concatenated per stream, the
  recording's ``output`` events are the job's bytes, and ctmon's own stdout
  is too.
* The recording is the output plus its framing: text about the same size,
  bytes that are not UTF-8 a third larger (base64), not two to six times.
  A job writing as fast as it can has its large chunks kept in the output
  log beside the recording, the events pointing into it with their last
  lines for the screen: recording and log together about the output's size.
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

from ctmon.read.output_log import OutputLogs, chunk_bytes, output_bytes
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
    """Each stream's bytes as the recording has them (or points at them in
    its output log), and its output lines as written."""
    dec = Decoder()
    got: dict[str, bytes] = {}
    lines = []
    logs = OutputLogs(rec)
    with open(rec, "rb") as f:
        for line in f:
            ev = dec.decode(line)
            if isinstance(ev, E.Output):
                raw = chunk_bytes(ev, logs)
                assert raw is not None, line[:200]
                got[ev.stream] = got.get(ev.stream, b"") + raw
                lines.append(line)
    logs.close()
    assert got == output_bytes(rec)  # the reader users have gives the same bytes
    return got, lines


def _kept(rec: str) -> int:
    """Bytes the run keeps: the recording and the output log its events point into."""
    log = rec[: -len(".jsonl")] + ".output.log"
    return os.path.getsize(rec) + (os.path.getsize(log) if os.path.exists(log) else 0)


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
    encs = {json.loads(line).get("enc") for line in lines}
    # stderr's one small write is not UTF-8: inline as base64, whatever the timing. How stdout's
    # writes fall into reads does depend on it: on a loaded machine the first lines are read
    # together with the 300 KB after them, and a read of 256 KiB or more goes to the output log.
    assert "base64" in encs and encs <= {None, "base64", "log"}, encs
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


@pytest.mark.parametrize("kind, ratio", [("text", 1.05), ("binary", 4 / 3 + 0.01)])
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
    size = _kept(rec)
    # The job writes 1 MiB blocks as fast as it can: a read of its full pipe
    # is kept in the output log, its event holding the last 32 KiB of text
    # (3 %; 1 KiB of bytes that are not text); a smaller read is in the
    # recording (text 1 % larger for its escaped newlines, bytes that are not
    # UTF-8 a third, base64); plus ~150 bytes of framing an event and the
    # run's own events (session, samples, exit).
    assert size <= out * ratio + (64 << 10), (kind, size, out, size / out)
    got, lines = _outputs(rec)
    assert len(got["stdout"]) == out
    assert any(json.loads(line).get("enc") == "log" for line in lines)


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


FAST_JOB = textwrap.dedent(
    """
    import sys
    lines = b"".join(b"line %07d\\n" % i for i in range(400_000))  # 5.2 MB in one write: reads of a full pipe
    sys.stdout.buffer.write(lines)
    sys.stdout.buffer.flush()
    sys.stdout.write("last words\\n")
    """
)


def test_a_fast_writer_is_kept_in_the_output_log_and_shown_by_its_last_lines(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """Large reads go to ``r.output.log`` (a copy, no JSON encode on the job's
    pipe); the recording points into it byte-exact, and its events carry the
    chunks' last lines, so the screen and the report need nothing else."""
    job, rec = tmp_path / "job.py", str(tmp_path / "r.jsonl")
    job.write_text(FAST_JOB)
    p = subprocess.run(
        [PY, "-m", "ctmon", "record", "-q", "-o", rec, str(job)],
        cwd=ROOT,
        env=_env(rt),
        capture_output=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    want = b"".join(b"line %07d\n" % i for i in range(400_000)) + b"last words\n"
    assert p.stdout == want
    got, lines = _outputs(rec)
    assert got["stdout"] == want
    refs = [json.loads(line) for line in lines if json.loads(line).get("enc") == "log"]
    assert refs and all(r["log"] == "r.output.log" and r["size"] >= 256 << 10 for r in refs)
    assert os.path.getsize(rec) < len(want) // 10  # the bytes are in the log, not in JSON
    assert os.path.getsize(tmp_path / "r.output.log") == sum(r["size"] for r in refs)  # only what was pointed at
    with open(rec, "rb") as f:
        session = Session().apply_all(Decoder().decode_all(f.read().splitlines(), None))
    shown = [x.text for x in session.output.lines]
    assert shown[-2:] == ["line 0399999", "last words"]
    assert any("bytes of stdout at once, kept in r.output.log" in t for t in shown)


def test_an_output_log_that_cannot_be_written_keeps_the_output_inline(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """A planted symlink where the output log goes: refused (never written
    through), the chunks recorded inline, byte-exact, and a note says why."""
    job, rec = tmp_path / "job.py", str(tmp_path / "r.jsonl")
    job.write_text(FAST_JOB)
    target = tmp_path / "elsewhere"
    os.symlink(target, tmp_path / "r.output.log")
    p = subprocess.run(
        [PY, "-m", "ctmon", "record", "-q", "-o", rec, str(job)],
        cwd=ROOT,
        env=_env(rt),
        capture_output=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert not target.exists()
    got, lines = _outputs(rec)
    assert got["stdout"] == b"".join(b"line %07d\n" % i for i in range(400_000)) + b"last words\n"
    assert not any(json.loads(line).get("enc") == "log" for line in lines)
    notes = [json.loads(x)["message"] for x in open(rec, "rb") if b'"kind":"note"' in x]
    assert any("fast output is recorded inline" in n and "symlink" in n for n in notes), notes


def test_recorder_chunks_share_the_attach_log_and_survive_a_failing_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """attach's output log holds all output in order: a chunk kept by
    reference sits at the offset its event names. A log whose writes fail
    (a full disk: /dev/full) is given up and chunks go inline."""
    from ctmon.launch.recorder import Recorder

    log = tmp_path / "r.output.log"
    r = Recorder(str(tmp_path / "r.jsonl"), str(log), new_files=True)
    r.open()
    r.log_output(b"small\n")
    big = os.urandom(300 << 10)
    assert r.keep_chunk(memoryview(big)) == ("r.output.log", 6)
    r.log_output(b"after\n")
    r.close()
    assert log.read_bytes() == b"small\n" + big + b"after\n"

    full = Recorder(str(tmp_path / "f.jsonl"), "/dev/full", new_files=False)
    full.open()
    assert full.keep_chunk(big) is None
    assert full.chunk_log_refused is not None and "No space left" in full.chunk_log_refused
    assert full.keep_chunk(big) is None  # given up: no second try, no second word
    full.close()


def test_a_chunk_in_the_log_reads_without_it() -> None:
    """Its event alone shows its last lines and where the rest is; its bytes
    are not claimed (``raw`` is None); a log that is gone or short gives None."""
    ev = Decoder().decode(
        b'{"kind":"output","t":1.0,"stream":"stdout","data":"tail\\n","enc":"log","log":"r.output.log","at":0,"size":300000}'
    )
    assert isinstance(ev, E.Output) and ev.raw() is None
    assert ev.text() == "[ctmon: 300,000 bytes of stdout at once, kept in r.output.log; their last lines:]\ntail\n"
    logs = OutputLogs("/nonexistent/r.jsonl")
    assert chunk_bytes(ev, logs) is None
    sneaky = Decoder().decode(
        b'{"kind":"output","t":1.0,"stream":"stdout","data":"","enc":"log","log":"../../etc/passwd","at":0,"size":4}'
    )
    assert isinstance(sneaky, E.Output) and chunk_bytes(sneaky, OutputLogs("/etc/x.jsonl")) is None
