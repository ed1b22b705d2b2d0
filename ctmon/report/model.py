"""The report's shape, for the type checker: one TypedDict per section.

``build_report`` returns a :class:`Report`; the renderers, the gate and the
diff take one, so a key read that the report does not have is an error
before it is a ``KeyError``. A TypedDict is a plain dict when the code runs:
``--json`` prints exactly what was built. docs/REPORT.md says what each key
means; every key is always present (an unknown value is null). The
shapes of ``ctmon diff`` are in ctmon/report/diff_model.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

# The fields of one of the store's typed values, by name (a device, a torch.compile
# call, a stack frame, a fix): whatever its struct holds, as JSON.
Fields = dict[str, Any]


class CalledFrom(TypedDict):
    """The user's own line into a library's code."""

    file: str | None
    line: int | None
    code: str | None


class CodeRef(TypedDict):
    name: str | None
    file: str | None
    line: int | None


class Reason(TypedDict):
    reason: str
    count: int


class Note(TypedDict):
    level: str
    source: str | None
    message: str


# -- steps and generation


class StepNumbers(TypedDict):
    by: str  # "job" or "ctmon"
    first: int
    last: int


class StepRuntime(TypedDict):
    clock: str
    graphs_timed: bool
    samples: int
    interval_s: float | None
    graph_share: float | None
    glue_share: float | None
    other_share: float | None
    compiling_samples: int


class Steps(TypedDict):
    count: int | None  # None: a PyTorch trace, which holds no steps
    timed: int
    source: str | None
    device_timed: bool
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    min_ms: float | None
    max_ms: float | None
    steps_per_s: float | None
    compile_steps: int
    numbers: StepNumbers | None
    first_step_ms: float | None
    compiled_share: float | None
    runtime: StepRuntime | None


class Generation(TypedDict):
    calls: int
    tokens: int
    prefill: str
    ttft_ms: float | None
    ttft_max_ms: float | None
    token_p50_ms: float | None
    token_p90_ms: float | None
    token_samples: int


# -- compiles


class CompileTotals(TypedDict):
    compiles: int
    recompiles: int
    graph_breaks: int
    limit_hits: int
    failures: int
    frames: int
    backward_compiles: int
    total_time_s: float
    forward_time_s: float
    backward_time_s: float
    recompile_limit: int | None
    torch_compile_calls: int
    phases_s: dict[str, float]  # dynamo, backend, inductor, code_gen
    traced_phases_s: dict[str, float]  # a phase the run never logged is absent


class FrameRuntime(TypedDict):
    calls: int | None
    share: float | None
    glue_share: float | None
    samples: int
    timed: bool


class Frame(TypedDict):
    frame_id: int | None
    name: str
    file: str | None
    line: int | None
    code: CodeRef
    module: str | None
    called_from: CalledFrom | None
    compiles: int
    recompiles: int
    recompile_reasons: list[str]
    entries: int
    recompile_limit: int | None
    limit_hit: bool
    time_s: float | None
    compile_ids: list[str]
    runtime: FrameRuntime | None


class CompilePhaseTimes(TypedDict):
    backend: float | None
    inductor: float | None
    code_gen: float | None


class FxGraphResults(TypedDict):
    hit: int
    miss: int


class Compile(TypedDict):
    compile_id: str
    frame_id: int | None
    recompile: bool
    reason: str | None
    time_s: float | None
    phases_s: CompilePhaseTimes
    graph_ops: int | None
    guards: int | None
    graph_breaks: int
    fx_graph: FxGraphResults
    restarts: list[str]
    failed: str | None
    started_at: CalledFrom | None


class CompileSite(TypedDict):
    file: str | None
    line: int | None
    code: str | None
    compile_ids: list[str]


class Specialization(TypedDict):
    compile_id: str | None
    sources: list[str]
    value: str | None
    reason: str | None
    file: str | None
    line: int | None
    code: str | None


class GraphBreak(TypedDict):
    reason: str
    file: str | None
    line: int | None
    count: int
    explanation: str | None
    hints: list[str]
    url: str | None
    called_from: CalledFrom | None
    user_stack: list[Fields]


# -- caches


class CacheResults(TypedDict):
    hit: int
    miss: int
    bypass: int


class Autotune(TypedDict):
    kernels: int
    cached: int


class Cache(TypedDict):
    # the store counts these two from the start; a cache PyTorch names that
    # ctmon does not know yet is added beside them
    fx_graph: CacheResults
    aot_autograd: CacheResults
    autotune: Autotune
    bypass_reasons: list[Reason]
    time_saved_s: float
    cache_dir: str | None
    entries_at_start: dict[str, int] | None


def cache_results(caches: Mapping[str, object], name: str) -> Mapping[str, object]:
    """One cache's ``{hit, miss, bypass}`` (of a report's ``cache``, a rank's)
    by a name that is not written out (``CACHE_NAMES``'s); empty where the
    run counted none."""
    found = caches.get(name)
    return found if isinstance(found, dict) else {}


def steps_of(r: Report) -> Steps:
    """A rendered report's steps: only a lean one (what a diff reads, never
    rendered) has none."""
    steps = r["steps"]
    if steps is None:
        raise ValueError("a lean report has no steps to render")
    return steps


class Cudagraphs(TypedDict):
    skips: list[Reason]


# -- the machine


class Gpu(TypedDict):
    index: int
    name: str | None
    samples: int
    util_mean: float | None
    util_p10: float | None
    util_p90: float | None
    memory_peak_bytes: int | None
    memory_total_bytes: int | None
    job_memory_peak_bytes: int | None
    power_mean_w: float | None
    idle_share_while_stepping: float | None


class System(TypedDict):
    samples: int
    gpus: list[Gpu]
    no_gpu: str | None
    cpu_percent_mean: float | None
    cpu_percent_peak: float | None
    cpus: int | None
    rss_peak_bytes: int | None


# -- findings and ranks


class Finding(TypedDict):
    id: str
    rule: str
    severity: str
    title: str
    file: str | None
    line: int | None
    detail: str
    evidence: list[str]
    fix: str
    fixes: list[Fields]
    called_from: CalledFrom | None


class MarkedFinding(Finding, total=False):
    """A finding of a report made with ``--baseline BASE``: the one key
    that is not always present (docs/REPORT.md)."""

    new_since_base: list[str]  # what is new since BASE at the finding's place


class RankSteps(TypedDict):
    count: int | None
    source: str | None
    device_timed: bool
    p50_ms: float | None
    p90_ms: float | None


class RankCompile(TypedDict):
    compiles: int
    recompiles: int
    graph_breaks: int
    limit_hits: int
    failures: int
    time_s: float | None


class Rank(TypedDict):
    rank: int
    local_rank: int | None
    world_size: int | None
    host: str | None
    pid: int | None
    primary: bool
    exit_code: int | None
    exit_signal: str | None
    steps: RankSteps
    compile: RankCompile
    cache: dict[str, CacheResults]
    gpu_mem_peak_bytes: int | None


# -- the whole


class Report(TypedDict):
    report_version: int
    ctmon_version: str
    recorded_by: str | None
    input: str  # "recording" or "torch_trace"
    session_id: str | None
    command: list[str]
    cwd: str | None
    host: str | None
    pid: int | None
    state: str
    exit_code: int | None
    exit_signal: str | None
    # the store's JoinedBefore.as_dict() and left_running: read back into
    # words by ctmon.store.joined.from_report, which takes a plain dict
    joined: dict[str, Any] | None
    duration_s: float | None
    python: str | None
    torch: str | None
    cuda: str | None
    triton: str | None
    devices: list[Fields]
    steps: Steps | None  # None in a lean report (what a diff reads)
    generation: Generation | None
    compile: CompileTotals
    compile_calls: list[Fields]
    frames: list[Frame]
    compiles: list[Compile]
    compile_sites: list[CompileSite]
    specializations: list[Specialization]
    graph_breaks: list[GraphBreak]
    cache: Cache
    cudagraphs: Cudagraphs
    system: System | None
    findings: list[Finding]
    ranks: list[Rank]
    nodes: list[Fields]  # one per merged recording (ctmon/read/merge.py)
    drops: dict[str, int]
    notes: list[Note]


class Noted(TypedDict):
    """What the gate's capture and recording checks read: a report, or the
    notes alone where a run is judged without one."""

    notes: list[Note]
