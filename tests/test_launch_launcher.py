"""ctmon runs the target exactly as python would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from helpers import WORKLOADS, assert_matches_torch_trace, ctmon, env_with, record, workload

from ctmon.wire.decode import Decoder
from ctmon.wire.events import Output


def whoami(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith("WHOAMI "):
            return json.loads(line[len("WHOAMI ") :])
    raise AssertionError(stdout)


def test_script_sees_what_plain_python_shows(tmp_path):
    args = ["whoami.py", "x", "--flag", "y z"]
    plain = subprocess.run([sys.executable, *args], cwd=WORKLOADS, capture_output=True, text=True, env=env_with())
    run = record(tmp_path, args, cwd=WORKLOADS, torch_trace=False)
    assert run.returncode == plain.returncode == 0, run.proc.stderr
    assert whoami(run.proc.stdout) == whoami(plain.stdout)


def test_module_mode_sees_what_python_dash_m_shows(tmp_path):
    args = ["-m", "whoami_mod", "a", "b"]
    plain = subprocess.run([sys.executable, *args], cwd=WORKLOADS, capture_output=True, text=True, env=env_with())
    run = record(tmp_path, args, cwd=WORKLOADS, torch_trace=False)
    assert run.returncode == plain.returncode == 0, run.proc.stderr
    assert whoami(run.proc.stdout) == whoami(plain.stdout)


@pytest.mark.slow
def test_module_mode_with_torch_compile(tmp_path):
    run = record(tmp_path, ["-m", "recompile_shapes"], cwd=WORKLOADS)
    assert run.returncode == 0, run.proc.stderr
    rep = run.report()
    assert_matches_torch_trace(rep, run.trace())
    assert rep["compile"]["recompiles"] == 2
    assert rep["command"] == ["python", "-m", "recompile_shapes"]


def test_stdin_passes_through(tmp_path):
    rec = str(tmp_path / "r.jsonl")
    out = ctmon("record", "-o", rec, os.path.join(WORKLOADS, "whoami.py"), "stdin", input="hello from stdin\n")
    assert out.returncode == 0, out.stderr
    assert "STDIN hello from stdin" in out.stdout


def test_output_passes_through_unchanged_and_summary_goes_to_stderr(tmp_path):
    script = tmp_path / "out.py"
    script.write_text(
        "import sys\nsys.stdout.write('a\\nb\\r\\nc')\nsys.stderr.write('err\\n')\nsys.stdout.buffer.write(b'\\xff\\xfe\\n')\n"
    )
    rec = str(tmp_path / "r.jsonl")
    out = subprocess.run(
        [sys.executable, "-m", "ctmon", "record", "-o", rec, str(script)], capture_output=True, env=env_with()
    )
    assert out.returncode == 0
    assert out.stdout == b"a\nb\r\nc\xff\xfe\n"
    assert out.stderr.startswith(b"err\n")
    assert b"ctmon: python" in out.stderr and b"exited with code 0" in out.stderr
    with open(rec, "rb") as f:
        chunks = [e for e in Decoder().decode_all(f.read().splitlines()) if isinstance(e, Output)]
    stdout = [e for e in chunks if e.stream == "stdout"]
    assert b"".join(e.raw() or b"" for e in stdout) == b"a\nb\r\nc\xff\xfe\n"  # recorded byte-exact
    assert "".join(e.text() for e in stdout) == "a\nb\r\nc\ufffd\ufffd\n"


@pytest.mark.parametrize(
    "how, code",
    [("exception", 1), ("exit", 3), ("sysexit", 4), ("sigkill", -signal.SIGKILL), ("interrupt", -signal.SIGINT)],
)
@pytest.mark.slow
def test_crash_keeps_exit_code_and_recording(tmp_path, how, code):
    plain = subprocess.run([sys.executable, workload("crash.py"), how], capture_output=True, text=True, env=env_with())
    assert plain.returncode == code
    run = record(tmp_path, [workload("crash.py"), how])
    assert run.returncode == code, run.proc.stderr
    if how == "exception":
        assert "RuntimeError: simulated failure at step 5" in run.proc.stderr
        assert run.proc.stderr.count("Traceback") == 1
        assert "ctmon" not in run.proc.stderr.split("RuntimeError")[0], run.proc.stderr
    events = run.events()
    assert events[0]["kind"] == "session" and events[-1]["kind"] == "exit"
    rep = run.report()
    assert rep["steps"]["count"] == 5
    assert rep["compile"]["compiles"] >= 1
    assert_matches_torch_trace(rep, run.trace())
    expected_status = code if code >= 0 else 128 - code
    assert rep["exit_code"] == expected_status
    assert any(e["kind"] == "output" and "about to die" in e["data"] for e in events)


def test_syntax_error_is_shown_like_python(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("x = 1\ndef broken(:\n    pass\n")
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    run = record(tmp_path, [str(script)], torch_trace=False)
    assert run.returncode == plain.returncode == 1
    assert plain.stderr in run.proc.stderr


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
@pytest.mark.slow
def test_dataloader_workers_are_not_sessions(tmp_path, ctx):
    run = record(tmp_path, [workload("dataloader_workers.py"), ctx], timeout=240)
    assert run.returncode == 0, run.proc.stderr
    assert "steps=16" in run.proc.stdout
    events = run.events()
    assert sum(1 for e in events if e["kind"] == "process") == 1
    assert sum(1 for e in events if e["kind"] == "session") == 1
    rep = run.report()
    assert rep["steps"]["count"] == 16
    assert_matches_torch_trace(rep, run.trace())
    starts = [e["compile_id"] for e in events if e["kind"] == "compile_start"]
    assert len(starts) == len(set(starts))


def test_a_session_socket_appears_only_once_it_listens(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`ctmon attach` connects as soon as the viewer socket's file exists; the
    file must therefore not exist before listen() (a connect in that gap is
    refused: seen once in CI as "monitor is unreachable")."""
    import socket

    from ctmon.launch.sockets import listen_unix

    path = os.path.join(str(tmp_path), "viewer.sock")
    seen_at_listen: list[bool] = []
    real_listen = socket.socket.listen

    def listen(self, *a):  # type: ignore[no-untyped-def]
        seen_at_listen.append(os.path.exists(path))
        return real_listen(self, *a)

    monkeypatch.setattr(socket.socket, "listen", listen)
    s = listen_unix(path)
    try:
        assert seen_at_listen == [False]
        assert oct(os.stat(path).st_mode & 0o777) == oct(0o600)
        assert sorted(os.listdir(str(tmp_path))) == ["viewer.sock"]
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(path)
        c.close()
    finally:
        s.close()
