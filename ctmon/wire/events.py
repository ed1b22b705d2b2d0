"""The event kinds of the run, its steps, messages and system samples, and
``AnyEvent``: the tagged union of every kind that ctmon/wire/decode.py decodes.

The compile kinds are in ctmon/wire/events_compile.py; what every kind is
built on, and the rules they keep (typing, compatibility, why the agent
imports none of this), in ctmon/wire/event_base.py. docs/PROTOCOL.md says
what each field means; these modules say what type it has.
"""

from __future__ import annotations

import binascii
from typing import Annotated, Any, Union

import msgspec

from ctmon.wire.event_base import Event, Finite, Nanos, Ranked, Unknown
from ctmon.wire.events_compile import (
    Autotune,
    BwdCompile,
    CacheResult,
    Compile,
    CompileCall,
    CompilePhase,
    CompileStart,
    Cudagraph,
    CudagraphTree,
    GraphBreak,
    RecompileReasons,
    Specialization,
)

# ------------------------------------------------------------------ the run


class SessionStart(Event, tag="session", omit_defaults=False):
    """First line of a recording (the supervisor)."""

    v: int | None = None
    ctmon: str | None = None
    id: str | None = None
    mode: str | None = None
    command: list[str] = []
    cwd: str | None = None
    host: str | None = None
    pid: int | None = None
    job_pid: int | None = None
    recording: str | None = None
    synthetic: str | None = None


class Clock(msgspec.Struct, gc=False):
    perf_ns: int
    wall: Finite


class Process(Ranked, tag="process"):
    """An agent's hello, sent before any user code runs."""

    pid: int | None = None
    ppid: int | None = None
    argv: list[str] = []
    executable: str | None = None
    python: str | None = None
    cwd: str | None = None
    clock: Clock | None = None
    step_ring: str | None = None
    step_ring_error: str | None = None
    local_rank: int | None = None
    world_size: int | None = None
    host: str | None = None  # a rank's host (the supervisor's, for a job on one node)
    job: str | None = None  # a rank's job, the same on every node: MASTER_ADDR:MASTER_PORT[/run id]


class Torch(Ranked, tag="torch"):
    torch: str | None = None
    cuda: str | None = None
    hip: str | None = None
    triton: str | None = None
    cache_dir: str | None = None
    cache_entries: dict[str, int] = {}
    env: dict[str, str] = {}


class Joined(Ranked, tag="joined"):
    """ctmon joined a process that was running (``--pid``): what Dynamo had
    done before, read from its own state (docs/PROTOCOL.md), never told as
    compile events."""

    pid: int | None = None
    torch: str | None = None
    dynamo: bool = False  # whether the process had imported torch._dynamo
    before: dict[str, Any] = {}


class CudaDevice(msgspec.Struct, omit_defaults=True, gc=False):
    index: int | None = None
    name: str | None = None
    total_memory: int | None = None
    capability: str | None = None
    sms: int | None = None


class Devices(Ranked, tag="devices"):
    cuda: list[CudaDevice] = []
    current: int | None = None
    visible: str | None = None


class Exit(Event, tag="exit", omit_defaults=False):
    code: int | None = None
    signal: str | None = None


# ------------------------------------------------------------------- steps


class Steps(Ranked, tag="steps", omit_defaults=False):
    """A batch of step boundaries from the step ring (the supervisor)."""

    src: str = ""
    i0: int = 0
    ns: list[Nanos] = []


class DeviceTime(Ranked, tag="device_time", omit_defaults=False):
    src: str = ""
    i0: int = 0
    i1: int = 0
    ms: Finite = 0.0


class StepNumber(Ranked, tag="step_number", omit_defaults=False):
    """Boundary ``i`` of source ``src`` ends the job's own step ``n`` (the
    agent): its optimizer's step count, or the ``n`` of ``ctmon.step(n)``;
    sent where the job's numbers begin or jump, not for every step."""

    src: str = ""
    i: int = 0
    n: int = 0


class Generation(Ranked, tag="generation"):
    """One ``generate()`` call whose forward was compiled (ctmon/agent/generation.py).

    ``i0`` .. ``i1``: the step indices (in source ``src``) of its decode calls,
    -1 when they are not one unbroken run of that series; ``ttft_ms`` and
    ``ms`` (the whole call) need the call's start, known on Python 3.12+."""

    src: str = ""
    prefill_calls: int = 0
    decode_calls: int = 0
    i0: int = -1
    i1: int = -1
    ttft_ms: Finite | None = None
    ms: Finite | None = None
    # ``eager``: a call that ran no compiled graph while the job had some
    # (its decode steps ran the original forward); ``seen_ms``: from the
    # first of the agent's ``looks`` at it to its end (a lower bound of its
    # time); ``model``: the class generate() ran on; ``file``/``line``/``code``:
    # the user's line that called it; ``model_name``: that line's frame's
    # name for the original module (not a compiled wrapper of it).
    eager: bool = False
    seen_ms: Finite | None = None
    looks: int = 0
    model: str | None = None
    model_name: str | None = None
    file: str | None = None
    line: int | None = None
    code: str | None = None


class Hotness(Ranked, tag="hotness"):
    """Samples of the main thread since the last such event (ctmon/agent/hotness.py):
    ``counts`` by where it was (graph, glue, other, compiling); ``frames``:
    [file, first line, name, graph samples, glue samples] per compiled frame.
    ``graphs`` (None: not timed): [file, first line, name, calls, host ns in
    ended steps] of each compiled frame's graphs (ctmon/agent/graph_calls.py);
    ``span_ns``: the time the samples counted here stand for, their whole."""

    counts: dict[str, int] = {}
    frames: list[tuple[str, int, str, int, int]] = []
    interval_s: Finite | None = None
    graphs: list[tuple[str, int, str, int, int]] | None = None
    span_ns: int = 0


class LibraryLog(Ranked, tag="library_log"):
    """A warning a library logged (transformers), once per distinct message
    and line: ``file``:``line`` is the line that called the logger."""

    logger: str | None = None
    level: str | None = None
    message: str = ""
    file: str | None = None
    line: int | None = None


class Uncaught(Ranked, tag="uncaught"):
    """The exception that ended a process (its traceback went to stderr):
    ``file``:``line`` is the innermost line of the user's own code."""

    type: str = ""
    message: str = ""
    file: str | None = None
    line: int | None = None
    fn: str | None = None


class ProcessEnd(Ranked, tag="process_end"):
    """The supervisor: a rank's agent connection closed -- the process ended
    (or exec'd: a new hello with the same pid follows)."""

    pid: int | None = None


class Drops(Ranked, tag="drops", omit_defaults=False):
    steps: int | None = None
    events: int | None = None


# ----------------------------------------------------- messages and system


class Note(Ranked, tag="note", omit_defaults=False):
    level: str = "info"
    source: str | None = None
    message: str = ""
    missing_compiles: int | None = None


#: ``Output.enc`` of a chunk whose bytes are not UTF-8: ``data`` holds them in base64
OUTPUT_BASE64 = "base64"
#: ``Output.enc`` of a chunk kept in the output log beside the recording (``log``,
#: ``size`` bytes at ``at``): ``data`` holds only its last lines, for the screen
OUTPUT_LOG = "log"
#: A size or offset in a file: never negative, and a number JSON and a C reader agree on
FileOffset = Annotated[int, msgspec.Meta(ge=0, lt=1 << 62)]


class Output(Event, tag="output", omit_defaults=False):
    """A chunk of the job's stdout or stderr (the supervisor), byte-exact.

    ``data`` is the chunk's text when its bytes are UTF-8. A chunk that is not
    carries ``enc`` = ``"base64"`` and its bytes in base64 (a third larger,
    instead of the two to six bytes JSON spends on each byte it cannot put in
    a string). A large chunk (a job writing as fast as it can) carries ``enc``
    = ``"log"``: its bytes are ``size`` bytes at offset ``at`` of the file
    ``log`` beside the recording, and ``data`` is its last lines as text.
    Fields that are unset are left out (``UNSET`` is never written), so a text
    chunk reads as it always did; a reader that predates ``enc`` shows such a
    chunk's ``data`` as text."""

    stream: str = "stdout"
    data: str = ""
    enc: str | msgspec.UnsetType = msgspec.UNSET
    log: str | msgspec.UnsetType = msgspec.UNSET
    at: FileOffset | msgspec.UnsetType = msgspec.UNSET
    size: FileOffset | msgspec.UnsetType = msgspec.UNSET

    def raw(self) -> bytes | None:
        """The chunk's bytes as the job wrote them, where the event holds them
        (None: kept in the output log -- see ctmon/read/output_log.py --, an
        encoding this version does not know, or base64 that does not decode)."""
        if self.enc is msgspec.UNSET:
            return self.data.encode("utf-8", "replace")
        if self.enc == OUTPUT_BASE64:
            try:
                return binascii.a2b_base64(self.data)
            except (binascii.Error, ValueError):
                return None
        return None

    def text(self) -> str:
        """The chunk as a terminal would show it: bytes that are not UTF-8
        become U+FFFD; of a chunk kept in the output log, a line saying where
        the rest is, then its last lines."""
        if self.enc is msgspec.UNSET:
            return self.data
        if self.enc == OUTPUT_LOG and isinstance(self.size, int):
            where = self.log if isinstance(self.log, str) else "the output log"
            return f"[ctmon: {self.size:,} bytes of {self.stream} at once, kept in {where}; their last lines:]\n{self.data}"
        raw = self.raw()
        if raw is None:
            return f"[ctmon: {len(self.data)} characters of output in an encoding this version cannot read]"
        return raw.decode("utf-8", "replace")


class OutputBytes(Event, tag="output", omit_defaults=False):
    """How the supervisor writes a chunk that is not UTF-8: msgspec writes
    ``bytes`` as base64 in the same pass that writes the line. Read back, it
    is an ``Output`` with ``enc`` = ``"base64"`` (never decoded as this)."""

    stream: str = "stdout"
    data: bytes | memoryview = b""  # a slice of a larger read needs no copy
    enc: str = OUTPUT_BASE64


class GpuSample(msgspec.Struct, gc=False):
    index: int | None = None
    name: str | None = None
    util: Finite | None = None
    mem_util: Finite | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    power_w: Finite | None = None
    power_limit_w: Finite | None = None
    temp_c: Finite | None = None
    sm_clock_mhz: Finite | None = None
    proc_mem: int | None = None
    pid_mem: dict[int, int] | None = None  # the job's processes on this GPU: pid -> bytes (a rank's own memory)


class Sample(Event, tag="sample"):
    """Process and GPU figures, about once a second (the supervisor)."""

    cpu_percent: Finite | None = None
    rss: int | None = None
    tree_rss: int | None = None
    threads: int | None = None
    procs: int | None = None
    sys_cpu_percent: Finite | None = None
    sys_mem_used: int | None = None
    sys_mem_total: int | None = None
    cpus: int | None = None
    gpus: list[GpuSample] | None = None
    gpu_error: str | None = None


class Refusal(Event, tag="error", omit_defaults=False):
    """A supervisor turning a viewer away (bad token, too many viewers): a
    message on the connection, never written to a recording."""

    message: str = ""


AnyEvent = Union[  # noqa: UP007 - msgspec needs the Union object for a tagged decode
    SessionStart,
    CompileCall,
    Process,
    Torch,
    Joined,
    Devices,
    Exit,
    CompileStart,
    Compile,
    BwdCompile,
    RecompileReasons,
    GraphBreak,
    CacheResult,
    Autotune,
    Cudagraph,
    CudagraphTree,
    Steps,
    DeviceTime,
    StepNumber,
    Generation,
    LibraryLog,
    Specialization,
    CompilePhase,
    Hotness,
    Uncaught,
    ProcessEnd,
    Drops,
    Note,
    Output,
    Sample,
    Refusal,
]

#: kind -> its Struct
KINDS: dict[str, type[Event]] = {
    str(cls.__struct_config__.tag): cls
    for cls in AnyEvent.__args__  # type: ignore[attr-defined]
}


def kind_of(ev: Event | Unknown) -> str:
    """The ``kind`` an event was written with."""
    return ev.kind if isinstance(ev, Unknown) else str(ev.__struct_config__.tag)
