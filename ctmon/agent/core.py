"""The agent: everything ctmon runs inside the monitored process.

It imports torch lazily -- the hooks go in the moment the job itself imports
torch -- and never imports the TUI, psutil or pynvml. Any failure inside the
agent disables the agent, never the job.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import time
from typing import Any

from ctmon import _api
from ctmon.agent.channel import Channel
from ctmon.agent.generation import GenerationWatch
from ctmon.agent.rank_info import RankInfo, initialised_rank, launched_rank
from ctmon.agent.steps import StepClock, StepRelay
from ctmon.agent.trace_convert import TraceConverter
from ctmon.agent.uncaught import uncaught_event
from ctmon.wire import protocol
from ctmon.wire.ring import DEFAULT_CAPACITY, StepRing

ENV_SOCKET = "CTMON_AGENT_SOCKET"
ENV_SESSION = "CTMON_SESSION"


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
        self._periodic_hooks: list[Any] = [self.clock.end_count]  # ends the clock's counting stretches
        self.final_hooks: list[Any] = []  # their events are sent at exit, whatever their pace

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
        return out

    # ---- lifecycle ----

    def emit(self, event: protocol.Event, urgent: bool = True) -> None:
        self.channel.put(("event", event), urgent)

    def start(self, session_dir: str | None = None) -> None:
        # Sent before any user code runs, so the supervisor knows the ring
        # before the first step can be written into it.
        self.channel.send_now(self.hello(session_dir))
        self.channel.start()
        os.register_at_fork(after_in_child=self.after_fork_in_child)
        _api._step_impl = self.clock.api_step
        if self.channel.rank is None:
            # a process that becomes a rank only when it initialises a
            # process group (Lightning's first process) says so then
            self._periodic_hooks.append(self._rank_once_initialised)

    def after_fork_in_child(self) -> None:
        """A forked child (a DataLoader worker, ...) sends nothing and
        writes no step: it shares the parent's socket and step ring."""
        self.channel.after_fork_in_child()
        self.clock.stop()

    def hello(self, session_dir: str | None, rank: RankInfo | None = None, later: bool = False) -> protocol.Event:
        """This process's ``process`` event, with a fresh step ring (attached
        now, or at the job's next boundary when ``later``)."""
        hello = process_event(self.anchor_ns, self.anchor_wall, rank)
        if not session_dir:
            return hello
        ring: StepRing | None
        try:
            path, ring = _create_ring(session_dir)
            hello["step_ring"] = path
        except OSError as e:
            # no room for the file (ENOSPC, ``ulimit -f``): the boundaries
            # take the socket, and the user is told why
            hello["step_ring_error"] = e.strerror or str(e)
            ring = self._relay_ring()
            self.emit(_no_ring_note(session_dir, e, ring is not None))
        if ring is not None:
            if later:
                self.clock.attach_later(ring)
            else:
                self.clock.attach_ring(ring)
        return hello

    def _relay_ring(self) -> StepRing | None:
        """A ring in the job's own memory, whose boundaries the sender
        thread sends on the socket (steps.StepRelay)."""
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


def _flushing_exec(real: Any, agent: Agent) -> Any:
    import functools

    @functools.wraps(real)
    def execv(*args: Any, **kwargs: Any) -> Any:
        agent.flush_before_exec()
        return real(*args, **kwargs)

    execv._ctmon_wrapped = True  # type: ignore[attr-defined]
    return execv


def _no_ring_note(session_dir: str, error: OSError, relayed: bool) -> protocol.Event:
    """What the user reads: the ring's directory, why, what it costs, what to do."""
    where = os.path.dirname(os.path.normpath(session_dir))
    then = (
        "step boundaries go through ctmon's socket instead (a SIGKILL loses the last half-second of them)"
        if relayed
        else "step boundaries are not recorded"
    )
    if error.errno == errno.EFBIG:
        fix = "raise the file-size limit (ulimit -f)"
    elif error.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free space there or set CTMON_RUNTIME_DIR"
    else:
        fix = "set CTMON_RUNTIME_DIR to another directory"
    message = f"cannot make the step ring in {where} ({error.strerror or error}): {then}; {fix}"
    return {"kind": protocol.NOTE, "t": time.time(), "level": "warning", "source": "agent", "message": message}


def _create_ring(session_dir: str) -> tuple[str, StepRing]:
    """A fresh ring file: a process that exec'd into another Python program
    keeps its pid, and its new agent must not collide with the old ring."""
    pid = os.getpid()
    for n in range(100):
        path = os.path.join(session_dir, f"steps-{pid}.ring" if n == 0 else f"steps-{pid}-{n}.ring")
        try:
            return path, StepRing.create(path, ring_capacity())
        except FileExistsError:
            continue
    raise FileExistsError(f"no free step ring name for pid {pid}")


def _argv() -> list[str]:
    # Under ``python -m`` the agent starts before runpy has put the module's
    # path into argv[0]; name the module the way the command line does.
    argv = list(sys.argv)
    orig = getattr(sys, "orig_argv", None)
    if argv[:1] == ["-m"] and orig and "-m" in orig:
        i = orig.index("-m")
        argv = orig[i : i + 2] + argv[1:]
    return argv


def ring_capacity() -> int:
    """CTMON_STEP_RING_CAPACITY (a power of two, 64 .. 2^24) or the default 2^20."""
    raw = os.environ.get("CTMON_STEP_RING_CAPACITY", "")
    if raw.isdigit():
        n = int(raw)
        if 64 <= n <= 1 << 24 and n & (n - 1) == 0:
            return n
    return DEFAULT_CAPACITY


def process_event(anchor_ns: int, anchor_wall: float, rank: RankInfo | None = None) -> protocol.Event:
    """The hello; ``rank`` when the process learnt it from its process group,
    else the one its launcher gave it (RANK, WORLD_SIZE), if any."""
    if rank is None:
        rank = launched_rank()
    ev: protocol.Event = {
        "kind": protocol.PROCESS,
        "t": anchor_wall,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": [protocol.clip(a, 2000) for a in _argv()[:200]],
        "executable": sys.executable,
        "python": sys.version.split()[0],
        "cwd": os.getcwd(),
        "clock": {"perf_ns": anchor_ns, "wall": anchor_wall},
    }
    if rank is not None:
        ev["rank"] = rank.rank
        if rank.world_size is not None:
            ev["world_size"] = rank.world_size
        if rank.local_rank is not None:
            ev["local_rank"] = rank.local_rank
        ev["host"] = protocol.clip(socket.gethostname(), 255)
        job = job_identity()
        if job:
            ev["job"] = protocol.clip(job, 500)
    return ev


def job_identity() -> str | None:
    """Which job a rank belongs to, the same on every node: where its ranks
    meet (MASTER_ADDR:MASTER_PORT) and torchrun's run id."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    run = os.environ.get("TORCHELASTIC_RUN_ID")
    if not (addr and port) and not run:
        return None
    return f"{addr or '?'}:{port or '?'}" + (f"/{run}" if run else "")


def own_rank() -> int | None:
    """This process's rank, when a launcher started it as one (RANK, WORLD_SIZE)."""
    rank = launched_rank()
    return rank.rank if rank is not None else None
