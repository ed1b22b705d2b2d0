"""The agent: everything ctmon runs inside the monitored process.

It imports torch lazily -- the hooks go in the moment the job itself imports
torch -- and never imports the TUI, psutil or pynvml. Any failure inside the
agent disables the agent, never the job.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ctmon import _api
from ctmon.agent.channel import Channel, connect
from ctmon.agent.generation import GenerationWatch
from ctmon.agent.process_event import process_event
from ctmon.agent.rank_info import RankInfo, group_initialised, initialised_rank, own_rank
from ctmon.agent.ring_file import create_ring, no_ring_note, ring_capacity
from ctmon.agent.step_relay import StepRelay
from ctmon.agent.steps import StepClock
from ctmon.agent.trace import CAPTURE_SOURCE
from ctmon.agent.trace_convert import TraceConverter
from ctmon.agent.uncaught import uncaught_event
from ctmon.wire import protocol
from ctmon.wire.ring import StepRing

ENV_SOCKET = "CTMON_AGENT_SOCKET"
ENV_SESSION = "CTMON_SESSION"
ENV_SESSION_DIR = "CTMON_SESSION_DIR"
# How long a process that is no rank waits, at its exit, to tell the monitor
# what it compiled unseen (its exit must not wait on a stuck monitor).
UNSEEN_NOTE_TIMEOUT_S = 1.0


class Agent:
    def __init__(self, sock: socket.socket | None) -> None:
        self.channel = Channel(sock)
        # a rank of a distributed job says so on everything it sends
        self.channel.rank = own_rank()
        self.anchor_ns = time.perf_counter_ns()
        self.anchor_wall = time.time()
        self.clock = StepClock(self.channel)
        self.generation = GenerationWatch(self.channel)
        self.clock.generation = self.generation
        self.converter = TraceConverter()
        self.channel.convert = self._convert
        self.channel.periodic = self._periodic
        self.channel.counting = self.clock.counting
        self.torch_installed = False
        self.optimizer_hook: Any = None  # torch's RemovableHandle, once installed
        self._periodic_hooks: list[Callable[[], list[protocol.Event]]] = [
            self.clock.end_count
        ]  # ends the clock's counting stretches
        self.final_hooks: list[
            Callable[[], list[protocol.Event]]
        ] = []  # their events are sent at exit, whatever their pace
        # A process that claims its connection once it is a rank (pending.py,
        # or a forked child): where to connect, and whether it was forked.
        self.socket_path: str | None = None
        self.forked = False
        self._closed = False
        # A process ctmon joined while it ran (ctmon/agent/join.py): asked
        # at each flush whether the supervisor wants it gone, then it leaves.
        self.joined = False
        self.leave_requested: Callable[[], bool] | None = None
        self.on_leave: Callable[[], None] | None = None
        self.trace_level_before: int | None = None

    # ---- records -> events (sender thread) ----

    def _convert(self, rec: tuple[Any, ...]) -> list[protocol.Event]:
        tag = rec[0]
        if tag == "trace":
            return self.converter.convert(rec[1], rec[2], rec[3], rec[4])
        if tag == "device_time":
            _, src, i0, i1, ms = rec
            return [{"kind": protocol.DEVICE_TIME, "t": time.time(), "src": src, "i0": i0, "i1": i1, "ms": ms}]
        if tag == "event":
            return [rec[1]]
        if tag == "call":
            return list(rec[1]())
        return []

    def _periodic(self) -> list[protocol.Event]:
        out: list[protocol.Event] = []
        for hook in list(self._periodic_hooks):  # a hook may remove itself
            try:
                out.extend(hook())
            except Exception:
                pass
        asked = self.leave_requested
        if asked is not None and asked():
            out = self._leave(out)
        return out

    def _leave(self, out: list[protocol.Event]) -> list[protocol.Event]:
        """A joined agent asked to leave (on the sender thread, in a flush):
        its hooks out, its last events sent, then its thread ends and its
        connection closes after that flush's send (ctmon/agent/join.py)."""
        self.leave_requested = None
        self._closed = True
        try:
            if self.on_leave is not None:
                self.on_leave()
        except Exception:
            pass
        for hook in self.final_hooks:
            try:
                out.extend(hook())
            except Exception:
                pass
        message = f"ctmon left process {os.getpid()}: its hooks are out and the job runs on as before the join"
        out.append({"kind": protocol.NOTE, "t": time.time(), "level": "info", "source": "join", "message": message})
        ch = self.channel
        ch._stop = True
        send = ch._send

        def last_send(data: bytes) -> None:
            send(data)
            sock, ch._sock = ch._sock, None
            ch.disabled = True
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass

        ch._send = last_send  # type: ignore[method-assign]
        return out

    # ---- lifecycle ----

    def emit(self, event: protocol.Event, urgent: bool = True) -> None:
        self.channel.put(("event", event), urgent)

    def start(self, session_dir: str | None = None) -> None:
        # Sent before any user code runs, so the supervisor knows the ring
        # before the first step can be written into it.
        self.channel.send_now(self.hello(session_dir))
        self.channel.start()
        self.watch_forks()
        _api._step_impl = self.clock.api_step
        if self.channel.rank is None:
            # a process that becomes a rank only when it initialises a
            # process group (Lightning's first process) says so then
            self._periodic_hooks.append(self._rank_once_initialised)

    def watch_forks(self) -> None:
        ch = self.channel
        os.register_at_fork(
            before=ch.before_fork, after_in_parent=ch.after_fork_in_parent, after_in_child=self.after_fork_in_child
        )

    def after_fork_in_child(self) -> None:
        """A forked child shares the parent's socket and step ring: it
        writes to neither. It may still be a rank of its own (started by
        ``start_processes(..., start_method="fork")`` or a fork-context
        ``Process``, it calls ``init_process_group`` later): then it goes
        dormant, keeping what it compiles, and claims its rank on a
        connection of its own once its process group is up, as a spawned
        child does (ctmon/agent/pending.py). Its sender thread starts only
        at its first compile or step, so a child that does neither (a
        DataLoader worker) runs none of ctmon's code after the fork."""
        ch = self.channel
        silent = ch.disabled
        sampler = getattr(ch.tick, "__self__", None)  # the hotness sampler, if any
        strings = [r for r in ch.records if r[0] == "trace" and r[1] == "str"]
        in_parents_group = group_initialised()
        ch.after_fork_in_child()
        self.clock.stop()
        path = os.environ.get(ENV_SOCKET)
        if silent or not path:
            return
        try:
            for rec in strings:  # file names PyTorch interned in the parent: it will not send them again
                self._convert(rec)
            self._go_dormant(path, sampler, in_parents_group)
        except Exception:  # the child runs on, silent
            ch.hold = ch.dormant = None
            ch.disabled = True
            ch.records.clear()
            self.clock.stop()

    def _go_dormant(self, socket_path: str, sampler: object, in_parents_group: bool) -> None:
        self.forked = True
        self.anchor_ns, self.anchor_wall = time.perf_counter_ns(), time.time()
        # The parent's sampler, rank watch and step relay hold the parent's
        # state: none of them runs here (a forked rank's hot regions are not
        # sampled).
        self._periodic_hooks = [h for h in self._periodic_hooks if not self._parents_hook(h, sampler)]
        self.final_hooks = [h for h in self.final_hooks if getattr(h, "__self__", None) is not sampler]
        self.clock.forked()
        self.clock.each_second = self._woken_by_step
        self.hold_until_ranked(socket_path, os.environ.get(ENV_SESSION_DIR), in_parents_group)
        self.channel.dormant = self._wake
        self.channel.disabled = False

    def _parents_hook(self, hook: Callable[[], list[protocol.Event]], sampler: object) -> bool:
        owner = getattr(hook, "__self__", None)
        return hook == self._rank_once_initialised or owner is sampler or isinstance(owner, StepRelay)

    def _woken_by_step(self, t: int, counting: bool) -> None:
        self.clock.each_second = None
        self.channel._wake_dormant()

    def _wake(self) -> None:
        """A dormant child's first compile or step: its sender thread, and
        its goodbye at exit -- a multiprocessing child ends in ``os._exit``,
        which runs no ``atexit`` handler, but threading's shutdown hooks
        run before it."""
        self.clock.each_second = None
        self.channel.start()
        register = getattr(threading, "_register_atexit", None)
        try:
            if register is not None:
                register(self.close)
        except RuntimeError:  # the interpreter is shutting down already
            pass

    def hold_until_ranked(self, socket_path: str, session_dir: str | None, in_parents_group: bool = False) -> None:
        """Keep every record, unsent, until this process is a rank; then
        connect, say hello as that rank (a fresh step ring, swapped in at
        the next boundary) and send them. A child of a rank (its group
        already up at the fork) never claims one: the rank is its parent's."""
        self.socket_path = socket_path
        ch = self.channel

        def hold() -> bool:
            rank = initialised_rank()
            if rank is None or in_parents_group:
                return True
            ch.hold = None
            sock = connect(socket_path)
            if sock is None:  # the monitor is gone: stay quiet for good
                ch.disabled = True
                ch.records.clear()
                return True
            ch._sock = sock
            ch.rank = rank.rank
            hello = self.hello(session_dir, rank, later=True)
            hello["rank"] = rank.rank
            ch._send(protocol.encode(hello))
            _api._step_impl = self.clock.api_step
            return False

        ch.hold = hold

    def hello(self, session_dir: str | None, rank: RankInfo | None = None, later: bool = False) -> protocol.Event:
        """This process's ``process`` event, with a fresh step ring (attached
        now, or at the job's next boundary when ``later``)."""
        hello = process_event(self.anchor_ns, self.anchor_wall, rank)
        if not session_dir:
            return hello
        ring: StepRing | None
        try:
            path, ring = create_ring(session_dir)
            hello["step_ring"] = path
        except OSError as e:
            # no room for the file (ENOSPC, ``ulimit -f``): the boundaries
            # take the socket, and the user is told why
            hello["step_ring_error"] = e.strerror or str(e)
            ring = self._relay_ring()
            self.emit(no_ring_note(session_dir, e, ring is not None))
        if ring is not None:
            if later:
                self.clock.attach_later(ring)
            else:
                self.clock.attach_ring(ring)
        return hello

    def _relay_ring(self) -> StepRing | None:
        """A ring in the job's own memory, whose boundaries the sender
        thread sends on the socket (step_relay.StepRelay)."""
        try:
            ring = StepRing.private(ring_capacity())
        except (OSError, ValueError, OverflowError):
            return None
        self._periodic_hooks.append(StepRelay(ring).drain)
        return ring

    def _rank_once_initialised(self) -> list[protocol.Event]:
        rank = initialised_rank()
        if rank is None:
            return []
        self._periodic_hooks.remove(self._rank_once_initialised)
        self.channel.rank = rank.rank
        return [process_event(self.anchor_ns, self.anchor_wall, rank)]

    def close(self) -> None:
        if self._closed:  # a forked child runs it from threading's shutdown, then maybe from atexit
            return
        self._closed = True
        _api._step_impl = None
        try:
            self.clock.flush_counted()
            self.generation.flush()
            ev = uncaught_event()
            if ev is not None:
                self.channel.put(("event", ev))
            for hook in self.final_hooks:
                self.channel.put_last(("call", hook))
        except Exception:
            pass
        self.channel.close()
        try:
            self._say_unseen()
        except Exception:
            pass

    def _say_unseen(self) -> None:
        """A process still waiting for its rank at exit (a child of the job
        that compiled but never initialised a process group) kept its
        compiles unsent: the recording would count none of them, with no
        word. One note says so, on a connection of its own, bounded."""
        ch = self.channel
        if ch.hold is None or self.socket_path is None:
            return
        compiles = sum(1 for r in ch.records if r[0] == "trace" and r[1] == "compilation_metrics")
        if not compiles:
            return
        ch.records.clear()
        sock = connect(self.socket_path, UNSEEN_NOTE_TIMEOUT_S)
        if sock is None:
            return
        try:
            sock.settimeout(UNSEEN_NOTE_TIMEOUT_S)
            sock.sendall(protocol.encode(unseen_note(compiles, self.forked)))
        except OSError:
            pass
        finally:
            sock.close()

    def flush_before_exec(self) -> None:
        """Send what is queued now: ``os.execv`` replaces the process without
        running ``atexit``. Bounded, and never raises (the exec must happen)."""
        ch = self.channel
        sock = ch._sock
        if ch.disabled or sock is None or os.getpid() != ch.pid:
            return
        try:
            self.clock.flush_counted()
            for hook in self.final_hooks:
                ch.put_last(("call", hook))
            sock.settimeout(EXEC_FLUSH_TIMEOUT_S)
            ch._flush()
            sock.settimeout(None)
        except Exception:
            pass

    def hook_exec(self) -> None:
        """Wrap os.execv/os.execve (the execl*/execvp* family calls them)."""
        for name in ("execv", "execve"):
            real = getattr(os, name, None)
            if real is None or getattr(real, "_ctmon_wrapped", False):
                continue
            os.__dict__[name] = _flushing_exec(real, self)


EXEC_FLUSH_TIMEOUT_S = 2.0


def _flushing_exec(real: Callable[..., object], agent: Agent) -> Callable[..., object]:
    import functools

    @functools.wraps(real)
    def execv(*args: object, **kwargs: object) -> object:
        agent.flush_before_exec()
        return real(*args, **kwargs)

    execv._ctmon_wrapped = True  # type: ignore[attr-defined]
    return execv


def unseen_note(compiles: int, forked: bool) -> protocol.Event:
    """What the user reads about a child process whose compiles ctmon kept
    out of the recording, and how to see them."""
    how = "forked" if forked else "started"
    message = (
        f"process {os.getpid()} ({how} by process {os.getppid()}) compiled {compiles} time(s), but ctmon never found "
        "it a rank of a process group (it looks four times a second), so these compiles are not in this recording "
        "nor in its counts: ctmon follows a child process of the job once it has called "
        "torch.distributed.init_process_group"
    )
    return {
        "kind": protocol.NOTE,
        "t": time.time(),
        "level": "warning",
        "source": CAPTURE_SOURCE,
        "message": message,
        "missing_compiles": compiles,
    }
