"""Every event kind, typed: the one definition of what travels and is recorded.

Each kind is a ``msgspec.Struct`` tagged by its ``kind`` field, so one C-speed
decode both parses a line and checks it: a field of the wrong type makes the
whole event invalid where the bytes enter the process (ctmon/wire/decode.py),
and everything past that point reads attributes it can trust. docs/PROTOCOL.md
says what each field means; this module says what type it has.

Compatibility (protocol 1): unknown fields are ignored, a field a writer left
out takes its default, and a kind this version does not know is skipped by the
decoder, never an error. Defaults are immutable or copied per instance
(msgspec copies ``[]`` and ``{}`` defaults), and ``omit_defaults`` keeps
encoded lines as short as the dicts they replace.

The agent inside the job does not import this module: msgspec would add
~30 ms to every job's start-up (its hello is sent before user code runs), for
events it sends a few dozen times per compile. It writes plain JSON with the
standard library, and tests/test_wire_events.py decodes everything a real
agent sends with these types, so the two cannot drift apart.
"""

from __future__ import annotations

import binascii
from typing import Annotated, Any, Union

import msgspec

#: A float that is a number: JSON has no NaN or infinity, and an event built
#: in memory must not smuggle one in (a report is strict JSON; sums stay finite).
Finite = Annotated[float, msgspec.Meta(ge=-1.7976931348623157e308, le=1.7976931348623157e308)]
#: Nanoseconds between two step boundaries: never negative, and below ~146
#: years (checked here, at C speed, instead of for each of 10M boundaries a day).
Nanos = Annotated[int, msgspec.Meta(ge=0, lt=1 << 62)]


class Event(msgspec.Struct, tag_field="kind", kw_only=True, omit_defaults=True, gc=False):
    """Fields every event has. ``t``: when it happened (Unix seconds).

    Encoded, an event leaves out fields at their defaults (most are "not
    known"); the kinds the supervisor writes by the thousand, and whose every
    field docs/PROTOCOL.md promises, write all of theirs
    (``omit_defaults=False``)."""

    t: Finite = 0.0


class Ranked(Event):
    """Kinds a process of the job sends (and its step batches): ``rank`` says
    which rank of a distributed job, null outside one. A rank's agent stamps
    every event it sends; PyTorch's own trace records carry it too once the
    process group is up."""

    rank: int | None = None


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


# -------------------------------------------------------------- compiling


class StackFrame(msgspec.Struct, omit_defaults=True, gc=False):
    file: str | None = None
    line: int | None = None
    name: str | None = None
    code: str | None = None


class CompileCall(Ranked, tag="compile_call"):
    """The job called ``torch.compile``: on what, from where, how."""

    target: str | None = None  # the model's class or the function's name
    target_module: str | None = None  # where that class or function is defined
    file: str | None = None  # the call of torch.compile
    line: int | None = None
    backend: str | None = None
    mode: str | None = None
    dynamic: bool | None = None
    fullgraph: bool | None = None
    dynamo_disabled: bool | None = None  # torch._dynamo.config.disable (TORCHDYNAMO_DISABLE=1)
    called_from: StackFrame | None = None  # called by a library: the user's own line that led there
    wraps: str | None = None  # a PyTorch wrapper (DDP, FSDP, a compiled module): the class of the module it runs
    wraps_module: str | None = None  # where that class is defined
    # the code a call of the compiled object runs first, and the names its
    # caller's arguments take there (``self`` left out)
    params: list[str] = []
    code_file: str | None = None
    code_line: int | None = None
    code_name: str | None = None
    bases: list[str] = []  # the library classes a compiled module derives from, nearest first
    via: list[str] = []  # a library's call: its functions on the way, innermost first ("transformers:Trainer.train")


class CompileStart(Ranked, tag="compile_start"):
    """Dynamo starts compiling a frame (PyTorch's ``dynamo_start``)."""

    compile_id: str | None = None
    frame_id: int | None = None
    name: str | None = None
    file: str | None = None
    line: int | None = None
    user_code: bool = True
    user: StackFrame | None = None
    called_from: StackFrame | None = None  # the user's own line into a library's frame
    caller: StackFrame | None = None  # the innermost line of the user's own code that called the compiled frame
    module: str | None = None
    module_file: str | None = None
    module_line: int | None = None
    module_user: bool | None = None
    recompile_limit: int | None = None
    # Dynamo settings in force for this compile, {key: scalar} (the agent's
    # read_config_in_force). A list of strings is accepted too, for a writer
    # that sends a set-valued setting, and nothing nests: readers keep scalars.
    dynamo_config: dict[str, Union[bool, int, Finite, str, list[str], None]] = {}


class Compile(Ranked, tag="compile"):
    """A frame compile attempt finished (PyTorch's ``compilation_metrics``)."""

    compile_id: str | None = None
    frame_id: int | None = None
    co_name: str | None = None
    co_filename: str | None = None
    co_firstlineno: int | None = None
    cache_size: int | None = None
    accumulated_cache_size: int | None = None
    guard_count: int | None = None
    shape_env_guard_count: int | None = None
    graph_op_count: int | None = None
    graph_node_count: int | None = None
    graph_input_count: int | None = None
    entire_frame_compile_time_s: Finite | None = None
    backend_compile_time_s: Finite | None = None
    inductor_compile_time_s: Finite | None = None
    code_gen_time_s: Finite | None = None
    dynamo_time_before_restart_s: Finite | None = None
    fail_type: str | None = None
    fail_reason: str | None = None
    fail_user_frame_filename: str | None = None
    fail_user_frame_lineno: int | None = None
    recompile_reason: str | None = None
    restart_reasons: list[str] = []
    non_compliant_ops: list[str] = []
    compliant_custom_ops: list[str] = []
    has_guarded_code: bool | None = None
    cudagraph_skip_reason: str | None = None
    inductor_fx_local_cache_hit_count: int | None = None
    inductor_fx_local_cache_miss_count: int | None = None
    inductor_fx_remote_cache_hit_count: int | None = None
    inductor_fx_remote_cache_miss_count: int | None = None
    aotautograd_local_cache_hit_count: int | None = None
    aotautograd_local_cache_miss_count: int | None = None
    remote_cache_time_saved_s: Finite | None = None
    structured_logging_overhead_s: Finite | None = None
    triton_compile_time_us: Finite | None = None
    start_time: Finite | None = None
    is_forward: bool | None = None
    param_count: int | None = None
    param_numel: int | None = None
    guard_latency_us: Finite | None = None
    recompile_limit: int | None = None


class BwdCompile(Ranked, tag="bwd_compile"):
    compile_id: str | None = None
    frame_id: int | None = None
    duration_us: Finite | None = None
    inductor_compile_time_s: Finite | None = None
    code_gen_time_s: Finite | None = None
    fail_type: str | None = None
    fail_reason: str | None = None
    cudagraph_skip_reason: str | None = None
    inductor_fx_local_cache_hit_count: int | None = None
    inductor_fx_local_cache_miss_count: int | None = None
    structured_logging_overhead_s: Finite | None = None
    start_time: Finite | None = None


class RecompileReasons(Ranked, tag="recompile_reasons"):
    compile_id: str | None = None
    frame_id: int | None = None
    # PyTorch gives one reason per cached version; sent: the kinds of them
    # (ctmon/wire/guard_reasons.py); in an older recording, every one
    reasons: list[str] = []
    counts: list[Annotated[int, msgspec.Meta(ge=0)]] = []  # PyTorch's reasons each of `reasons` stands for
    total: Annotated[int, msgspec.Meta(ge=0)] | None = None  # PyTorch's count; None: `reasons` is the whole list


class GraphBreak(Ranked, tag="graph_break"):
    compile_id: str | None = None
    frame_id: int | None = None
    file: str | None = None
    line: int | None = None
    summary: str | None = None
    reason: str | None = None
    explanation: str | None = None
    hints: list[str] = []
    user_stack: list[StackFrame] = []
    called_from: StackFrame | None = None  # the user's own line into a library's break
    url: str | None = None
    gb_id: str | None = None


class CacheResult(Ranked, tag="cache"):
    compile_id: str | None = None
    frame_id: int | None = None
    cache: str | None = None  # fx_graph | aot_autograd
    result: str | None = None  # hit | miss | bypass
    key: str | None = None
    detail: str | None = None
    reason: str | None = None
    time_saved_s: Finite | None = None


class Autotune(Ranked, tag="autotune"):
    compile_id: str | None = None
    frame_id: int | None = None
    # PyTorch's per-kernel dict, as it reports it (keys vary by version)
    kernels: list[dict[str, Any]] = []


class Cudagraph(Ranked, tag="cudagraph"):
    event: str | None = None
    reason: str | None = None
    message: str | None = None


class CudagraphTree(Ranked, tag="cudagraph_tree"):
    """mode="reduce-overhead": a graph's warm-up or recording by PyTorch's
    CUDA-graph trees, or the trees' cumulative counts (ctmon/agent/cudagraphs.py)."""

    event: str | None = None  # "warmup", "record" or "counts"
    compile_id: str | None = None  # the compile whose graph it is
    graph: str | None = None  # "forward", "backward" or "inference"
    function_id: int | None = None  # PyTorch's id of the function (one per graph and dynamic-size key)
    graph_id: int | None = None  # PyTorch's id of the recorded graph
    device: int | None = None
    dur_s: Finite | None = None  # host time of the warm-up or recording
    shapes: list[list[int]] = []  # the sizes of the inputs that are not static (first 8)
    ints: list[int] = []  # the int inputs (a dynamic graph's sizes, first 8)
    replays: int | None = None  # counts: cumulative
    eager: int | None = None
    warmups: int | None = None
    recordings: int | None = None


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


class CompilePhase(Ranked, tag="compile_phase"):
    """A phase of a compile began (``ph`` "B") or ended ("E"), at ``t``,
    PyTorch's own timestamp of it (ctmon/agent/phases.py names the phases)."""

    compile_id: str | None = None
    frame_id: int | None = None
    phase: str = ""
    ph: str = ""


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


class Specialization(Ranked, tag="specialization"):
    """A symbolic size Dynamo specialised to one value (PyTorch's
    ``symbolic_shape_specialization``): ``sources`` name the inputs it came
    from, ``file``:``line`` the user's code that forced it."""

    compile_id: str | None = None
    frame_id: int | None = None
    symbol: str | None = None
    sources: list[str] = []
    value: str | None = None
    reason: str | None = None
    file: str | None = None
    line: int | None = None
    code: str | None = None


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


class Unknown(msgspec.Struct, gc=False):
    """A line of a kind this version does not know (a newer writer's): not an
    event to fold, but the store counts them by kind."""

    kind: str
    t: Finite = 0.0


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
