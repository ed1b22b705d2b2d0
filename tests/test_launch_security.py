"""Security properties of a live session (issue 6):

* the runtime directory is private (0700, ours, not a symlink), sockets and
  files in it are 0600, recordings 0600;
* another user's sessions are neither listed nor reachable (file modes, and
  SO_PEERCRED on both sockets even when the modes would let them in);
* nothing read from a socket or a file is unpickled or evaluated;
* a viewer can read, and ask for a signal to the job -- nothing else; a
  garbage, oversized, stalling or unauthenticated peer changes nothing for
  the job, the recording or the other viewers.

docs/RELIABILITY.md summarises these with the file that enforces each.
"""

from __future__ import annotations

import ast
import contextlib
import glob
import json
import os
import pickle
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import ROOT, ctmon
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_whole_faults import (
    JOB,
    PY,
    Viewer,
    assert_complete,
    env_for,
    job_info,
    measure,
    read_events,
    recording,
    reference,
    viewer_socket,
    wait_until,
)

from ctmon.launch import runtime

NOBODY = 65534
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="needs root, to give files to another user (chown)")


@pytest.fixture
def rt() -> Iterator[str]:
    """A private runtime dir with a short path (sockets), as in test_whole_faults."""
    d = tempfile.mkdtemp(prefix="cts-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _session_dir(rt: str) -> str:
    return os.path.dirname(viewer_socket(rt))


# ---------------------------------------------------------------- file modes


def test_private_modes_during_a_run(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    tmp = str(tmp_path)
    gate = os.path.join(tmp, "gate")
    args = ["--warmup", "5", "--steps", "5", "--gate", gate]
    with recording(tmp, args, env_for(rt), options=["--listen", "127.0.0.1:0"]) as run:
        run.wait_stdout("READY")
        sdir = _session_dir(rt)
        wait_until(
            lambda: (
                glob.glob(os.path.join(sdir, "steps-*.ring"))
                and os.path.exists(os.path.join(sdir, "token"))
                and os.path.exists(os.path.join(sdir, "session.json"))
            ),
            10,
            "the session's files",
        )
        modes = {"runtime dir": _mode(os.path.join(rt, "run")), "session dir": _mode(sdir)}
        for name in os.listdir(sdir):
            if not name.endswith(".tmp"):
                modes[name if not name.startswith("steps-") else "steps-<pid>.ring"] = _mode(os.path.join(sdir, name))
        modes["recording"] = _mode(run.rec)
        open(gate, "w").close()
        assert run.wait(30) == 0, run.stderr()
    measure("file modes", **{k: oct(v) for k, v in modes.items()})
    assert modes["runtime dir"] == 0o700 and modes["session dir"] == 0o700
    for name in ("viewer.sock", "agent.sock", "session.json", "token", "steps-<pid>.ring", "recording"):
        assert modes[name] == 0o600, (name, oct(modes[name]))
    assert set(modes) >= {"viewer.sock", "agent.sock", "session.json", "token", "steps-<pid>.ring"}
    assert re.search(r"viewers can connect to 127\.0\.0\.1:\d+", run.stderr())  # loopback unless asked


def test_loose_runtime_dir_is_made_private(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    d = os.path.join(rt, "run")
    os.mkdir(d, 0o755)
    os.chmod(d, 0o755)
    out = ctmon("record", "-q", "-o", str(tmp_path / "r.jsonl"), JOB, "--steps", "3", env=env_for(rt))
    assert out.returncode == 0, out.stderr
    assert _mode(d) == 0o700


@pytest.mark.parametrize("kind", [pytest.param("owned by another user", marks=needs_root), "a symlink"])
def test_foreign_runtime_dir_is_refused(tmp_path, rt, monkeypatch, kind) -> None:  # type: ignore[no-untyped-def]
    d = os.path.join(rt, "run")
    if kind == "a symlink":
        os.mkdir(os.path.join(rt, "elsewhere"), 0o700)
        os.symlink(os.path.join(rt, "elsewhere"), d)
        msg = f"ctmon: {d} is not a directory (refusing to use it)"
    else:
        os.mkdir(d, 0o700)
        os.chown(d, NOBODY, NOBODY)
        msg = f"ctmon: {d} belongs to another user (refusing to use it)"
    rec = str(tmp_path / "r.jsonl")
    out = ctmon("record", "-o", rec, JOB, "--steps", "3", env=env_for(rt))
    assert out.returncode == 2 and out.stderr.strip() == msg, out.stderr
    assert not os.path.exists(rec), "the job must not start"
    listed = ctmon("watch", "--list", "--json", env=env_for(rt))
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    monkeypatch.setenv("CTMON_RUNTIME_DIR", d)
    with pytest.raises(runtime.RuntimeDirError):
        runtime.runtime_dir()


@needs_root
def test_other_users_sessions_are_not_listed(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """A session directory that is not ours (another uid, or a symlink to
    ours) is skipped, even when its session.json names a live supervisor."""
    tmp = str(tmp_path)
    gate = os.path.join(tmp, "gate")
    with recording(tmp, ["--steps", "3", "--gate", gate], env_for(rt)) as run:
        run.wait_stdout("READY")
        ours = _session_dir(rt)
        wait_until(lambda: os.path.exists(os.path.join(ours, "session.json")), 10, "session.json")
        root = os.path.dirname(ours)
        with open(os.path.join(ours, "session.json")) as f:
            info = json.load(f)
        foreign = os.path.join(root, "20990101-000000-theirs-4242")
        os.mkdir(foreign, 0o700)
        with open(os.path.join(foreign, "session.json"), "w") as f:
            json.dump({**info, "id": "20990101-000000-theirs-4242", "start": time.time() + 10}, f)
        s = socket.socket(socket.AF_UNIX)
        s.bind(os.path.join(foreign, "viewer.sock"))
        s.close()
        for p in (foreign, *glob.glob(os.path.join(foreign, "*"))):
            os.lchown(p, NOBODY, NOBODY)
        os.symlink(ours, os.path.join(root, "20990101-000000-link-4243"))
        out = ctmon("watch", "--list", "--json", env=env_for(rt))
        listed = json.loads(out.stdout)
        assert [s["id"] for s in listed] == [info["id"]], listed
        for key in ("20990101-000000-theirs", "20990101-000000-link"):
            out = ctmon("watch", key, env=env_for(rt))
            assert out.returncode == 2
            assert (
                out.stderr.strip() == f"ctmon: watch: no live ctmon session for '{key}' (ctmon watch --list shows them)"
            )
        open(gate, "w").close()
        assert run.wait(30) == 0


_PEER = r"""
import json, socket, sys, time
path, payload = sys.argv[1], sys.argv[2].encode()
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(path)
except OSError as e:
    print(json.dumps({"connect": e.strerror})); sys.exit()
try:
    s.sendall(payload)
except OSError as e:
    pass
s.settimeout(5)
try:
    got = s.recv(65536)
    print(json.dumps({"connect": "ok", "received": len(got)}))
except OSError as e:
    print(json.dumps({"connect": "ok", "error": str(e)}))
"""


def _as_nobody(*args: str) -> dict[str, Any]:
    p = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", PY, "-c", _PEER, *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)  # type: ignore[no-any-return]


def test_other_users_cannot_reach_a_session(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """Another user cannot connect (file modes); and with the modes opened on
    purpose, the supervisor still closes both sockets on them (SO_PEERCRED):
    nothing to read, and what they write is not recorded."""
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv, to act as another user")
    tmp = str(tmp_path)
    gate = os.path.join(tmp, "gate")
    with recording(tmp, ["--steps", "3", "--gate", gate], env_for(rt)) as run:
        run.wait_stdout("READY")
        sdir = _session_dir(rt)
        vsock, asock = os.path.join(sdir, "viewer.sock"), os.path.join(sdir, "agent.sock")
        note = json.dumps({"kind": "note", "t": time.time(), "level": "error", "source": "x", "message": "FOREIGN"})
        blocked = _as_nobody(vsock, "")
        assert blocked == {"connect": "Permission denied"}, blocked
        for d in (rt, os.path.join(rt, "run"), sdir):
            os.chmod(d, 0o711)
        for sock in (vsock, asock):
            os.chmod(sock, 0o666)
        viewer_try = _as_nobody(vsock, "")
        agent_try = _as_nobody(asock, note + "\n")
        open(gate, "w").close()
        assert run.wait(30) == 0
    measure("another uid", modes=blocked, viewer_socket_opened=viewer_try, agent_socket_opened=agent_try)
    assert viewer_try == {"connect": "ok", "received": 0}, viewer_try
    assert agent_try.get("received") == 0 or "error" in agent_try, agent_try
    events, _ = read_events(run.rec)
    assert not any("FOREIGN" in json.dumps(e) for e in events)


# --------------------------------------------------- no pickle, no eval


def test_peer_credentials_fail_closed() -> None:
    """A peer whose credentials cannot be read is refused, not trusted."""
    from ctmon.launch.sockets import same_user as _same_user

    a, b = socket.socketpair()
    try:
        assert _same_user(a)  # a real peer: this user

        class Unreadable:
            def getsockopt(self, *args: Any) -> bytes:
                raise OSError("no credentials")

        assert not _same_user(Unreadable())  # type: ignore[arg-type]
    finally:
        a.close()
        b.close()


def test_no_pickle_or_eval_in_ctmon() -> None:
    """No unpickling, marshal or YAML loading anywhere; eval/exec/compile only
    where the job's own script is run (ctmon/agent/boot.py)."""
    banned_modules = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "yaml", "jsonpickle"}
    found = []
    for path in glob.glob(os.path.join(ROOT, "ctmon", "**", "*.py"), recursive=True):
        rel = os.path.relpath(path, ROOT)
        with open(path) as f:
            tree = ast.parse(f.read(), rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [f"{rel}: import {a.name}" for a in node.names if a.name.split(".")[0] in banned_modules]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in banned_modules:
                found.append(f"{rel}: from {node.module} import")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = node.func.id
                if name in ("eval", "exec", "compile") and rel != os.path.join("ctmon", "agent", "boot.py"):
                    found.append(f"{rel}:{node.lineno}: {name}()")
                if name == "__import__" and not (node.args and isinstance(node.args[0], ast.Constant)):
                    found.append(f"{rel}:{node.lineno}: __import__ of a computed name")
    assert not found, found


# ------------------------------------------------------- hostile peers


def _tcp_address(run) -> tuple[str, int, str]:  # type: ignore[no-untyped-def]
    m = wait_until(
        lambda: re.search(
            r"viewers can connect to ([\d.]+):(\d+): ctmon watch --connect \S+ "
            r"--token-file (\S+)",
            run.stderr(),
        ),
        20,
        "the TCP address",
    )
    with open(m.group(3)) as f:
        return m.group(1), int(m.group(2)), f.read().strip()


def _drain(sock: socket.socket, limit: float = 0.5) -> bytes:
    sock.settimeout(limit)
    data = b""
    with contextlib.suppress(OSError):
        while len(data) < 1 << 20:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data


def _closed_within(sock: socket.socket, timeout: float, t0: float | None = None) -> tuple[bool, float, int]:
    """(closed by the peer, how long after t0 (default: now), bytes received before)."""
    t0 = time.monotonic() if t0 is None else t0
    sock.settimeout(timeout)
    got = 0
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True, time.monotonic() - t0, got
            got += len(chunk)
    except TimeoutError:
        return False, time.monotonic() - t0, got
    except OSError:
        return True, time.monotonic() - t0, got


PWNED = "/tmp/ctmon-pwned-{}"


def _evil_controls(marker: str) -> list[bytes]:
    cmd = f"touch {marker}"
    lines = [
        {"kind": "control", "t": 1.0, "action": "exec", "code": f"import os; os.system({cmd!r})"},
        {"kind": "control", "t": 1.0, "action": f"__import__('os').system({cmd!r})"},
        {"kind": "control", "t": 1.0, "action": {"exec": cmd}},
        {"kind": "control", "t": 1.0, "action": ["kill"]},
        {"kind": "control", "t": 1.0, "action": "SIGKILL"},
        {"kind": "exec", "t": 1.0, "argv": ["sh", "-c", cmd]},
        {"kind": "eval", "t": 1.0, "expr": f"os.system({cmd!r})"},
        {"kind": "hello", "t": 1.0, "token": "x", "run": cmd},
    ]
    out = [json.dumps(ln).encode() + b"\n" for ln in lines]

    class _Boom:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (cmd,))

    out.append(pickle.dumps(_Boom()) + b"\n")  # the bytes of a pickle that would run the command
    return out


@pytest.mark.slow
def test_hostile_peers_change_nothing(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """Garbage, a 10 MB line, a peer that never reads, commands a viewer has no
    business sending, spoofed events on the agent socket, TCP peers with a
    wrong token, no hello or junk: all while a real viewer watches. The job
    keeps its pace and exit status, the recording is exact, the real viewer
    sees all of it, and nothing is executed."""
    tmp = str(tmp_path)
    marker = PWNED.format(os.getpid())
    with contextlib.suppress(OSError):
        os.unlink(marker)
    done = os.path.join(tmp, "done")  # the job ends once the peers have had their go
    args = ["--steps", "600", "--step-ms", "5", "--print-every", "1", "--done", done]
    ref = reference(args, tmp)
    results: dict[str, Any] = {}
    held: list[socket.socket] = []
    with recording(tmp, args, env_for(rt), options=["--listen", "127.0.0.1:0"]) as run:
        host, port, token = _tcp_address(run)
        vpath = viewer_socket(rt)
        apath = os.path.join(os.path.dirname(vpath), "agent.sock")
        real = Viewer(tmp, vpath)

        def unix(path: str) -> socket.socket:
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            held.append(s)
            return s

        def tcp() -> socket.socket:
            s = socket.create_connection((host, port), timeout=5)
            held.append(s)
            return s

        try:
            real.wait_events(5)
            # 1. a peer that connects and never reads
            unix(vpath)
            # 2. garbage, then a 10 MB line without a newline, on the viewer socket
            g = unix(vpath)
            g.sendall(os.urandom(256 << 10) + b"\n\xff\xfe{not json}\n")
            big = unix(vpath)
            sender = threading.Thread(target=lambda: big.sendall(b"A" * (10 << 20)), daemon=True)
            sender.start()
            # 3. commands a viewer may not give (and a pickle)
            c = unix(vpath)
            for line in _evil_controls(marker):
                c.sendall(line)
            # 4. the agent socket: garbage, a 10 MB line, events only the supervisor may write
            a = unix(apath)
            a.sendall(os.urandom(64 << 10) + b"\n")
            a.sendall(b"{" + b"x" * (10 << 20) + b"\n")
            for kind in ("session", "exit", "output", "sample", "steps"):
                a.sendall(
                    json.dumps(
                        {
                            "kind": kind,
                            "t": 1.0,
                            "code": 99,
                            "stream": "stdout",
                            "data": "SPOOFED\n",
                            "src": "api",
                            "i0": 0,
                            "ns": [1] * 50,
                            "v": 1,
                            "id": "spoof",
                        }
                    ).encode()
                    + b"\n"
                )
            # 5. TCP: wrong token, junk, no hello; then the right token
            wrong = tcp()
            wrong.sendall(json.dumps({"kind": "hello", "t": 1.0, "token": "not-the-token"}).encode() + b"\n")
            junk = tcp()
            junk.sendall(b"\x00\x01GET / HTTP/1.1\r\n\r\n")
            flood = [tcp() for _ in range(20)]  # more half-open peers than the supervisor keeps (16)
            silent = tcp()  # the newest: the oldest waiting peers make room for it
            silent_since = time.monotonic()
            dropped_at_once = sum(_closed_within(f, 0.3)[0] for f in flood)
            results["tcp half-open flood: oldest dropped at once"] = dropped_at_once
            results["tcp wrong token"] = _closed_within(wrong, 3)
            results["tcp junk"] = _closed_within(junk, 3)
            results["tcp no hello"] = _closed_within(silent, 10, silent_since)
            results["tcp half-open flood: all closed"] = all(_closed_within(f, 3)[0] for f in flood)
            good = tcp()
            good.sendall(json.dumps({"kind": "hello", "t": 1.0, "token": token}).encode() + b"\n")
            first = _drain(good, 1.0).split(b"\n", 1)[0]
            results["tcp good token first event"] = json.loads(first)["kind"]
            results["garbage peer still served"] = _drain(g, 0.5)[:200].startswith(b'{"kind":"session"')
            sender.join(30)
            results["10 MB line sent"] = not sender.is_alive()
            assert run.proc.poll() is None, "the job ended before the peers were done"
            open(done + ".go", "w").close()
            rc = run.wait(60)
            final = real.wait_done(30)
        finally:
            real.cleanup()
            for s in held:
                s.close()
    info = job_info(run.stdout())
    events, report = assert_complete(run.rec, ref.steps, ref)
    measure(
        "hostile peers",
        rc=rc,
        steps=report["steps"]["count"],
        max_gap_s=info and info["max_gap_s"],
        real_viewer_events=final["events"],
        recording_events=len(events),
        **{k: (list(v) if isinstance(v, tuple) else v) for k, v in results.items()},
    )
    assert rc == ref.rc == 0
    assert info is not None and info["max_gap_s"] < 1.0, info
    assert final["events"] == len(events) and final["last"] == "exit"
    assert not os.path.exists(marker), "a peer made something run"
    assert "SPOOFED" not in json.dumps(events) and not any(e.get("id") == "spoof" for e in events)
    assert not any(e["kind"] == "note" and "sent SIG" in str(e.get("message")) for e in events), "a control was obeyed"
    # told "authentication failed" in one short error line, then closed; nothing of the session
    assert results["tcp wrong token"][0] and 0 < results["tcp wrong token"][2] < 120
    assert results["tcp junk"][0] and 0 < results["tcp junk"][2] < 120
    closed, after, got = results["tcp no hello"]
    assert closed and got == 0 and 3.0 < after < 9.0, results["tcp no hello"]
    assert results["tcp good token first event"] == "session"
    assert results["tcp half-open flood: oldest dropped at once"] >= 4 and results["tcp half-open flood: all closed"]
    assert results["garbage peer still served"] and results["10 MB line sent"]


# ------------------------------------------------ socket-level fuzzing

_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=30)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_kinds = st.sampled_from(
    [
        "session",
        "process",
        "exit",
        "output",
        "sample",
        "steps",
        "note",
        "drops",
        "compile",
        "compile_start",
        "graph_break",
        "cache",
        "device_time",
        "control",
        "hello",
        "x",
    ]
)


def _event_line(kind: str, fields: dict[str, Any], sdir: str, ring_name: str) -> bytes:
    ev: dict[str, Any] = {"kind": kind, "t": 1.0, **fields}
    if kind == "process":  # a step ring anywhere: in the session dir, outside it, a socket, a missing file
        ev["step_ring"] = ring_name if ring_name.startswith("/") else os.path.join(sdir, ring_name)
    if kind == "control" and ev.get("action") in ("interrupt", "terminate", "kill"):
        ev["action"] = "nothing"  # a viewer may signal the job: that is its right, not a fault
    return json.dumps(ev).encode() + b"\n"


@pytest.mark.slow
def test_fuzz_the_live_sockets(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """Hypothesis feeds random bytes and random events to a live supervisor's
    viewer and agent sockets; afterwards it still serves a viewer, the job
    ends as without ctmon and the recording is whole."""
    tmp = str(tmp_path)
    gate = os.path.join(tmp, "gate")
    args = ["--warmup", "100", "--steps", "100", "--gate", gate, "--print-every", "10"]
    ref = reference(args, tmp)
    with recording(tmp, args, env_for(rt)) as run:
        run.wait_stdout("READY")
        vpath = viewer_socket(rt)
        sdir = os.path.dirname(vpath)
        apath = os.path.join(sdir, "agent.sock")
        counts = {"examples": 0}

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(
            which=st.sampled_from(["viewer", "agent"]),
            chunks=st.lists(
                st.one_of(
                    st.binary(max_size=3000),
                    st.builds(
                        _event_line,
                        _kinds,
                        st.dictionaries(st.text(max_size=10), _json, max_size=5),
                        st.just(sdir),
                        st.sampled_from(
                            [
                                "steps-1.ring",
                                "viewer.sock",
                                "session.json",
                                "../x.ring",
                                "/dev/zero",
                                "/etc/passwd",
                                "nope",
                            ]
                        ),
                    ),
                ),
                max_size=6,
            ),
        )
        def poke(which: str, chunks: list[bytes]) -> None:
            counts["examples"] += 1
            s = socket.socket(socket.AF_UNIX)
            s.connect(vpath if which == "viewer" else apath)
            try:
                for c in chunks:
                    s.sendall(c)
                s.shutdown(socket.SHUT_WR)
                _drain(s, 0.01)
            except OSError:
                pass
            finally:
                s.close()
            assert run.proc.poll() is None, run.stderr()

        poke()
        v = Viewer(tmp, vpath)
        try:
            v.wait_events(3)
            open(gate, "w").close()
            rc = run.wait(60)
            final = v.wait_done(30)
        finally:
            v.cleanup()
    assert rc == ref.rc, run.stderr()
    assert "Traceback" not in run.stderr()
    events, report = assert_complete(run.rec, ref.steps, ref)
    assert final["events"] == len(events)
    kinds: dict[str, int] = {}
    for e in events:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    measure(
        "socket fuzzing",
        examples=counts["examples"],
        rc=rc,
        steps=report["steps"]["count"],
        recording_events=len(events),
        kinds=kinds,
    )


# ------------------------------------- fuzzing TCP hellos and agent values

_surrogates = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=4)
_any_text = st.one_of(st.text(max_size=20), _surrogates, st.sampled_from(["…", "é", "\x00", "tok\u2028en", "🔑"]))
_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), _any_text, st.sampled_from([10**400, -(2**63), 1e308])
)
_value = st.recursive(
    _scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_any_text, inner, max_size=3), max_leaves=8
)


def _deep(n: int, kind: str = "hello") -> bytes:
    return b'{"kind":"' + kind.encode() + b'","t":1,"token":' + b"[" * n + b"]" * n + b"}\n"


_raw = st.sampled_from(
    [
        _deep(900),
        _deep(40),
        _deep(100_000),
        _deep(900, "note"),
        b"\x00" * 64 + b"\n",
        b"\xff\xfe\xfd\n",
        b'{"kind":"hello","t":1,"token":"\xff\xfe"}\n',
        b'{"kind":"hello","token":"\\ud800"}\n',
        b'{"kind":"process","t":1,"step_ring":"a\\u0000b"}\n',
        b'{"kind":"process","t":1,"step_ring":7}\n',
        b'{"kind":"hello","t":1,"token":"' + b"x" * (300 << 10) + b'"}\n',
        b"A" * (1100 << 10) + b"\n",
        b'{"kind":"note","t":1e999,"message":NaN}\n',
        b'{"kind":"hello","t":1,"token":' + b"9" * 5000 + b"}\n",
    ]
)


def _json_line(obj: Any) -> bytes:
    return json.dumps(obj, allow_nan=True).encode() + b"\n"


_hellos = st.fixed_dictionaries({"kind": st.just("hello"), "t": _scalar, "token": st.one_of(_any_text, _value)}).map(
    _json_line
)
_lines = st.one_of(
    _value.map(_json_line),  # hellos and events of every JSON type: null, numbers, lists, ...
    _hellos,
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["note", "process", "compile", "graph_break", "control", "hello"]), "t": _scalar},
        optional={
            "message": _value,
            "step_ring": _value,
            "token": _value,
            "action": _value,
            "grace": _value,
            "compile_id": _value,
        },
    ).map(_json_line),
    _raw,
    st.binary(max_size=200),
)


@pytest.mark.slow
def test_fuzz_tcp_hellos_and_agent_values(tmp_path, rt) -> None:  # type: ignore[no-untyped-def]
    """Hypothesis sends hellos of every JSON type (tokens of every type,
    non-ASCII, surrogates), deep and huge values, NUL bytes and invalid
    UTF-8 to the TCP port, the viewer socket and the agent socket of a live
    `ctmon record --listen` while the job steps; the supervisor and the job
    live on, the job's exit code and every step are in the recording, and a
    viewer with the token is still served."""
    tmp = str(tmp_path)
    done = os.path.join(tmp, "done")
    args = ["--steps", "400", "--step-ms", "5", "--print-every", "50", "--done", done]
    ref = reference(args, tmp)
    counts = {"examples": 0, "tcp": 0, "viewer": 0, "agent": 0}
    with recording(tmp, args, env_for(rt), options=["--listen", "127.0.0.1:0"]) as run:
        host, port, token = _tcp_address(run)
        vpath = viewer_socket(rt)
        apath = os.path.join(os.path.dirname(vpath), "agent.sock")
        t0 = time.monotonic()

        @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @example(which="tcp", first=_json_line({"kind": "hello", "t": 1, "token": "tok…en"}), lines=[])
        @example(which="agent", first=_deep(900, "note"), lines=[])
        @given(
            which=st.sampled_from(["tcp", "tcp", "agent", "viewer"]),
            first=_hellos | _lines,
            lines=st.lists(_lines, max_size=3),
        )
        def poke(which: str, first: bytes, lines: list[bytes]) -> None:
            lines = [first, *lines]  # a TCP peer's first line is its hello (or what stands for one)
            counts["examples"] += 1
            counts[which] += 1
            if which == "tcp":
                s = socket.create_connection((host, port), timeout=5)
            else:
                s = socket.socket(socket.AF_UNIX)
                s.connect(vpath if which == "viewer" else apath)
            try:
                for line in lines:
                    if which == "viewer" and b'"action"' in line:
                        continue  # a viewer may signal the job: that is its right, not a fault
                    s.sendall(line)
                s.shutdown(socket.SHUT_WR)
                _drain(s, 0.01)
            except OSError:
                pass
            finally:
                s.close()
            assert run.proc.poll() is None, run.stderr()[-3000:]

        poke()
        fuzz_s = time.monotonic() - t0
        good = socket.create_connection((host, port), timeout=5)
        try:
            good.sendall(json.dumps({"kind": "hello", "t": 1.0, "token": token}).encode() + b"\n")
            first = _drain(good, 1.0).split(b"\n", 1)[0]
        finally:
            good.close()
        wait_until(lambda: os.path.exists(done), 60, "the job's steps")
        open(done + ".go", "w").close()
        rc = run.wait(60)
    assert json.loads(first)["kind"] == "session"
    assert rc == ref.rc == 0, run.stderr()[-3000:]
    assert "Traceback" not in run.stderr()
    events, report = assert_complete(run.rec, ref.steps, ref)
    rep = ctmon("report", run.rec, "--json")
    assert rep.returncode == 0, rep.stderr
    summary = json.loads(rep.stdout)
    assert summary["steps"]["count"] == ref.steps
    measure(
        "tcp/agent fuzzing",
        fuzz_s=round(fuzz_s, 1),
        rc=rc,
        steps=summary["steps"]["count"],
        recording_events=len(events),
        **counts,
    )
