"""The supervisor's intake: every agent connection is one process of the job,
and knows which one from the moment it is accepted."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ctmon.launch.intake import Intake
from ctmon.launch.sockets import listen_unix
from ctmon.wire import protocol

CONNECT = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(b'{"kind":"note","t":1.0,"level":"info","source":"job","message":"hi"}\\n')
sys.stdin.read()  # hold the connection until the test is done
"""


def test_each_agent_connection_knows_its_pid(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = os.path.join(str(tmp_path), "agent.sock")
    listener = listen_unix(path)
    listener.setblocking(True)
    listener.settimeout(20)
    lines: list[tuple[bytes, protocol.Event]] = []
    notes: list[str] = []
    intake = Intake(str(tmp_path), lambda ev: None, lambda line, ev: lines.append((line, ev)), notes.append)
    procs = [subprocess.Popen([sys.executable, "-c", CONNECT, path], stdin=subprocess.PIPE) for _ in range(3)]
    try:
        agents = [intake.accept(listener) for _ in procs]
        assert all(a is not None for a in agents)
        assert sorted(a.pid for a in agents if a is not None) == sorted(p.pid for p in procs)
        assert sorted(intake.pids()) == sorted(p.pid for p in procs)  # type: ignore[type-var]
        deadline = time.monotonic() + 20
        while len(lines) < 3 and time.monotonic() < deadline:
            for a in agents:
                assert a is not None
                assert intake.read(a)
            time.sleep(0.01)
        assert [ev.message for _, ev in lines] == ["hi"] * 3 and not notes
        first = agents[0]
        assert first is not None
        intake.forget(first)
        assert sorted(intake.pids()) == sorted(p.pid for p in procs if p.pid != first.pid)  # type: ignore[type-var]
    finally:
        for p in procs:
            p.communicate(b"", timeout=20)
        listener.close()


def test_agent_lines_are_recorded_as_sent_valid_or_refused_with_a_note(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """What an agent sends is validated where it enters: an event is recorded
    as it came (a newer agent's unknown kind too), bytes that are not UTF-8 in
    a field nobody reads become U+FFFD, and a line that is not an event is
    left out with a note saying why; events only the supervisor writes are
    dropped."""
    written: list[bytes] = []
    notes: list[str] = []
    intake = Intake(str(tmp_path), lambda ev: None, lambda line, ev: written.append(line), notes.append)
    good = b'{"kind":"note","t":1.0,"message":"hi"}'
    newer = b'{"kind":"from_2030","t":1.0,"x":[1,2]}'
    odd_bytes = b'{"kind":"note","t":1.0,"message":"ok","junk":"\xff\xfe"}'
    for line in (
        good,
        newer,
        odd_bytes,
        b'{"kind":"compile","frame_id":"x"}',
        b'{"kind":"exit","code":0}',
        b"not json",
    ):
        intake._line(line)
    assert written[:2] == [good + b"\n", newer + b"\n"]
    assert written[2] == '{"kind":"note","t":1.0,"message":"ok","junk":"\ufffd\ufffd"}\n'.encode()
    assert len(written) == 3
    assert len(notes) == 2 and all("not a valid event" in n for n in notes)
    assert "$.frame_id" in notes[0]
