"""The supervisor: the process that owns the job and writes the recording.

It lives exactly as long as the job, so the recording is complete whatever
happens to whoever is looking at it. One selector loop, no threads besides
the sampler:

* the job's agent connects to ``agent.sock`` and streams event lines; each
  line is validated and appended to the recording as is;
* the job's stdout/stderr come through ptys (when a terminal is expected) or
  pipes; chunks become ``output`` events, are copied raw to an output log,
  and in ``record`` mode are passed through to ctmon's own stdout/stderr;
* the sampler thread adds ``sample`` events about once a second;
* viewers connect to ``viewer.sock``; each one streams the recording file
  from byte 0 and then follows it, so a viewer attached late sees exactly
  what one attached at the start saw, and a stalled viewer costs nothing but
  its file offset (no per-viewer buffers);
* when the job exits, its last output and events are drained, an ``exit``
  event is written, and the file is fsync'ed.
"""

from __future__ import annotations

import codecs
import errno
import fcntl
import hmac
import ipaddress
import json
import os
import secrets
import selectors
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ctmon
from ctmon import protocol
from ctmon.launch import execwatch, files, relay, stdfds
from ctmon.launch.spec import JobSpec, job_python_path
from ctmon.ring import RingError, RingReader, StepDecoder, StepRing
from ctmon.store import ExitInfo, Session

READ_SIZE = 16 * 1024
DRAIN_TIMEOUT_S = 2.0
MAX_STDIN_BYTES = 4000  # a pty's line buffer holds 4095 bytes
HANDOFF_IDLE_S = 0.3  # after the job exited: this long without output from its children
VIEWER_GRACE_S = 5.0
AUTH_TIMEOUT_S = 5.0
MAX_HALF_OPEN = 16  # TCP peers waiting to authenticate; the oldest is dropped for a new one
MAX_VIEWERS = 64  # viewers being served at once (both sockets); more are told so and closed
MAX_PEER_NOTES = 20  # notes about misbehaving peers in one recording; later ones are only counted
MAX_STOP_GRACE_S = 7 * 24 * 3600.0
REGISTRY_INTERVAL_S = 2.0
MAX_PENDING_BYTES = 256 << 20  # events held in memory while the disk is full  # how often session.json (what `ctmon watch` lists) is refreshed
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
CONTROL_SIGNALS = {"interrupt": signal.SIGINT, "terminate": signal.SIGTERM, "kill": signal.SIGKILL}


@dataclass
class SupervisorOptions:
    recording: str
    session_dir: str
    session_id: str
    mode: str = "record"  # "record": output passes through; "attach": detached, output to viewers
    output_log: str | None = None
    sample_interval: float = 1.0
    pty_size: tuple[int, int] = (40, 120)
    extra_env: dict[str, str] = field(default_factory=dict)
    listen: str | None = None  # "[HOST:]PORT": also serve viewers over TCP (token required)
    new_files: bool = False  # ctmon chose the names: create them, never reuse what is there


class SupervisorError(Exception):
    """The supervisor could not start (one line for the user); the job was not started."""


class _Stream:
    def __init__(self, name: str, fd: int, passthrough_fd: int | None) -> None:
        self.name = name
        self.fd = fd
        self.passthrough_fd = passthrough_fd
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.open = True


class _Agent:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.splitter = protocol.LineSplitter()
        self.pid: int | None = None


class _Ring:
    def __init__(self, path: str, ring: StepRing) -> None:
        self.path = path
        self.reader = RingReader(ring)
        self.decoder = StepDecoder()
        # A program the job exec'd into starts a new ring counting from 0:
        # its steps of the same source continue the previous ring's indices.
        self.follows_src: str | None = None
        self.offset = 0

    def next_index(self) -> tuple[str, int]:
        src = self.decoder.src
        return src, self.decoder.next_idx + (self.offset if src == self.follows_src else 0)


class _Viewer:
    def __init__(self, sock: socket.socket, authed: bool = True) -> None:
        self.sock = sock
        self.cursor = 0
        self.splitter = protocol.LineSplitter(max_line=4096)
        self.writing = False
        # TCP viewers must present the session token first, within a deadline.
        self.authed = authed
        self.deadline = time.monotonic() + AUTH_TIMEOUT_S


class Supervisor:
    def __init__(self, spec: JobSpec, opts: SupervisorOptions) -> None:
        self.spec = spec
        self.opts = opts
        self.session = Session()
        self.sel = selectors.DefaultSelector()
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit: ExitInfo | None = None
        self.streams: list[_Stream] = []
        self.agents: list[_Agent] = []
        self.rings: list[_Ring] = []
        self._steps_lost = 0
        self.viewers: list[_Viewer] = []
        self.inbox: deque[protocol.Event] = deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._rec_fd = -1
        self._pending: list[bytes] = []  # lines not yet on disk (a full disk keeps them here)
        self._pending_bytes = 0
        self._lost_lines = 0
        self._rec_read_fd = -1
        self._rec_size = 0
        self._rec_error: str | None = None
        self._outlog: Any = None
        self._pending_signals: list[int] = []
        self._stop_sampler = threading.Event()
        self._pidfd = -1
        self._next_registry = 0.0
        self._last_output = 0.0
        self._exec_watch: execwatch.ExecWatch | None = None
        self.tcp_sock: socket.socket | None = None
        self.tcp_address: str | None = None
        self.token: str | None = None
        self.tcp_all_interfaces = False
        self._peer_notes = 0
        self._kill_at: float | None = None  # a `stop` control's SIGKILL, if the job outlives its grace
        self.agent_path = os.path.join(opts.session_dir, "agent.sock")
        self.viewer_path = os.path.join(opts.session_dir, "viewer.sock")
        self.on_event: Callable[[protocol.Event], None] | None = None
        self.on_listening: Callable[[str, str], None] | None = None

    # ------------------------------------------------------------------ setup

    def _listen(self, path: str) -> socket.socket:
        # The file appears at bind(), but connect() is refused until listen():
        # clients take the file's existence as "ready" (start_detached), so
        # bind a temporary name and rename it into place once listening. The
        # temporary name is as long as the final one, so it fits wherever
        # that does (a socket path is limited to 107 bytes).
        head, tail = os.path.split(path)
        tmp = os.path.join(head, "~" + tail[1:])
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # socket file 0600 from the start
        try:
            s.bind(tmp)
        finally:
            os.umask(old)
        s.listen(16)
        s.setblocking(False)
        os.replace(tmp, path)
        return s

    def _open_recording(self) -> None:
        """Open and lock the recording (and output log); an existing file is
        emptied by ``_empty_recording`` only once setup has gone through
        (ctmon/launch/files.py)."""
        path = self.opts.recording
        try:
            self._rec_fd = files.open_new(path) if self.opts.new_files else files.open_given(path)
            self._rec_read_fd = files.reopen_for_reading(self._rec_fd, path)
        except (files.FileRefused, OSError) as e:
            raise SupervisorError(str(e) if isinstance(e, files.FileRefused) else f"cannot open {path}: {e}") from None
        if self.opts.output_log:
            try:
                log = self.opts.output_log
                lfd = files.open_new(log) if self.opts.new_files else files.open_beside(log)
                self._outlog = os.fdopen(lfd, "wb", buffering=1 << 16)
            except (files.FileRefused, OSError):
                self._outlog = None  # the job's output still reaches viewers and the recording

    def _empty_recording(self) -> None:
        files.empty(self._rec_fd)
        if self._outlog is not None:
            try:
                files.empty(self._outlog.fileno())
            except OSError:
                self._outlog = None

    def _make_stream(self, name: str, our_fd: int) -> tuple[int, _Stream] | None:
        """A pty when the job should see a terminal, else a pipe; None when
        ctmon itself was started with that fd closed (the job gets it closed)."""
        attach = self.opts.mode == "attach"
        if not attach and our_fd in stdfds.closed():
            return None
        passthrough = None if attach else our_fd
        use_pty = attach or _isatty(our_fd)
        if use_pty:
            master, slave = os.openpty()
            _raw_output(slave)
            rows, cols = self.opts.pty_size if attach else _term_size(our_fd, self.opts.pty_size)
            _set_winsize(master, rows, cols)
            child_end, ours = slave, master
        else:
            ours, child_end = os.pipe()
        os.set_blocking(ours, False)
        return child_end, _Stream(name, ours, passthrough)

    def _spawn(self) -> None:
        made = [self._make_stream("stdout", 1), self._make_stream("stderr", 2)]
        self.streams = [m[1] for m in made if m is not None]
        child_ends = [m[0] if m is not None else None for m in made]
        env = dict(os.environ)
        env.update(self.opts.extra_env)
        env["CTMON_AGENT_SOCKET"] = self.agent_path
        env.pop("CTMON_AGENT_PID", None)  # the job claims it (see ctmon/agent/site)
        env["PYTHONPATH"] = job_python_path(env.get("PYTHONPATH"))
        env["CTMON_SESSION"] = self.opts.session_id
        env["CTMON_SESSION_DIR"] = self.opts.session_dir
        attach = self.opts.mode == "attach"
        # attach: the job's stdin is its terminal (the pty its output goes
        # to), as in a terminal; the viewer types into it (_job_stdin).
        # record: ctmon's own stdin, unchanged.
        stdin: Any = (child_ends[0] if child_ends[0] is not None else subprocess.DEVNULL) if attach else None
        # std fds the user closed for ctmon are closed for the job as well
        # (they hold /dev/null here only so that no socket lands on them)
        closed = not attach and bool(stdfds.closed())
        try:
            self.proc = subprocess.Popen(
                self.spec.argv(),
                cwd=self.spec.cwd,
                env=env,
                stdin=stdin,
                stdout=child_ends[0],
                stderr=child_ends[1],
                close_fds=True,
                start_new_session=attach,
                preexec_fn=stdfds.close_in_child if closed else None,
            )
        finally:
            for fd in child_ends:
                if fd is not None:
                    os.close(fd)
        for st in self.streams:
            self.sel.register(st.fd, selectors.EVENT_READ, ("stream", st))
        self._exec_watch = execwatch.ExecWatch(self.proc.pid)
        try:
            self._pidfd = os.pidfd_open(self.proc.pid)
            self.sel.register(self._pidfd, selectors.EVENT_READ, ("pidfd", None))
        except (AttributeError, OSError):
            self._pidfd = -1

    # ------------------------------------------------------------------- run

    def run(self) -> ExitInfo:
        if self.opts.listen:
            # before anything else: a busy port must not cost the user an
            # existing recording, nor start the job
            try:
                self._listen_tcp(self.opts.listen)
            except (OSError, ValueError) as e:
                raise SupervisorError(f"cannot listen on {self.opts.listen}: {getattr(e, 'strerror', None) or e}") from None
        self._open_recording()  # locked, not yet emptied: before the viewer socket says "ready"
        self.agent_sock = self._listen(self.agent_path)
        self.viewer_sock = self._listen(self.viewer_path)
        self._empty_recording()  # setup went through: an earlier recording may go now
        self.sel.register(self.agent_sock, selectors.EVENT_READ, ("agent_listen", None))
        self.sel.register(self.viewer_sock, selectors.EVENT_READ, ("viewer_listen", None))
        self.sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        start = time.time()
        try:
            self._spawn()  # before our signal handlers: the job inherits the defaults
        except OSError as e:
            self._emit(self._session_event(start, None))
            self._emit({"kind": protocol.NOTE, "t": time.time(), "level": "error", "source": "ctmon",
                        "message": f"could not start {self.spec.python}: {e.strerror or e}"})
            self._emit({"kind": protocol.EXIT, "t": time.time(), "code": 127, "signal": None})
            self._finish()
            return self.exit or ExitInfo(127, None, time.time())
        assert self.proc is not None
        self._install_signals()
        self._emit(self._session_event(start, self.proc.pid))
        self._write_session_file("running")
        sampler = threading.Thread(target=self._sample_loop, name="ctmon-sampler", daemon=True)
        sampler.start()
        try:
            self._loop()
        finally:
            self._stop_sampler.set()
        self._finish()
        assert self.exit is not None
        return self.exit

    def _session_event(self, start: float, job_pid: int | None) -> protocol.Event:
        return {
            "kind": protocol.SESSION,
            "t": start,
            "v": protocol.PROTOCOL_VERSION,
            "ctmon": ctmon.__version__,
            "id": self.opts.session_id,
            "mode": self.opts.mode,
            "command": self.spec.display(),
            "cwd": self.spec.cwd,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "job_pid": job_pid,
            "recording": os.path.abspath(self.opts.recording),
        }

    def _loop(self) -> None:
        assert self.proc is not None
        exited_at: float | None = None
        while True:
            # Wake at least every 50 ms: the step ring is drained on a clock,
            # not on an fd, and viewers should see steps with little delay.
            timeout = 0.05
            for key, mask in self.sel.select(timeout):
                kind, obj = key.data
                if kind == "stream":
                    self._read_stream(obj)
                elif kind == "agent":
                    self._guarded(self._read_agent, obj)
                elif kind == "agent_listen":
                    self._accept_agent()
                elif kind == "viewer_listen":
                    self._accept_viewer()
                elif kind == "tcp_listen":
                    self._accept_tcp()
                elif kind == "viewer":
                    self._guarded(self._serve_viewer, obj, mask)
                elif kind == "wake":
                    _drain_fd(self._wake_r)
                elif kind == "pidfd":
                    pass
            self._handle_signals()
            self._escalate_stop()
            self._expire_unauthenticated()
            while self.inbox:
                self._emit(self.inbox.popleft())
            self._drain_rings()
            self._flush()
            now = time.monotonic()
            if now >= self._next_registry:
                self._next_registry = now + REGISTRY_INTERVAL_S
                self._write_session_file("running")
            self._check_exec(alive=exited_at is None)
            if exited_at is None and self.proc.poll() is not None:
                exited_at = time.monotonic()
                if self._pidfd >= 0:
                    self.sel.unregister(self._pidfd)
                    os.close(self._pidfd)
                    self._pidfd = -1
            if exited_at is not None:
                drained = not any(s.open for s in self.streams) and not self.agents
                if drained:
                    return
                waited = time.monotonic() - exited_at
                # Streams still open once the job and its agent are gone: a
                # child of the job holds them. It keeps printing where python
                # would have let it (see _hand_off_streams); we are done.
                idle = not self.agents and time.monotonic() - self._last_output > HANDOFF_IDLE_S
                if waited > DRAIN_TIMEOUT_S or (idle and waited > HANDOFF_IDLE_S):
                    self._hand_off_streams()
                    return

    # ------------------------------------------------------------- recording

    def _emit(self, ev: protocol.Event) -> None:
        self._write_line(protocol.encode(ev), ev)

    def _write_line(self, line: bytes, ev: protocol.Event) -> None:
        self.session.apply(ev)
        if self.on_event is not None:
            self.on_event(ev)
        if self._rec_fd < 0:
            return
        if self._pending_bytes + len(line) > MAX_PENDING_BYTES:
            self._lost_lines += 1  # the disk has been full for a long while
            return
        self._pending.append(line)
        self._pending_bytes += len(line)

    def _flush(self) -> None:
        if self._pending and self._rec_fd >= 0:
            data = memoryview(b"".join(self._pending))
            written = 0
            try:
                while written < len(data):
                    written += os.write(self._rec_fd, data[written:])
            except OSError as e:
                # Disk full or gone: keep the rest in memory and retry on the
                # next pass; the job runs on regardless.
                if self._rec_error is None:
                    self._rec_error = e.strerror or str(e)
                    _say(f"ctmon: cannot write the recording ({self._rec_error}); holding events in memory and retrying")
            else:
                if self._rec_error is not None:
                    self._rec_error = None
                    _say("ctmon: recording resumed")
            self._rec_size += written
            rest = bytes(data[written:])
            self._pending = [rest] if rest else []
            self._pending_bytes = len(rest)
            if not rest and self._lost_lines:
                lost, self._lost_lines = self._lost_lines, 0
                self._emit({"kind": protocol.NOTE, "t": time.time(), "level": "error", "source": "ctmon",
                            "message": f"{lost} events were lost while the recording could not be written"})
        if self._outlog is not None:
            try:
                self._outlog.flush()
            except OSError:
                self._outlog = None
        for v in self.viewers:
            self._want_write(v)

    # ---------------------------------------------------------------- inputs

    def _read_stream(self, st: _Stream) -> None:
        try:
            data = os.read(st.fd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError as e:
            if e.errno != errno.EIO:  # EIO: pty closed by the child
                pass
            data = b""
        if not data:
            text = st.decoder.decode(b"", final=True)
            if text:
                self._emit({"kind": protocol.OUTPUT, "t": time.time(), "stream": st.name, "data": text})
            st.open = False
            self.sel.unregister(st.fd)
            os.close(st.fd)
            return
        if st.passthrough_fd is not None:
            try:
                _write_all(st.passthrough_fd, data)
            except BrokenPipeError:
                self._reader_gone(st, data)
                return
            except OSError:
                st.passthrough_fd = None  # our terminal went away; keep recording
        if self._outlog is not None:
            try:
                self._outlog.write(data)
            except OSError:
                self._outlog = None
        self._last_output = time.monotonic()
        text = st.decoder.decode(data)
        if text:
            self._emit({"kind": protocol.OUTPUT, "t": time.time(), "stream": st.name, "data": text})

    def _job_stdin(self, data: Any) -> None:
        """A line a viewer typed for the job (attach: its stdin is the pty)."""
        st = self.streams[0] if self.streams and self.opts.mode == "attach" else None
        if not isinstance(data, str) or not data or st is None or not st.open:
            return
        raw = data.encode("utf-8", "replace")[:MAX_STDIN_BYTES]
        try:
            os.write(st.fd, raw)  # the pty echoes it into the output, as a terminal would
        except OSError as e:
            msg = f"could not pass input to the job: {e.strerror or e}"
        else:
            msg = f"passed {len(raw)} bytes of input to the job's stdin"
        self._emit({"kind": protocol.NOTE, "t": time.time(), "level": "info", "source": "ctmon", "message": msg})

    def _reader_gone(self, st: _Stream, data: bytes) -> None:
        """Whoever read our output is gone (``ctmon record job.py | head -1``).

        Without ctmon the job's own next write would fail (SIGPIPE, or
        BrokenPipeError under python): closing our end of its pipe makes
        that write fail the same way. What it had written still counts."""
        if self._outlog is not None:
            try:
                self._outlog.write(data)
            except OSError:
                self._outlog = None
        text = st.decoder.decode(data, final=True)
        if text:
            self._emit({"kind": protocol.OUTPUT, "t": time.time(), "stream": st.name, "data": text})
        self._emit({"kind": protocol.NOTE, "t": time.time(), "level": "info", "source": "ctmon",
                    "message": f"the reader of ctmon's {st.name} went away (broken pipe); "
                               f"the job's {st.name} was closed, as it would have been without ctmon"})
        st.open = False
        self.sel.unregister(st.fd)
        os.close(st.fd)

    def _accept_agent(self) -> None:
        try:
            conn, _ = self.agent_sock.accept()
        except OSError:
            return
        if not _same_user(conn):
            conn.close()
            return
        conn.setblocking(False)
        a = _Agent(conn)
        self.agents.append(a)
        self.sel.register(conn, selectors.EVENT_READ, ("agent", a))

    def _guarded(self, handler: Callable[..., None], peer: _Agent | _Viewer, *args: Any) -> None:
        """One peer's bytes must never take the supervisor (and so the job) down:
        whatever a handler raises drops that peer, with a note, and nothing else."""
        try:
            handler(peer, *args)
        except Exception as e:
            what = "an agent connection" if isinstance(peer, _Agent) else "a viewer"
            self._drop_peer(peer)
            self._peer_note(f"dropped {what}: it sent what ctmon could not handle ({type(e).__name__}: {e})")

    def _peer_note(self, message: str) -> None:
        self._peer_notes += 1
        if self._peer_notes > MAX_PEER_NOTES:
            return
        if self._peer_notes == MAX_PEER_NOTES:
            message += " (further such notes are left out)"
        try:
            self._emit({"kind": protocol.NOTE, "t": time.time(), "level": "warning", "source": "ctmon",
                        "message": protocol.clip(message, 500)})
        except Exception:
            pass

    def _drop_peer(self, peer: _Agent | _Viewer) -> None:
        if isinstance(peer, _Viewer):
            self._drop_viewer(peer)
            return
        if peer in self.agents:
            self.agents.remove(peer)
        try:
            self.sel.unregister(peer.sock)
        except (KeyError, ValueError):
            pass
        peer.sock.close()

    def _read_agent(self, a: _Agent) -> None:
        try:
            data = a.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._agent_gone(a)
            self._drop_peer(a)
            return
        # Device-time windows name step indices: make sure those steps are in
        # the recording first (they travel through the ring, not the socket).
        self._drain_rings()
        oversized = a.splitter.oversized
        for line in a.splitter.feed(data):
            try:
                self._agent_line(line)
            except Exception as e:  # one bad event is skipped; the agent's next ones still count
                self._peer_note(f"skipped an event from the job's agent ({type(e).__name__}: {e})")
        if a.splitter.oversized > oversized:
            self._peer_note(f"skipped {a.splitter.oversized - oversized} line(s) from the job's agent "
                            f"longer than {protocol.MAX_LINE_BYTES} bytes")

    def _agent_line(self, line: bytes) -> None:
        ev = protocol.decode(line)
        if ev is None or ev["kind"] in (protocol.SESSION, protocol.EXIT, protocol.OUTPUT, protocol.SAMPLE,
                                        protocol.STEPS):
            return  # only the supervisor writes these
        if ev["kind"] == protocol.PROCESS:
            ring = ev.get("step_ring")
            if ring is not None and not isinstance(ring, str):
                raise TypeError("step_ring is not a string")
            if ring:
                self._open_ring(ring)
        self._write_line(line + b"\n", ev)

    def _agent_gone(self, a: _Agent) -> None:
        if self._exec_watch is not None:
            self._exec_watch.agent_closed(execwatch.peer_pid(a.sock))

    def _check_exec(self, alive: bool) -> None:
        """A note when the job exec'd into a program that has no agent."""
        if self._exec_watch is None:
            return
        pids = [execwatch.peer_pid(a.sock) for a in self.agents] if self._exec_watch.closed_at is not None else []
        msg = self._exec_watch.check(pids, alive)
        if msg:
            self._emit({"kind": protocol.NOTE, "t": time.time(), "level": "warning", "source": "ctmon", "message": msg})

    def _open_ring(self, path: str) -> None:
        # Only rings inside our own private session directory.
        if "\0" in path or len(path) > 4096:
            raise ValueError("step_ring is not a usable path")
        real = os.path.realpath(path)
        if os.path.dirname(real) != os.path.realpath(self.opts.session_dir) or any(r.path == real for r in self.rings):
            return
        try:
            ring = _Ring(real, StepRing.open(real))
            if self.rings:  # only the job writes steps: a second ring is its exec'd successor
                self._drain_rings()
                ring.follows_src, ring.offset = self.rings[-1].next_index()
            self.rings.append(ring)
        except (OSError, RingError) as e:
            self._emit({"kind": protocol.NOTE, "t": time.time(), "level": "warning", "source": "ctmon",
                        "message": f"cannot read step boundaries: {e}"})

    def _drain_rings(self) -> None:
        for r in list(self.rings):
            try:
                self._drain_ring(r)
            except Exception as e:  # a ring the job scribbled over: stop reading it, keep the rest
                self.rings.remove(r)
                r.reader.ring.close()
                self._peer_note(f"stopped reading step boundaries from {os.path.basename(r.path)} "
                                f"({type(e).__name__}: {e})")

    def _drain_ring(self, r: _Ring) -> None:
        values, lost = r.reader.read()
        if not values and not lost:
            return
        now_wall, now_ns = time.time(), time.perf_counter_ns()
        for ev in r.decoder.decode(values, lost, now_wall, now_ns, r.reader.start, r.reader.source()):
            if r.offset and ev.get("src") == r.follows_src:
                ev["i0"] += r.offset
            self._emit(ev)
        if lost:
            # a lost switch slot is not a lost step
            src = r.reader.source()
            start = r.reader.start
            if src is not None and start - lost <= src[1] < start:
                lost -= 1
            self._steps_lost += lost
            self._emit({"kind": protocol.DROPS, "t": now_wall, "steps": self._steps_lost})

    def _hand_off_streams(self) -> None:
        """Leave the streams a child of the job still holds to a relay process."""
        left = [st for st in self.streams if st.open]
        if not left:
            return
        outlog_fd = None
        if self._outlog is not None:
            try:
                self._outlog.flush()
                outlog_fd = self._outlog.fileno()
            except (OSError, ValueError):
                outlog_fd = None
        pairs = [(st.fd, st.passthrough_fd) for st in left]
        started = relay.start(pairs, outlog_fd)
        names = " and ".join(st.name for st in left)
        where = "ctmon's own output" if self.opts.mode == "record" else "the output log"
        msg = (f"a process the job started still holds its {names}; what it writes after the job's exit goes to "
               f"{where}, not into this recording" if started else
               f"a process the job started still holds its {names}; its later output is lost (no relay)")
        self._emit({"kind": protocol.NOTE, "t": time.time(), "level": "info", "source": "ctmon", "message": msg})
        for st in left:
            st.open = False
            self.sel.unregister(st.fd)
            os.close(st.fd)

    # --------------------------------------------------------------- viewers

    def _accept_viewer(self) -> None:
        try:
            conn, _ = self.viewer_sock.accept()
        except OSError:
            return
        if not _same_user(conn):
            conn.close()
            return
        conn.setblocking(False)
        if len(self.viewers) >= MAX_VIEWERS:
            _refuse(conn, "too many viewers")
            return
        v = _Viewer(conn)
        self.viewers.append(v)
        self.sel.register(conn, selectors.EVENT_READ, ("viewer", v))
        self._want_write(v)

    def _listen_tcp(self, spec: str) -> None:
        """Optional TCP for port forwarding: loopback unless a host is given; token required."""
        host, port = parse_listen(spec)
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(8)
        s.setblocking(False)
        self.tcp_sock = s
        bound = s.getsockname()
        self.tcp_address = f"[{host}]:{bound[1]}" if ":" in host else f"{host}:{bound[1]}"
        self.tcp_all_interfaces = not is_local_only(host)
        self.token = secrets.token_urlsafe(24)
        fd = os.open(os.path.join(self.opts.session_dir, "token"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.token)
        self.sel.register(s, selectors.EVENT_READ, ("tcp_listen", None))
        if self.on_listening is not None:
            self.on_listening(self.tcp_address, self.token)

    def _accept_tcp(self) -> None:
        assert self.tcp_sock is not None
        try:
            conn, _ = self.tcp_sock.accept()
        except OSError:
            return
        waiting = [v for v in self.viewers if not v.authed]
        if len(waiting) >= MAX_HALF_OPEN:
            # Drop the peer that has waited longest rather than refuse the new
            # one: held-open connections then cannot lock a real viewer out,
            # which authenticates in its first line.
            self._drop_viewer(min(waiting, key=lambda w: w.deadline))
        conn.setblocking(False)
        if len(self.viewers) >= MAX_VIEWERS:
            _refuse(conn, "too many viewers")
            return
        v = _Viewer(conn, authed=False)
        self.viewers.append(v)
        self.sel.register(conn, selectors.EVENT_READ, ("viewer", v))

    def _expire_unauthenticated(self) -> None:
        now = time.monotonic()
        for v in [v for v in self.viewers if not v.authed and now > v.deadline]:
            self._drop_viewer(v)

    def _drop_viewer(self, v: _Viewer, error: str | None = None) -> None:
        if v in self.viewers:
            self.viewers.remove(v)
            try:
                self.sel.unregister(v.sock)
            except (KeyError, ValueError):
                pass
            if error is not None:
                _refuse(v.sock, error)
            else:
                v.sock.close()

    def _want_write(self, v: _Viewer) -> None:
        behind = v.authed and v.cursor < self._rec_size
        if behind != v.writing and v in self.viewers:
            v.writing = behind
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if behind else 0)
            self.sel.modify(v.sock, events, ("viewer", v))

    def _write_viewer(self, v: _Viewer) -> None:
        try:
            chunk = os.pread(self._rec_read_fd, 1 << 16, v.cursor)
            if chunk:
                n = v.sock.send(chunk, socket.MSG_NOSIGNAL)
                v.cursor += n
        except BlockingIOError:
            return
        except OSError:
            self._drop_viewer(v)
            return
        self._want_write(v)

    def _serve_viewer(self, v: _Viewer, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            self._read_viewer(v)
        if mask & selectors.EVENT_WRITE and v in self.viewers:
            self._write_viewer(v)

    def _read_viewer(self, v: _Viewer) -> None:
        try:
            data = v.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop_viewer(v)
            return
        for line in v.splitter.feed(data):
            msg = protocol.decode(line)
            if not v.authed:
                if not self._authenticates(msg):
                    self._drop_viewer(v, "authentication failed")
                    return
                v.authed = True
                self._want_write(v)
                continue
            if msg is None or msg.get("kind") != "control":
                continue
            action = msg.get("action")
            if action == "stdin":
                self._job_stdin(msg.get("data"))
                continue
            if action == "stop":
                self._stop_job(msg.get("grace"))
                continue
            sig = CONTROL_SIGNALS.get(action) if isinstance(action, str) else None
            if sig is not None:
                self._signal_job(sig, group=True)

    def _authenticates(self, msg: protocol.Event | None) -> bool:
        """A TCP peer's first line: a hello with the session token (any other
        type, or a string that is not the token, fails; nothing raises)."""
        if msg is None or msg.get("kind") != "hello" or self.token is None:
            return False
        token = msg.get("token")
        if not isinstance(token, str):
            return False
        # compare_digest on str refuses non-ASCII (TypeError): compare bytes.
        given = token.encode("utf-8", "surrogatepass")
        return hmac.compare_digest(given, self.token.encode("utf-8"))

    def _stop_job(self, grace: object) -> None:
        """``stop``: SIGTERM now, SIGKILL after the grace if the job still runs
        (0: never). Here rather than in the viewer, so the escalation happens
        even when the viewer quits or its connection drops meanwhile."""
        g = protocol.DEFAULT_STOP_GRACE_S
        if isinstance(grace, (int, float)) and not isinstance(grace, bool) and grace == grace and grace >= 0:
            g = MAX_STOP_GRACE_S if grace > MAX_STOP_GRACE_S else float(grace)  # 10**400 is an int: no float()
        p = self.proc
        if p is None or p.returncode is not None:
            return
        self._signal_job(signal.SIGTERM, group=True)
        self._kill_at = time.monotonic() + g if g > 0 else None
        when = f"SIGKILL in {g:g} s if it still runs" if g > 0 else "no SIGKILL will follow"
        self._emit({"kind": protocol.NOTE, "t": time.time(), "level": "info", "source": "ctmon",
                    "message": f"stop asked by a viewer: {when}"})

    def _escalate_stop(self) -> None:
        if self._kill_at is not None and time.monotonic() >= self._kill_at:
            self._kill_at = None
            self._signal_job(signal.SIGKILL, group=True)

    # --------------------------------------------------------------- signals

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if self.opts.mode == "record":
            # Ctrl-C reaches the job directly (same process group); the job
            # decides whether to stop, as it would without ctmon.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGQUIT, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGINT, self._on_signal)  # detached: pass it on
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self._on_signal)
        if self.opts.mode == "record":
            signal.signal(signal.SIGWINCH, self._on_signal)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._pending_signals.append(signum)

    def _handle_signals(self) -> None:
        while self._pending_signals:
            sig = self._pending_signals.pop(0)
            if sig == signal.SIGWINCH:
                for st in self.streams:
                    if st.open and st.passthrough_fd is not None and _isatty(st.passthrough_fd):
                        rows, cols = _term_size(st.passthrough_fd, self.opts.pty_size)
                        _set_winsize(st.fd, rows, cols)
            else:
                self._signal_job(sig, group=False)

    def _signal_job(self, sig: int, group: bool) -> None:
        p = self.proc
        if p is None or p.returncode is not None:
            return
        try:
            if group and self.opts.mode == "attach":
                os.killpg(p.pid, sig)  # like Ctrl-C in a terminal: the whole job
            else:
                os.kill(p.pid, sig)
        except OSError:
            pass
        self._emit({"kind": protocol.NOTE, "t": time.time(), "level": "info", "source": "ctmon",
                    "message": f"sent {signal.Signals(sig).name} to the job"})

    # --------------------------------------------------------------- sampler

    def _sample_loop(self) -> None:
        assert self.proc is not None
        try:
            from ctmon.samplers.gpu import GpuSampler
            from ctmon.samplers.process import ProcessSampler

            procs = ProcessSampler(self.proc.pid)
            gpus = GpuSampler()
        except Exception as e:  # psutil missing or broken: no samples, job unaffected
            self.inbox.append({"kind": protocol.NOTE, "t": time.time(), "level": "warning", "source": "sampler",
                               "message": f"system sampling disabled: {type(e).__name__}: {e}"})
            _poke(self._wake_w)
            return
        first = True
        try:
            while not self._stop_sampler.wait(0.0 if first else self.opts.sample_interval):
                ev: protocol.Event = {"kind": protocol.SAMPLE, "t": time.time()}
                try:
                    ev.update(procs.sample())
                except Exception:
                    pass
                if gpus.available:
                    ev["gpus"] = gpus.sample(procs.tree_pids())
                elif first:
                    ev["gpu_error"] = gpus.error or "no GPU"
                first = False
                self.inbox.append(ev)
                _poke(self._wake_w)
        finally:
            gpus.close()

    # ---------------------------------------------------------------- finish

    def _finish(self) -> None:
        self._drain_rings()  # every boundary the job wrote, even if it was killed
        self._check_exec(alive=False)
        p = self.proc
        if p is not None:
            rc = p.wait()
            code, sig = (rc, None) if rc >= 0 else (None, signal.Signals(-rc).name)
            self._emit({"kind": protocol.EXIT, "t": time.time(), "code": code, "signal": sig})
        while self.inbox:
            ev = self.inbox.popleft()
            if ev.get("kind") != protocol.SAMPLE:
                self._emit(ev)
        self._flush()
        if self._pending:  # a last try (e.g. space was freed meanwhile)
            self._flush()
        if self._rec_fd >= 0:
            try:
                os.fsync(self._rec_fd)
            except OSError:
                pass
        self.exit = self.session.exit
        self._write_session_file("exited")
        self._serve_remaining_viewers()
        self._close()

    def _serve_remaining_viewers(self) -> None:
        deadline = time.monotonic() + VIEWER_GRACE_S
        for a in list(self.agents):
            self.sel.unregister(a.sock)
            a.sock.close()
        self.agents.clear()
        while self.viewers and time.monotonic() < deadline:
            if all(v.cursor >= self._rec_size for v in self.viewers):
                break
            for key, mask in self.sel.select(0.1):
                kind, obj = key.data
                if kind == "viewer":
                    self._guarded(self._serve_viewer, obj, mask)

    def _close(self) -> None:
        for v in list(self.viewers):
            self._drop_viewer(v)
        for path in (self.agent_path, self.viewer_path):
            try:
                os.unlink(path)
            except OSError:
                pass
        for s in (getattr(self, "agent_sock", None), getattr(self, "viewer_sock", None), self.tcp_sock):
            if s is not None:
                s.close()
        if self._rec_fd >= 0:
            os.close(self._rec_fd)
            self._rec_fd = -1
        if self._rec_read_fd >= 0:
            os.close(self._rec_read_fd)
        for r in self.rings:
            r.reader.ring.close()
            try:
                os.unlink(r.path)
            except OSError:
                pass
        if self._outlog is not None:
            try:
                self._outlog.close()
            except OSError:
                pass
        if threading.current_thread() is threading.main_thread():
            signal.set_wakeup_fd(-1)

    def _write_session_file(self, state: str) -> None:
        """What `ctmon watch` lists: written atomically, refreshed every few seconds."""
        sess = self.session
        info = {
            "id": self.opts.session_id,
            "state": sess.state if state == "running" else state,
            "supervisor_pid": os.getpid(),
            "job_pid": self.proc.pid if self.proc else None,
            "command": self.spec.display(),
            "cwd": self.spec.cwd,
            "start": sess.meta.start_t,
            "updated": time.time(),
            "recording": os.path.abspath(self.opts.recording),
            "mode": self.opts.mode,
            "steps": sess.steps.count,
            "compiles": sess.compile.compile_count,
            "recompiles": sess.compile.recompile_count,
            "graph_breaks": sess.compile.graph_break_count,
            "tcp": self.tcp_address,
        }
        if sess.exit is not None:
            info["exit_status"] = sess.exit.status
        path = os.path.join(self.opts.session_dir, "session.json")
        try:
            tmp = path + ".tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(info, f)
            os.replace(tmp, path)
        except OSError:
            pass


# ---------------------------------------------------------------- helpers


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _term_size(fd: int, default: tuple[int, int]) -> tuple[int, int]:
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
        if rows and cols:
            return rows, cols
    except OSError:
        pass
    return default


def _set_winsize(fd: int, rows: int, cols: int) -> None:
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    except OSError:
        pass


def _raw_output(fd: int) -> None:
    """No output post-processing on the pty: bytes pass through unchanged."""
    try:
        attrs = termios.tcgetattr(fd)
        attrs[1] &= ~termios.OPOST
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
    except termios.error:
        pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            time.sleep(0.001)
            continue
        view = view[n:]


def _drain_fd(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass


def _say(line: str) -> None:
    """A message for whoever watches the supervisor's stderr (terminal or log)."""
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass


def _poke(fd: int) -> None:
    try:
        os.write(fd, b"\0")
    except OSError:
        pass


def _same_user(conn: socket.socket) -> bool:
    """Peer credentials: only this user's processes may connect.

    Where the platform has no SO_PEERCRED the socket's 0600 mode inside a
    0700 directory is the guard; where it has one but the query fails, the
    peer is refused (fail closed)."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return True
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
    except OSError:
        return False
    _, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid()


def _refuse(sock: socket.socket, message: str) -> None:
    """Tell a viewer why it is being closed (one ``error`` line), then close.

    Best effort and never blocking: the line is tiny and goes out at once on
    a fresh connection. What the peer sent is read first, so closing does not
    reset the connection and discard the line before the peer reads it."""
    try:
        sock.setblocking(False)
        sock.send(protocol.encode({"kind": "error", "t": time.time(), "message": message}), socket.MSG_NOSIGNAL)
        sock.shutdown(socket.SHUT_WR)
        for _ in range(16):
            if not sock.recv(65536):
                break
    except OSError:
        pass
    sock.close()


def parse_listen(spec: str) -> tuple[str, int]:
    """"7777" -> ("127.0.0.1", 7777); "0.0.0.0:7777"; "[::1]:7777".

    "0:7777" means every IPv4 interface, as 0.0.0.0 (it is what the C
    library makes of "0"), and is spelt out so no one is surprised."""
    host, sep, port = spec.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", spec
    host = host.strip("[]") or "127.0.0.1"
    if host == "0":
        host = "0.0.0.0"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad --listen '{spec}': expected [HOST:]PORT")
    return host, int(port)


def is_local_only(host: str) -> bool:
    """True when a listening address is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may well be a network interface


def exit_like(info: ExitInfo) -> int:
    """Leave ctmon the way the job left: same exit code, or same signal."""
    if info.code is not None:
        return info.code
    if info.signal:
        sig = getattr(signal, info.signal, None)
        if sig is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
            os.kill(os.getpid(), sig)
            time.sleep(0.5)
    return info.status
