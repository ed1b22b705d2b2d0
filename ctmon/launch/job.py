"""The supervisor's job: the process it runs, and everything between them.

* the job's stdout/stderr come through ptys (when a terminal is expected) or
  pipes; chunks become ``output`` events, are copied raw to the output log,
  and in ``record`` mode are passed through to ctmon's own stdout/stderr;
* signals ctmon receives are passed on; a viewer's controls become signals,
  a ``stop`` with its SIGKILL after a grace, or a line on the job's stdin;
* after the job's exit, streams a child of the job still holds are handed
  to a relay process (ctmon/launch/relay.py);
* a job that exec'd into a program without an agent gets a note
  (ctmon/launch/execwatch.py).
"""

from __future__ import annotations

import codecs
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from ctmon.launch import execwatch, relay, signal_policy, stdfds
from ctmon.launch.output_tail import tail_text
from ctmon.launch.pipes import widen_pipe, write_all
from ctmon.launch.recorder import Recorder
from ctmon.launch.spec import JobSpec, job_python_path
from ctmon.launch.tty import isatty, raw_output, set_winsize, term_size
from ctmon.wire import events as E
from ctmon.wire import protocol
from ctmon.wire.event_base import Event
from ctmon.words.signal_notes import PASSED_ON, sent_signal_message

# A job that writes as fast as it can fills its pipe (PIPE_SIZE) while the
# supervisor records the last read; one read takes all of it, so the two
# wait for each other once a MiB, not once each 64 KiB of a default pipe.
READ_SIZE = 1 << 20
# One output event's bytes at most: in JSON a byte takes six at worst
# (``\u0001``), which keeps the line under the 1 MiB a reader accepts
# (protocol.MAX_LINE_BYTES).
EVENT_BYTES = 128 * 1024
# A read this large is a job writing as fast as it can: its bytes go to the
# output log and the recording points at them (a copy, where a JSON line
# would cost an encode of every byte while the job waits on its full pipe).
# Smaller reads, a logging loop's lines, stay in the recording itself.
BY_REFERENCE_BYTES = 256 * 1024
# Of a chunk kept in the output log, the last this many bytes (from a line's
# start) travel in the event, for the screen's Output pane.
TAIL_BYTES = 32 * 1024
MAX_STDIN_BYTES = 4000  # a pty's line buffer holds 4095 bytes
MAX_STOP_GRACE_S = 7 * 24 * 3600.0
MAX_RANK_WATCHES = 4096  # ranks' processes watched for an exec (one node's)
CONTROL_SIGNALS = {"interrupt": signal.SIGINT, "terminate": signal.SIGTERM, "kill": signal.SIGKILL}
# why ctmon sent a viewer's signal, as the recording's note (and the findings) say it
CONTROL_REASONS = {"interrupt": "Ctrl-C", "terminate": "a viewer's terminate", "kill": "a viewer's kill"}

Emit = Callable[[Event], None]


class Stream:
    def __init__(self, name: str, fd: int, passthrough_fd: int | None) -> None:
        self.name = name
        self.fd = fd
        self.passthrough_fd = passthrough_fd
        self.held = b""  # the first bytes of a UTF-8 character the next read completes
        self.open = True
        self.buf = bytearray(READ_SIZE)  # each read lands here: no allocation (and no page faults) per read


def _note(message: str, level: str = "info") -> E.Note:
    return E.Note(t=time.time(), level=level, source="ctmon", message=message)


class Job:
    def __init__(
        self,
        spec: JobSpec,
        mode: str,
        pty_size: tuple[int, int],
        sel: selectors.BaseSelector,
        recorder: Recorder,
        emit: Emit,
    ) -> None:
        self.spec = spec
        self.mode = mode  # "record": output passes through; "attach": detached, output to viewers
        self.pty_size = pty_size
        self.sel = sel
        self.recorder = recorder
        self.emit = emit
        self.proc: subprocess.Popen[bytes] | None = None
        self.streams: list[Stream] = []
        self.pidfd = -1
        self.last_output = 0.0
        self.exec_watch: execwatch.ExecWatch | None = None
        self.rank_watches: dict[int, execwatch.ExecWatch] = {}  # a rank's pid -> its watch
        self._kill_at: float | None = None  # a `stop` control's SIGKILL, if the job outlives its grace
        self._pending_signals: list[int] = []
        self._ignored_noted: set[int] = set()  # signals about ctmon's own process, noted once each
        self._viewer_interrupted = False  # a viewer's Ctrl-C came: its kill is the second Ctrl-C
        self._kill_reason = ""  # why the `stop` control's SIGKILL comes

    # ----------------------------------------------------------------- spawn

    def _make_stream(self, name: str, our_fd: int) -> tuple[int, Stream] | None:
        """A pty when the job should see a terminal, else a pipe; None when
        ctmon itself was started with that fd closed (the job gets it closed)."""
        attach = self.mode == "attach"
        if not attach and our_fd in stdfds.closed():
            return None
        passthrough = None if attach else our_fd
        use_pty = attach or isatty(our_fd)
        if use_pty:
            master, slave = os.openpty()
            raw_output(slave)
            rows, cols = self.pty_size if attach else term_size(our_fd, self.pty_size)
            set_winsize(master, rows, cols)
            child_end, ours = slave, master
        else:
            ours, child_end = os.pipe()
            widen_pipe(ours)
        os.set_blocking(ours, False)
        return child_end, Stream(name, ours, passthrough)

    def spawn(self, env_extra: dict[str, str]) -> None:
        made = [self._make_stream("stdout", 1), self._make_stream("stderr", 2)]
        self.streams = [m[1] for m in made if m is not None]
        child_ends = [m[0] if m is not None else None for m in made]
        env = dict(os.environ)
        env.update(env_extra)
        env.pop("CTMON_AGENT_PID", None)  # the job claims it (see ctmon/agent/site)
        env.pop("CTMON_AGENT_RANK", None)  # and its ranks theirs
        env["PYTHONPATH"] = job_python_path(env.get("PYTHONPATH"))
        attach = self.mode == "attach"
        # attach: the job's stdin is its terminal (the pty its output goes
        # to), as in a terminal; the viewer types into it (stdin()).
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
        self.exec_watch = execwatch.ExecWatch(self.proc.pid)
        try:
            self.pidfd = os.pidfd_open(self.proc.pid)
            self.sel.register(self.pidfd, selectors.EVENT_READ, ("pidfd", None))
        except (AttributeError, OSError):
            self.pidfd = -1

    def exited(self) -> bool:
        """True once the job has exited (its pidfd is closed then)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            return False
        if self.pidfd >= 0:
            self.sel.unregister(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = -1
        return True

    def streams_open(self) -> bool:
        return any(s.open for s in self.streams)

    def exit_event(self) -> E.Exit | None:
        p = self.proc
        if p is None:
            return None
        rc = p.wait()
        code, sig = (rc, None) if rc >= 0 else (None, signal_policy.signal_name(-rc))  # SIGRTMIN+3 too
        return E.Exit(t=time.time(), code=code, signal=sig)

    # --------------------------------------------------------------- streams

    def _close_stream(self, st: Stream) -> None:
        st.open = False
        self.sel.unregister(st.fd)
        os.close(st.fd)

    def read_stream(self, st: Stream) -> None:
        try:
            n = os.readv(st.fd, [st.buf])
        except BlockingIOError:
            return
        except OSError:
            n = 0  # EIO: the pty closed with the child; any other error ends the stream the same way
        if not n:
            self._output(st, b"", final=True)
            self._close_stream(st)
            return
        view = memoryview(st.buf)[:n]
        if st.passthrough_fd is not None:
            try:
                write_all(st.passthrough_fd, view)
            except BrokenPipeError:
                self._reader_gone(st, bytes(view))
                return
            except OSError:
                st.passthrough_fd = None  # our terminal went away; keep recording
        self.last_output = time.monotonic()
        if n >= BY_REFERENCE_BYTES and self._keep_by_reference(st, view):
            return
        data = bytes(view)
        self.recorder.log_output(data)
        self._record(st, data, final=False)

    def _keep_by_reference(self, st: Stream, view: memoryview) -> bool:
        """A large read as one event pointing into the output log, with its
        last lines for the screen; False when the log cannot take it."""
        if st.held:
            self._output(st, b"", final=True)  # a character cut before this read: its bytes, in order
        kept = self.recorder.keep_chunk(view)
        if kept is None:
            if self.recorder.chunk_log_refused:
                self.emit(_note(f"the job's fast output is recorded inline ({self.recorder.chunk_log_refused})"))
                self.recorder.chunk_log_refused = None
            return False
        log, at = kept
        tail = bytes(view[-TAIL_BYTES:])
        line_start = tail.find(b"\n")
        if len(view) > TAIL_BYTES and 0 <= line_start < len(tail) - 1:
            tail = tail[line_start + 1 :]  # from a line's start: the screen shows whole lines
        text = tail_text(tail)
        self.emit(E.Output(t=time.time(), stream=st.name, data=text, enc=E.OUTPUT_LOG, log=log, at=at, size=len(view)))
        return True

    def _record(self, st: Stream, data: bytes, final: bool) -> None:
        """A read's bytes as ``output`` events of at most EVENT_BYTES each."""
        if len(data) <= EVENT_BYTES:
            self._output(st, data, final)
            return
        view = memoryview(data)
        for at in range(0, len(data), EVENT_BYTES):
            self._output(st, view[at : at + EVENT_BYTES], final and at + EVENT_BYTES >= len(data))

    def _output(self, st: Stream, data: bytes | memoryview, final: bool) -> None:
        """A chunk as an ``output`` event, byte-exact: its text when it is
        UTF-8 (a character the read cut in two waits for the next read),
        else its bytes in base64."""
        if st.held:
            data, st.held = st.held + data, b""
        if not data:
            return
        try:
            text, used = codecs.utf_8_decode(data, "strict", final)
        except UnicodeDecodeError:
            self.emit(E.OutputBytes(t=time.time(), stream=st.name, data=data))
            return
        if used < len(data):
            st.held = bytes(data[used:])  # at most 3 bytes: the start of a character
        if text:
            self.emit(E.Output(t=time.time(), stream=st.name, data=text))

    def _reader_gone(self, st: Stream, data: bytes) -> None:
        """Whoever read our output is gone (``ctmon record job.py | head -1``).

        Without ctmon the job's own next write would fail (SIGPIPE, or
        BrokenPipeError under python): closing our end of its pipe makes
        that write fail the same way. What it had written still counts."""
        self.recorder.log_output(data)
        self._record(st, data, final=True)
        self.emit(
            _note(
                f"the reader of ctmon's {st.name} went away (broken pipe); "
                f"the job's {st.name} was closed, as it would have been without ctmon"
            )
        )
        self._close_stream(st)

    def stdin(self, data: object) -> None:
        """A line a viewer typed for the job (attach: its stdin is the pty)."""
        st = self.streams[0] if self.streams and self.mode == "attach" else None
        if not isinstance(data, str) or not data or st is None or not st.open:
            return
        raw = data.encode("utf-8", "replace")[:MAX_STDIN_BYTES]
        try:
            os.write(st.fd, raw)  # the pty echoes it into the output, as a terminal would
        except OSError as e:
            msg = f"could not pass input to the job: {e.strerror or e}"
        else:
            msg = f"passed {len(raw)} bytes of input to the job's stdin"
        self.emit(_note(msg))

    def hand_off_streams(self) -> None:
        """Leave the streams a child of the job still holds to a relay process."""
        left = [st for st in self.streams if st.open]
        if not left:
            return
        outlog_fd = self.recorder.outlog_fd()
        pairs = [(st.fd, st.passthrough_fd) for st in left]
        started = relay.start(pairs, outlog_fd)
        names = " and ".join(st.name for st in left)
        where = "ctmon's own output" if self.mode == "record" else "the output log"
        msg = (
            f"a process the job started still holds its {names}; what it writes after the job's exit goes to "
            f"{where}, not into this recording"
            if started
            else f"a process the job started still holds its {names}; its later output is lost (no relay)"
        )
        self.emit(_note(msg))
        for st in left:
            self._output(st, b"", final=True)  # the start of a character its last read cut off
            self._close_stream(st)

    # ------------------------------------------------------------- exec watch

    def watch_rank(self, pid: int | None, rank: int) -> None:
        """A rank's process said hello: watch it for an exec, as the job's own."""
        if pid is not None and pid not in self.rank_watches and len(self.rank_watches) < MAX_RANK_WATCHES:
            w = execwatch.ExecWatch(pid, f"rank {rank}")
            w.confirmed = True  # its agent runs now: the command line read is python's
            self.rank_watches[pid] = w

    def agent_closed(self, pid: int | None) -> None:
        if self.exec_watch is not None:
            self.exec_watch.agent_closed(pid)
        w = self.rank_watches.get(pid) if pid is not None else None
        if w is not None:
            w.agent_closed(pid)

    def check_exec(self, agent_pids: list[int | None], alive: bool) -> None:
        """A note when the job, or a rank, exec'd into a program that has no agent."""
        if self.exec_watch is not None:
            msg = self.exec_watch.check(agent_pids, alive)
            if msg:
                self.emit(_note(msg, "warning"))
        for pid, w in list(self.rank_watches.items()):
            if w.closed_at is None:
                continue  # its agent is connected: nothing to look at (the common case, every pass)
            running = execwatch.cmdline(pid)
            msg = w.check(agent_pids, alive=bool(running))
            if msg:
                self.emit(_note(msg, "warning"))
            if not running and w.closed_at is None:
                del self.rank_watches[pid]  # ended: its pid may be reused

    # --------------------------------------------------------------- signals

    def install_signals(self, wake_fd: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if self.mode == "record":
            # Ctrl-C reaches the job directly (same process group); the job
            # decides whether to stop, as it would without ctmon.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGQUIT, signal.SIG_IGN)
        # Every other signal that would end ctmon is passed on to the job, or
        # noted and ignored (ctmon/launch/signal_policy.py): ctmon outlives the
        # job, so the recording always ends with the job's exit.
        for sig in (*signal_policy.forwarded(self.mode), *signal_policy.IGNORED):
            signal.signal(sig, self._on_signal)
        if self.mode == "record":
            signal.signal(signal.SIGWINCH, self._on_signal)
        signal.set_wakeup_fd(wake_fd, warn_on_full_buffer=False)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._pending_signals.append(signum)

    def handle_signals(self) -> None:
        while self._pending_signals:
            sig = self._pending_signals.pop(0)
            if sig == signal.SIGWINCH:
                for st in self.streams:
                    if st.open and st.passthrough_fd is not None and isatty(st.passthrough_fd):
                        rows, cols = term_size(st.passthrough_fd, self.pty_size)
                        set_winsize(st.fd, rows, cols)
            elif sig in signal_policy.IGNORED:
                self._note_ignored(sig)
            else:
                self.signal_job(sig, group=False, reason=PASSED_ON)

    def _note_ignored(self, sig: int) -> None:
        """Once per signal: a limit of ctmon's own (SIGXCPU, SIGXFSZ) repeats."""
        if sig not in self._ignored_noted:
            self._ignored_noted.add(sig)
            why = signal_policy.IGNORED[sig]
            name = signal_policy.signal_name(sig)
            self.emit(_note(f"ctmon received {name} and ignored it: it is about {why}", "warning"))

    def signal_job(self, sig: int, group: bool, reason: str) -> None:
        """Send the job a signal, and record that ctmon sent it and why (the
        findings tell a stop by ctmon from a kill by the system with it)."""
        p = self.proc
        if p is None or p.returncode is not None:
            return
        try:
            if group and self.mode == "attach":
                os.killpg(p.pid, sig)  # like Ctrl-C in a terminal: the whole job
            else:
                os.kill(p.pid, sig)
        except OSError:
            pass
        self.emit(_note(sent_signal_message(signal_policy.signal_name(sig), reason)))

    def control_signal(self, action: str) -> None:
        """A viewer's interrupt / terminate / kill (anything else is ignored)."""
        sig = CONTROL_SIGNALS.get(action)
        if sig is None:
            return
        reason = CONTROL_REASONS[action]
        if action == "kill" and self._viewer_interrupted:
            reason = "Ctrl-C twice"  # the TUI's second Ctrl-C sends the kill
        self._viewer_interrupted = self._viewer_interrupted or action == "interrupt"
        self.signal_job(sig, group=True, reason=reason)

    def stop(self, grace: object) -> None:
        """``stop``: SIGTERM now, SIGKILL after the grace if the job still runs
        (0: never). Here rather than in the viewer, so the escalation happens
        even when the viewer quits or its connection drops meanwhile."""
        g = protocol.DEFAULT_STOP_GRACE_S
        if isinstance(grace, (int, float)) and not isinstance(grace, bool) and grace == grace and grace >= 0:
            g = MAX_STOP_GRACE_S if grace > MAX_STOP_GRACE_S else float(grace)  # 10**400 is an int: no float()
        p = self.proc
        if p is None or p.returncode is not None:
            return
        self.signal_job(signal.SIGTERM, group=True, reason="q → Stop")
        self._kill_at = time.monotonic() + g if g > 0 else None
        self._kill_reason = f"q → Stop, still running after its {g:g} s grace"
        when = f"SIGKILL in {g:g} s if it still runs" if g > 0 else "no SIGKILL will follow"
        self.emit(_note(f"stop asked by a viewer: {when}"))

    def escalate_stop(self) -> None:
        if self._kill_at is not None and time.monotonic() >= self._kill_at:
            self._kill_at = None
            self.signal_job(signal.SIGKILL, group=True, reason=self._kill_reason)
