"""The supervisor: the process that owns the job and writes the recording.

It lives exactly as long as the job, so the recording is complete whatever
happens to whoever is looking at it. One selector loop, no threads besides
the sampler, wiring one object per role:

* ``Job`` (ctmon/launch/job.py): the job's process, its output streams,
  signals, stdin, stop, the relay hand-off and the exec watch;
* ``Intake`` (ctmon/launch/intake.py): the agents that connect to
  ``agent.sock`` (one per process of the job, each with its pid) and the
  step rings they name; each line is validated and recorded as is;
* ``Recorder`` (ctmon/launch/recorder.py): the recording file, held in
  memory while the disk is full, and the output log;
* ``Viewers`` (ctmon/launch/viewers.py): ``viewer.sock`` and ``--listen``
  TCP; each viewer streams the recording file from byte 0 and follows it;
* ``Registry`` (ctmon/launch/registry.py): ``session.json``.

The sampler thread adds ``sample`` events about once a second. When the job
exits, its last output and events are drained, an ``exit`` event is
written, and the file is fsync'ed.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

import ctmon
from ctmon.launch.adopted_job import AdoptedJob
from ctmon.launch.intake import AgentConnection, Intake
from ctmon.launch.job import Job
from ctmon.launch.join import JoinedJob
from ctmon.launch.join_target import JoinRefused
from ctmon.launch.metrics import MetricsError, MetricsServer
from ctmon.launch.recorder import Recorder, RecorderError
from ctmon.launch.registry import Registry
from ctmon.launch.sampling import run_samplers
from ctmon.launch.sockets import listen_unix
from ctmon.launch.spec import JobSpec
from ctmon.launch.viewers import Controls, Viewer, Viewers
from ctmon.store import ExitInfo
from ctmon.wire import events as E
from ctmon.wire import protocol
from ctmon.wire.event_base import Event, Unknown

DRAIN_TIMEOUT_S = 2.0
HANDOFF_IDLE_S = 0.3  # after the job exited: this long without output from its children
VIEWER_GRACE_S = 5.0
MAX_PEER_NOTES = 20  # notes about misbehaving peers in one recording; later ones are only counted
# The source of the note that ends a recording the disk kept events from
# (ctmon.report.gate.RECORDING_SOURCE: the launch layer does not import reports).
RECORDING_SOURCE = "recording"


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
    adopt_pid: int | None = None  # a running process that called ctmon.install(): not started here
    metrics: str | None = None  # "[HOST:]PORT": serve Prometheus metrics there (ctmon/launch/metrics.py)
    join_pid: int | list[int] | None = None  # running processes to join (--pid): not started here (launch/join.py)
    join_ranks: list[int] | None = None  # the ranks ctmon gives them; None: each says its own (join_target.py)


class SupervisorError(Exception):
    """The supervisor could not start (one line for the user); the job was not started."""


class Supervisor:
    def __init__(self, spec: JobSpec, opts: SupervisorOptions) -> None:
        self.spec = spec
        self.opts = opts
        self.sel = selectors.DefaultSelector()
        self.exit: ExitInfo | None = None
        self.inbox: deque[Event] = deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stop_sampler = threading.Event()
        self._peer_notes = 0
        self.agent_path = os.path.join(opts.session_dir, "agent.sock")
        self.viewer_path = os.path.join(opts.session_dir, "viewer.sock")
        self.agent_sock: socket.socket | None = None
        self.viewer_sock: socket.socket | None = None
        self.recorder = Recorder(opts.recording, opts.output_log, opts.new_files)
        self.job: Job | AdoptedJob
        if opts.join_pid is not None:
            self.job = JoinedJob(opts.join_pid, self.sel, self._emit, opts.join_ranks)
        elif opts.adopt_pid is not None:
            self.job = AdoptedJob(opts.adopt_pid, self.sel, self._emit)
        else:
            self.job = Job(spec, opts.mode, opts.pty_size, self.sel, self.recorder, self._emit)
        self.intake = Intake(opts.session_dir, self._emit, self._write_line, self._peer_note)
        if isinstance(self.job, JoinedJob):
            self.job.agents = self.intake  # leaving shuts the agents' connections
        self.viewers = Viewers(
            self.sel, self.recorder, Controls(signal=self.job.control_signal, stop=self.job.stop, stdin=self.job.stdin)
        )
        self.registry = Registry(opts.session_dir, opts.session_id, opts.mode, spec.display(), spec.cwd, opts.recording)
        self.on_event: Callable[[Event | Unknown], None] | None = None
        encoder = msgspec.json.Encoder()
        self._encode, self._encode_into = encoder.encode, encoder.encode_into
        self._line = bytearray()
        self.on_listening: Callable[[str, str], None] | None = None
        self.metrics: MetricsServer | None = None
        self.on_metrics: Callable[[], None] | None = None  # the endpoint is up (record says where)

    @property
    def tcp_all_interfaces(self) -> bool:
        return self.viewers.tcp_all_interfaces

    # ------------------------------------------------------------------- run

    def run(self) -> ExitInfo:
        opts = self.opts
        if opts.listen:
            # before anything else: a busy port must not cost the user an
            # existing recording, nor start the job
            try:
                self.viewers.listen_tcp(opts.listen, opts.session_dir)
            except (OSError, ValueError) as e:
                raise SupervisorError(f"cannot listen on {opts.listen}: {getattr(e, 'strerror', None) or e}") from None
            self.registry.tcp = self.viewers.tcp_address
            if self.on_listening is not None:
                assert self.viewers.tcp_address is not None and self.viewers.token is not None
                self.on_listening(self.viewers.tcp_address, self.viewers.token)
        if opts.metrics:
            try:  # bound before the job starts, and before an earlier recording is emptied
                self.metrics = MetricsServer(opts.metrics, opts.recording)
            except MetricsError as e:
                raise SupervisorError(str(e)) from None
            if self.on_metrics is not None:
                self.on_metrics()
        try:
            self.recorder.open()  # locked, not yet emptied: before the viewer socket says "ready"
        except RecorderError as e:
            if self.metrics is not None:
                self.metrics.close()
            raise SupervisorError(str(e)) from None
        self.agent_sock = listen_unix(self.agent_path)
        self.viewer_sock = listen_unix(self.viewer_path)
        self.recorder.empty()  # setup went through: an earlier recording may go now
        if self.metrics is not None:
            self.metrics.serve()  # scrapes read the recording from now on
        self.sel.register(self.agent_sock, selectors.EVENT_READ, ("agent_listen", None))
        self.sel.register(self.viewer_sock, selectors.EVENT_READ, ("viewer_listen", None))
        self.sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        start = time.time()
        env = dict(opts.extra_env)
        env.update(
            CTMON_AGENT_SOCKET=self.agent_path, CTMON_SESSION=opts.session_id, CTMON_SESSION_DIR=opts.session_dir
        )
        try:
            self.job.spawn(env)  # before our signal handlers: the job inherits the defaults
        except JoinRefused as e:  # the joined process was left as it was
            if self.metrics is not None:
                self.metrics.close()
            self._close()
            raise SupervisorError(str(e)) from None
        except OSError as e:
            self._emit(self._session_event(start, None))
            self._emit(_note(f"could not start {self.spec.python}: {e.strerror or e}", "error"))
            self._emit(E.Exit(t=time.time(), code=127))
            self._finish()
            return self.exit or ExitInfo(127, None, time.time())
        assert self.job.proc is not None
        self.job.install_signals(self._wake_w)
        self.registry.job_pid = self.job.proc.pid
        self._emit(self._session_event(start, self.job.proc.pid))
        self.registry.write("running")
        sampler = threading.Thread(target=self._sample_loop, name="ctmon-sampler", daemon=True)
        sampler.start()
        try:
            self._loop()
        finally:
            self._stop_sampler.set()
        self._finish()
        assert self.exit is not None
        return self.exit

    def _session_event(self, start: float, job_pid: int | None) -> E.SessionStart:
        return E.SessionStart(
            t=start,
            v=protocol.PROTOCOL_VERSION,
            ctmon=ctmon.__version__,
            id=self.opts.session_id,
            mode=self.opts.mode,
            command=self.spec.display(),
            cwd=self.spec.cwd,
            host=socket.gethostname(),
            pid=os.getpid(),
            job_pid=job_pid,
            recording=os.path.abspath(self.opts.recording),
        )

    def _loop(self) -> None:
        job, intake = self.job, self.intake
        exited_at: float | None = None
        while True:
            # Wake at least every 50 ms: the step ring is drained on a clock,
            # not on an fd, and viewers should see steps with little delay.
            for key, mask in self.sel.select(0.05):
                kind, obj = key.data
                if kind == "stream":
                    job.read_stream(obj)
                elif kind == "agent":
                    self._guarded(self._read_agent, obj)
                elif kind == "agent_listen":
                    self._accept_agent()
                elif kind == "viewer_listen":
                    assert self.viewer_sock is not None
                    self.viewers.accept_unix(self.viewer_sock)
                elif kind == "tcp_listen":
                    self.viewers.accept_tcp()
                elif kind == "viewer":
                    self._guarded(self.viewers.serve, obj, mask)
                elif kind == "wake":
                    _drain_fd(self._wake_r)
            job.handle_signals()
            job.escalate_stop()
            self.viewers.expire_unauthenticated()
            while self.inbox:
                self._emit(self.inbox.popleft())
            intake.drain_rings()
            self._flush()
            if self.registry.due():
                self.registry.write("running")
            job.check_exec(intake.pids(), alive=exited_at is None)
            if exited_at is None and job.exited():
                exited_at = time.monotonic()
            if exited_at is not None:
                if not job.streams_open() and not intake.agents:
                    return
                waited = time.monotonic() - exited_at
                # Streams still open once the job and its agent are gone: a
                # child of the job holds them. It keeps printing where python
                # would have let it (see Job.hand_off_streams); we are done.
                idle = not intake.agents and time.monotonic() - job.last_output > HANDOFF_IDLE_S
                if waited > DRAIN_TIMEOUT_S or (idle and waited > HANDOFF_IDLE_S):
                    job.hand_off_streams()
                    return

    # ------------------------------------------------------------- recording

    def _emit(self, ev: Event) -> None:
        """An event the supervisor makes (its own, the job's output, the step rings)."""
        line = self._line  # reused: the recorder copies what it keeps (no allocation per output chunk)
        self._encode_into(ev, line)
        line.append(10)
        self._write_line(line, ev)

    def _write_line(self, line: bytes | bytearray, ev: Event | Unknown) -> None:
        if not isinstance(ev, Unknown):
            self.registry.count(ev)
        if self.on_event is not None:
            self.on_event(ev)
        self.recorder.append(line)

    def _flush(self) -> None:
        said, lost = self.recorder.flush()
        if said == "stuck":
            _say(f"ctmon: cannot write the recording ({self.recorder.error}); holding events in memory and retrying")
        elif said == "resumed":
            _say("ctmon: recording resumed")
        if lost:
            self._emit(_note(f"{lost} events were lost while the recording could not be written", "error"))
        self.viewers.wake_all()

    # ----------------------------------------------------------------- peers

    def _accept_agent(self) -> None:
        assert self.agent_sock is not None
        a = self.intake.accept(self.agent_sock)
        if a is not None:
            self.sel.register(a.sock, selectors.EVENT_READ, ("agent", a))

    def _read_agent(self, a: AgentConnection) -> None:
        if not self.intake.read(a):
            self.job.agent_closed(a.pid)
            self._drop_peer(a)
        elif a.rank is not None:
            self.job.watch_rank(a.pid, a.rank)

    def _guarded(self, handler: Callable[..., None], peer: AgentConnection | Viewer, *args: object) -> None:
        """One peer's bytes must never take the supervisor (and so the job) down:
        whatever a handler raises drops that peer, with a note, and nothing else."""
        try:
            handler(peer, *args)
        except Exception as e:
            what = "an agent connection" if isinstance(peer, AgentConnection) else "a viewer"
            self._drop_peer(peer)
            self._peer_note(f"dropped {what}: it sent what ctmon could not handle ({type(e).__name__}: {e})")

    def _peer_note(self, message: str) -> None:
        self._peer_notes += 1
        if self._peer_notes > MAX_PEER_NOTES:
            return
        if self._peer_notes == MAX_PEER_NOTES:
            message += " (further such notes are left out)"
        try:
            self._emit(_note(protocol.clip(message, 500) or "", "warning"))
        except Exception:
            pass

    def _drop_peer(self, peer: AgentConnection | Viewer) -> None:
        if isinstance(peer, Viewer):
            self.viewers.drop(peer)
            return
        self.intake.forget(peer)
        try:
            self.sel.unregister(peer.sock)
        except (KeyError, ValueError):
            pass
        peer.sock.close()

    # --------------------------------------------------------------- sampler
    def _sample_loop(self) -> None:
        assert self.job.proc is not None
        # a job joined by several pids: every one's tree (its first is job.proc)
        also = [m.pid for m in self.job.members[1:]] if isinstance(self.job, JoinedJob) else []
        run_samplers(self.job.proc.pid, self.opts.sample_interval, self._stop_sampler, self._take_sample, also)

    def _take_sample(self, ev: Event) -> None:
        """On the sampler thread: the event into the inbox, the loop woken."""
        self.inbox.append(ev)
        _poke(self._wake_w)

    # ---------------------------------------------------------------- finish

    def _finish(self) -> None:
        self.intake.drain_rings()  # every boundary the job wrote, even if it was killed
        self.job.check_exec(self.intake.pids(), alive=False)
        exit_ev = self.job.exit_event()
        exit_line = None
        if exit_ev is not None:
            exit_line = self._encode(exit_ev) + b"\n"
            self._write_line(exit_line, exit_ev)
        while self.inbox:
            ev = self.inbox.popleft()
            if not isinstance(ev, E.Sample):
                self._emit(ev)
        self._flush()
        if self.recorder.incomplete:  # a last try (e.g. space was freed meanwhile)
            self._flush()
        if self.recorder.incomplete:
            self._seal(exit_line)
        self.recorder.fsync()
        self.exit = self.registry.exit
        self.registry.write("exited")
        self._serve_remaining_viewers()
        if self.metrics is not None:
            self.metrics.close()
        self._close()

    def _seal(self, exit_line: bytes | None) -> None:
        """The disk kept events out of the recording to the end: the file ends
        with a note saying so (and the job's exit), so that whoever reads it
        later, without this process's memory, knows it is incomplete."""
        reason = self.recorder.last_error or "the recording could not be written"

        def note(missing: int) -> bytes:
            message = f"this recording is INCOMPLETE: {missing} events of the run could not be written ({reason})"
            ev = E.Note(t=time.time(), level="error", source=RECORDING_SOURCE, message=message)
            return self._encode(ev) + b"\n"

        self.recorder.seal(exit_line, note)
        sealed_at = self.recorder.sealed_at
        if sealed_at is not None:
            for v in self.viewers.viewers:  # lines trimmed to make room: viewers go on where the note starts
                v.cursor = min(v.cursor, sealed_at)
            self.viewers.wake_all()

    def _serve_remaining_viewers(self) -> None:
        deadline = time.monotonic() + VIEWER_GRACE_S
        for a in list(self.intake.agents):
            self.sel.unregister(a.sock)
            a.sock.close()
        self.intake.agents.clear()
        while self.viewers.viewers and time.monotonic() < deadline:
            if self.viewers.caught_up():
                break
            for key, mask in self.sel.select(0.1):
                kind, obj = key.data
                if kind == "viewer":
                    self._guarded(self.viewers.serve, obj, mask)

    def _close(self) -> None:
        self.viewers.close()
        for path in (self.agent_path, self.viewer_path):
            try:
                os.unlink(path)
            except OSError:
                pass
        for s in (self.agent_sock, self.viewer_sock):
            if s is not None:
                s.close()
        self.recorder.close()
        self.intake.close()
        if threading.current_thread() is threading.main_thread():
            signal.set_wakeup_fd(-1)


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


def _note(message: str, level: str = "info") -> E.Note:
    return E.Note(t=time.time(), level=level, source="ctmon", message=message)
