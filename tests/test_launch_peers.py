"""Sockets, peers and the token (issue 11): no single viewer, TCP peer or agent
line takes the supervisor (and so the job) down; the token never appears on a
command line; a wrong token is told as such; held connections do not lock a
real viewer out; a wildcard --listen is announced; Stop's SIGKILL waits for a
configurable grace, escalated by the supervisor.

docs/RELIABILITY.md ("Sockets and peers (issue 11)") lists these with their tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest
from helpers import ROOT, ctmon, short_tmux_dir
from test_whole_faults import (
    JOB,
    PY,
    assert_complete,
    env_for,
    read_events,
    recording,
    reference,
    viewer_socket,
    wait_until,
)

from ctmon.wire import protocol


@pytest.fixture
def rt() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="ctp-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


ANNOUNCE = re.compile(r"viewers can connect to ([\d.]+):(\d+): ctmon watch --connect \S+ --token-file (\S+)")


def tcp_session(run) -> tuple[str, int, str, str]:  # type: ignore[no-untyped-def]
    """(host, port, token file, token) from record's announcement."""
    m = wait_until(lambda: ANNOUNCE.search(run.stderr()), 20, "the TCP announcement")
    path = m.group(3)
    with open(path) as f:
        token = f.read().strip()
    return m.group(1), int(m.group(2)), path, token


def hello(token: object) -> bytes:
    return protocol.encode({"kind": "hello", "t": 1.0, "token": token})


def first_line(host: str, port: int, payload: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(payload)
        data = b""
        with contextlib.suppress(OSError):
            while b"\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    return data.split(b"\n", 1)[0]


def _job(tmp: str, steps: int = 300) -> tuple[list[str], str]:
    done = os.path.join(tmp, "done")
    return ["--steps", str(steps), "--step-ms", "5", "--print-every", "50", "--done", done], done


# ------------------------------------------------------------ the token


@pytest.mark.slow
def test_non_ascii_token_does_not_kill_the_job(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """A hello whose token is non-ASCII (or a surrogate, or not a string) once
    made hmac.compare_digest raise in the supervisor, which died and took
    the job with it. Each is now an authentication failure, told as such."""
    tmp = str(tmp_path)
    args, done = _job(tmp)
    ref = reference(args, tmp)
    with recording(tmp, args, env_for(rt), options=["--listen", "127.0.0.1:0"]) as run:
        host, port, _, token = tcp_session(run)
        answers = []
        for bad in ("…", "tok…en", token + "é", "\udcff", "\ud800x", 5, None, ["x"], {"a": 1}, ""):
            answers.append(first_line(host, port, hello(bad)))
        answers.append(first_line(host, port, b'{"kind":"hello","t":1,"token":"\xff\xfe"}\n'))
        assert run.proc.poll() is None, run.stderr()
        good = first_line(host, port, hello(token))
        open(done + ".go", "w").close()
        rc = run.wait(60)
    for a in answers:
        assert json.loads(a) == {"kind": "error", "t": json.loads(a)["t"], "message": "authentication failed"}, a
    assert json.loads(good)["kind"] == "session"
    assert rc == ref.rc == 0, run.stderr()
    assert "Traceback" not in run.stderr()
    assert_complete(run.rec, ref.steps, ref)


@pytest.mark.slow
def test_token_never_on_a_command_line(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """record announces how to connect without the token; --token VALUE is
    refused; a viewer started the announced way (--token-file) holds no token
    in /proc/PID/cmdline while it watches; a token file others can read is refused."""
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux")
    tmp = str(tmp_path)
    args, done = _job(tmp, 400)
    tmux_dir = short_tmux_dir(tempfile.mkdtemp(prefix="ctt-"))
    tenv = dict(env_for(rt), TMUX_TMPDIR=tmux_dir)
    tmux = ["tmux", "-L", "ctp"]
    with recording(tmp, args, env_for(rt), options=["--listen", "127.0.0.1:0"]) as run:
        host, port, path, token = tcp_session(run)
        assert token not in run.stderr()
        addr = f"{host}:{port}"
        refused = ctmon("watch", "--connect", addr, "--token", token, env=env_for(rt))
        loose = os.path.join(tmp, "loose-token")
        with open(loose, "w") as f:
            f.write(token)
        os.chmod(loose, 0o644)
        loose_out = ctmon("watch", "--connect", addr, "--token-file", loose, env=env_for(rt))
        try:
            subprocess.run(
                [
                    *tmux,
                    "new-session",
                    "-d",
                    "-x",
                    "120",
                    "-y",
                    "40",
                    "-s",
                    "w",
                    PY,
                    "-m",
                    "ctmon",
                    "watch",
                    "--connect",
                    addr,
                    "--token-file",
                    path,
                ],
                env=tenv,
                cwd=ROOT,
                check=True,
                timeout=30,
            )
            pane_pid = int(
                subprocess.run(
                    [*tmux, "display", "-p", "-t", "w", "#{pane_pid}"],
                    env=tenv,
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=10,
                ).stdout
            )

            def screen() -> str:
                return subprocess.run(
                    [*tmux, "capture-pane", "-p", "-t", "w"], env=tenv, capture_output=True, text=True, timeout=10
                ).stdout

            wait_until(lambda: "faults_job" in screen() or addr in screen(), 30, "the viewer's screen")
            with open(f"/proc/{pane_pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pane_pid}/environ", "rb") as f:
                environ = f.read()
        finally:
            subprocess.run([*tmux, "kill-server"], env=tenv, timeout=10, capture_output=True)
            shutil.rmtree(tmux_dir, ignore_errors=True)
        open(done + ".go", "w").close()
        assert run.wait(60) == 0
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith("ctmon: watch: --token is refused") and "--token-file" in refused.stderr
    assert loose_out.returncode == 2 and "readable by other users" in loose_out.stderr, loose_out.stderr
    assert b"--token-file" in cmdline and token.encode() not in cmdline and token.encode() not in environ


@pytest.mark.slow
def test_wrong_token_is_told_as_such(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """`ctmon watch --connect` with a wrong token says "authentication failed"
    (exit 2), not an empty disconnected screen; the right one gets past it."""
    tmp = str(tmp_path)
    args, done = _job(tmp)
    with recording(tmp, args, env_for(rt), options=["--listen", "127.0.0.1:0"]) as run:
        host, port, path, token = tcp_session(run)
        addr = f"{host}:{port}"
        wrong = ctmon("watch", "--connect", addr, env=env_for(rt, CTMON_TOKEN="not-it…"))
        right = ctmon("watch", "--connect", addr, env=env_for(rt, CTMON_TOKEN=token))
        open(done + ".go", "w").close()
        assert run.wait(60) == 0
    assert wrong.returncode == 2 and wrong.stderr == "ctmon: authentication failed (check the session token)\n"
    # past authentication; only the missing terminal stops it
    assert right.stderr == "ctmon: watch: needs a terminal (run it with ssh -t when remote)\n", right.stderr


# ------------------------------------------------------- held connections


@pytest.mark.slow
def test_held_connections_do_not_lock_out_a_viewer(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """20 unauthenticated connections held open (more than the 16 that may
    wait) once refused every newcomer until they timed out; now the oldest
    waiting one makes room, and a real viewer is served at once."""
    tmp = str(tmp_path)
    args, done = _job(tmp)
    held: list[socket.socket] = []
    with recording(tmp, args, env_for(rt), options=["--listen", "127.0.0.1:0"]) as run:
        host, port, _, token = tcp_session(run)
        try:
            for _ in range(20):
                held.append(socket.create_connection((host, port), timeout=5))
            time.sleep(0.3)  # all accepted by now
            t0 = time.monotonic()
            first = first_line(host, port, hello(token), timeout=3)
            took = time.monotonic() - t0
        finally:
            for s in held:
                s.close()
        open(done + ".go", "w").close()
        assert run.wait(60) == 0
    assert json.loads(first)["kind"] == "session" and took < 2.0, (first, took)


# ---------------------------------------------------------- --listen host


def test_listen_on_every_interface_is_announced(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """`--listen 0:P` means every IPv4 interface (as 0.0.0.0) and says so, with a warning."""
    from ctmon.launch.sockets import is_local_only, parse_listen

    assert parse_listen("0:7777") == ("0.0.0.0", 7777)
    assert parse_listen("7777") == ("127.0.0.1", 7777) and parse_listen("[::]:1") == ("::", 1)
    assert is_local_only("127.0.0.1") and is_local_only("::1") and is_local_only("localhost")
    assert not any(map(is_local_only, ("0.0.0.0", "::", "10.1.2.3", "node7")))
    tmp = str(tmp_path)
    for spec in ("0:0", "127.0.0.1:0"):
        out = ctmon(
            "record", "-q", "-o", os.path.join(tmp, "r.jsonl"), "--listen", spec, JOB, "--steps", "3", env=env_for(rt)
        )
        assert out.returncode == 0, out.stderr
        warned = "ctmon: warning: --listen 0.0.0.0:" in out.stderr and "reachable from the network" in out.stderr
        assert warned == (spec == "0:0"), out.stderr
        assert ("connect to 0.0.0.0:" in out.stderr) == (spec == "0:0"), out.stderr


# ----------------------------------------------------- the agent socket

DEEP = 900


def _bad_agent_lines(sdir: str) -> list[bytes]:
    ring = os.path.join(sdir, "steps-1.ring")
    lines = [
        protocol.encode({"kind": "process", "t": 1.0, "pid": 1, "step_ring": ring[:-5] + "\0.ring"}),
        protocol.encode({"kind": "process", "t": 1.0, "pid": 1, "step_ring": 5}),
        protocol.encode({"kind": "process", "t": 1.0, "pid": 1, "step_ring": ["x"]}),
        protocol.encode({"kind": "process", "t": 1.0, "pid": 1, "step_ring": "/" + "a" * 10000}),
        b'{"kind":"note","t":1,"level":"warning","source":"x","message":' + b"[" * DEEP + b"]" * DEEP + b"}\n",
        b'{"kind":"note","t":1,"message":{"m":' + b'{"m":' * DEEP + b"1" + b"}" * DEEP + b"}}\n",
        protocol.encode(
            {
                "kind": "compile",
                "t": 1.0,
                "compile_id": ["0/0"],
                "frame_id": "x",
                "entire_frame_compile_time_s": "slow",
                "co_name": {"a": 1},
            }
        ),
        protocol.encode({"kind": "graph_break", "t": 1.0, "user_stack": "not a list", "line": [1]}),
        protocol.encode({"kind": "note", "t": "yesterday", "message": 1e308}),
        b'{"kind":"note","t":1,"message":"' + b"x" * (2 << 20) + b'"}\n',  # over the line limit
        b'{"kind":"note","t":1,"message":"NUL\\u0000 in text"}\n',
        b"\x00" * 100 + b"\n" + b"\xff\xfe{}\n",
    ]
    return lines


@pytest.mark.slow
def test_malformed_agent_events_do_not_crash_the_supervisor(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """A NUL in step_ring, notes nested 900 deep, wrong types, huge lines on
    the job's own agent socket once killed the supervisor (and the job with
    it); now each is skipped or recorded harmlessly, and the recording's
    report reads cleanly."""
    tmp = str(tmp_path)
    args, done = _job(tmp)
    ref = reference(args, tmp)
    with recording(tmp, args, env_for(rt)) as run:
        sdir = os.path.dirname(viewer_socket(rt))
        for line in _bad_agent_lines(sdir):
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(os.path.join(sdir, "agent.sock"))
                s.sendall(line)
        one = socket.socket(socket.AF_UNIX)  # and all of them down one connection
        one.connect(os.path.join(sdir, "agent.sock"))
        one.sendall(b"".join(_bad_agent_lines(sdir)))
        one.close()
        time.sleep(0.5)
        assert run.proc.poll() is None, run.stderr()
        open(done + ".go", "w").close()
        rc = run.wait(60)
    assert rc == ref.rc == 0, run.stderr()
    assert "Traceback" not in run.stderr()
    events, _ = assert_complete(run.rec, ref.steps, ref)
    notes = [e["message"] for e in events if e["kind"] == "note" and e.get("source") == "ctmon"]
    assert any("not a valid event" in n and "$.step_ring" in n for n in notes), notes
    assert any("longer than" in n for n in notes), notes
    report = ctmon("report", run.rec)
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr


def test_report_of_a_deeply_nested_note(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A recording holding a note nested 900 deep: `ctmon report` (text, --md,
    --json) skips that line instead of dying of RecursionError."""
    rec = str(tmp_path / "deep.jsonl")
    with open(rec, "wb") as f:
        f.write(protocol.encode({"kind": "session", "t": 1.0, "v": 1, "id": "x", "command": ["a.py"]}))
        f.write(b'{"kind":"note","t":2,"level":"warning","source":"x","message":' + b"[" * DEEP + b"]" * DEEP + b"}\n")
        f.write(b'{"kind":"note","t":2,"message":' + b'{"m":' * DEEP + b"1" + b"}" * DEEP + b"}\n")
        f.write(protocol.encode({"kind": "exit", "t": 3.0, "code": 0, "signal": None}))
    for fmt in ([], ["--md"], ["--json"]):
        out = ctmon("report", rec, *fmt)
        assert out.returncode == 0 and "Traceback" not in out.stderr and "RecursionError" not in out.stdout, out.stderr[
            -2000:
        ]
    assert protocol.decode(b'{"kind":"n","t":1,"m":' + b"[" * 31 + b"]" * 31 + b"}") is not None
    assert protocol.decode(b'{"kind":"n","t":1,"m":' + b"[" * 32 + b"]" * 32 + b"}") is None


# ---------------------------------------------------------------- stop

_CHECKPOINTER = r"""
import signal, sys, time
chunks = int(sys.argv[1])
def on_term(signum, frame):
    for i in range(chunks):
        time.sleep(0.25)
        print(f"checkpoint chunk {i}", flush=True)
    print("checkpoint done", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("WAITING", flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize("grace,ends", [(10, "checkpointed"), (0.5, "killed")])
@pytest.mark.slow
def test_stop_waits_its_grace_before_sigkill(tmp_path, rt, grace, ends) -> None:  # type: ignore[no-untyped-def]
    """A viewer's `stop`: SIGTERM now, SIGKILL after the grace, done by the
    supervisor, so it holds when the viewer is gone at once. A job that
    checkpoints for 2 s on SIGTERM finishes within a 10 s grace; with 0.5 s
    it is killed part way. (Stop once sent SIGKILL 5 s after SIGTERM, from
    the viewer, whatever the job was doing.)"""
    tmp = str(tmp_path)
    script = os.path.join(tmp, "checkpointer.py")
    with open(script, "w") as f:
        f.write(_CHECKPOINTER)
    with recording(tmp, ["8"], env_for(rt), target=[script]) as run:
        run.wait_stdout("WAITING")
        with socket.socket(socket.AF_UNIX) as v:
            v.connect(viewer_socket(rt))
            v.sendall(protocol.encode({"kind": "control", "t": 1.0, "action": "stop", "grace": grace}))
        rc = run.wait(30)  # the viewer is gone: the supervisor escalates alone
    events, _ = read_events(run.rec)
    out = "".join(e["data"] for e in events if e["kind"] == "output")
    notes = [e["message"] for e in events if e["kind"] == "note"]
    assert any(f"SIGKILL in {grace:g} s" in n for n in notes), notes
    if ends == "checkpointed":
        assert rc == 0 and "checkpoint done" in out, (rc, out)
        assert not any("SIGKILL" in n and n.startswith("sent") for n in notes)
    else:
        assert rc == -signal.SIGKILL and "checkpoint done" not in out, (rc, out)  # ctmon ends as the job did
        assert events[-1]["signal"] == "SIGKILL"


def test_stop_grace_option(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ctmon.cli import CliError
    from ctmon.cli.attach import stop_grace

    assert stop_grace("0") == 0.0 and stop_grace("12.5") == 12.5
    os.environ.pop("CTMON_STOP_GRACE", None)
    assert stop_grace(None) == protocol.DEFAULT_STOP_GRACE_S == 30.0
    os.environ["CTMON_STOP_GRACE"] = "7"
    try:
        assert stop_grace(None) == 7.0 and stop_grace("3") == 3.0
    finally:
        del os.environ["CTMON_STOP_GRACE"]
    for bad in ("-1", "nan", "inf", "soon"):
        with pytest.raises(CliError):
            stop_grace(bad)
    out = ctmon("attach", "--stop-grace", "soon", JOB)
    assert out.returncode == 2
    assert out.stderr == "ctmon: attach: --stop-grace must be a number of seconds >= 0 (0: never SIGKILL), not 'soon'\n"


def test_stop_grace_from_a_viewer_is_bounded() -> None:
    """Whatever `grace` a viewer sends, the supervisor takes a sane one and never raises."""
    from ctmon.launch.job import MAX_STOP_GRACE_S, Job

    class Running:
        returncode = None

    job = Job.__new__(Job)
    sent: list[int] = []
    job.proc = Running()  # type: ignore[assignment]
    job.signal_job = lambda sig, group, reason: sent.append(sig)  # type: ignore[method-assign]
    job.emit = lambda ev: None
    for grace, want in (
        (5, 5.0),
        (0, None),
        (10**400, MAX_STOP_GRACE_S),
        (1e308, MAX_STOP_GRACE_S),
        (-1, 30.0),
        (float("nan"), 30.0),
        (True, 30.0),
        ("5", 30.0),
        (None, 30.0),
        ([1], 30.0),
    ):
        t0 = time.monotonic()
        job.stop(grace)
        got = None if job._kill_at is None else round(job._kill_at - t0)
        assert got == (None if want is None else round(want)), (grace, got)
    assert sent == [signal.SIGTERM] * 10
