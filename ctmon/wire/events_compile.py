"""The compile event kinds: ``torch.compile`` calls, Dynamo's frame compiles,
their phases, graph breaks, recompiles, caches, autotuning and CUDA graphs.

Built on ctmon/wire/event_base.py (what the typing and compatibility rules
are); the decoder's union of every kind is in ctmon/wire/events.py."""

from __future__ import annotations

from typing import Annotated, Any, Union

import msgspec

from ctmon.wire.event_base import Finite, Ranked


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
    # what the key was made of: [attr, hash] pairs ("inductor_config",
    # "fx_kwargs[cpp_wrapper]"), values left out; absent from older recordings
    components: list[tuple[str, str]] = []
    graph: str | None = None  # an FX graph record's graph: forward | backward | inference
    # the Inductor and AOTAutograd settings not at their defaults when the key
    # was made (the agent's read_settings_in_force): {"torch._inductor.config.
    # max_autotune": [value, default]}, the default left out where the job's
    # environment set it; {}: every one at its default; None: not recorded
    # (older recordings, TORCH_TRACE)
    settings: dict[str, list[Union[bool, int, Finite, str, None]]] | None = None


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


class CompilePhase(Ranked, tag="compile_phase"):
    """A phase of a compile began (``ph`` "B") or ended ("E"), at ``t``,
    PyTorch's own timestamp of it (ctmon/agent/phases.py names the phases)."""

    compile_id: str | None = None
    frame_id: int | None = None
    phase: str = ""
    ph: str = ""


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
