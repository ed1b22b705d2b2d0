"""What the session store records beside its sections: the log's entries,
the run's identity (``Meta``) and how it ended (``ExitInfo``)."""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass, field

from ctmon.wire import events as E

#: ``Meta.mode`` of PyTorch's TORCH_TRACE read as a recording (ctmon/read/torch_trace.py):
#: compiles only, no steps, samples, output or run to measure against
TRACE_MODE = "torch_trace"


@dataclass(slots=True)
class LogEntry:
    t: float
    kind: str  # compile | recompile | graph_break | cache | limit | note | exit | error
    text: str
    severity: str = "info"  # info | warning | critical
    ref: object = None  # compile id, break site key, ...


@dataclass
class Meta:
    session_id: str | None = None
    command: list[str] = field(default_factory=list)
    cwd: str | None = None
    host: str | None = None
    mode: str | None = None
    ctmon_version: str | None = None
    protocol_version: int | None = None
    supervisor_pid: int | None = None
    pid: int | None = None
    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    triton: str | None = None
    devices: list[E.CudaDevice] = field(default_factory=list)
    cache_dir: str | None = None
    cache_entries: dict[str, int] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    start_t: float | None = None
    recording: str | None = None
    gpu_error: str | None = None  # why there are no GPU samples (no NVML, no GPU)


@dataclass
class ExitInfo:
    code: int | None
    signal: str | None
    t: float

    @property
    def known(self) -> bool:
        """False for a job ctmon did not start (ctmon.install()): it cannot read its status."""
        return self.code is not None or bool(self.signal)

    @property
    def status(self) -> int:
        """Shell-style status: the code, or 128 + signal number."""
        if self.code is not None:
            return self.code
        if self.signal:
            base, _, offset = self.signal.partition("+")  # SIGRTMIN+3: a real-time signal
            try:
                return 128 + int(getattr(_signal, base)) + (int(offset) if offset else 0)
            except (AttributeError, TypeError, ValueError):
                return 128
        return 1
