"""``ctmon diff``'s shapes, for the type checker: one run as the
comparison reads it (``run_summary``), and the diff ``--json`` prints.
Plain dicts when the code runs, as the report's (ctmon/report/model.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from ctmon.report.model import Cache, Compile, CompileTotals, Frame, GraphBreak, Note

if TYPE_CHECKING:
    # Python 3.10 has it only here; used in annotations alone, never at run time
    from typing_extensions import NotRequired


class StepBlocks(TypedDict):
    steady: int
    device_timed: NotRequired[bool]  # absent where no steady step was found
    runs: NotRequired[int]  # a bench mode's runs whose p50/p90 are the samples (absent: the blocks are)
    p50_ms: float | None
    p90_ms: float | None
    blocks_p50_ms: list[float]
    blocks_p90_ms: list[float]


class CompileCall(TypedDict):
    file: str | None
    line: int | None
    backend: str | None
    mode: str | None
    dynamic: bool | None
    fullgraph: bool | None


class Ran(TypedDict):
    """What a run is said to have run: a whole summary, or a job's command
    before it runs."""

    command: list[str]


class Located(TypedDict):
    """A run's working directory, against which its files are made relative."""

    cwd: str | None


class CacheKeyRecord(TypedDict):
    """One cache record that names its key (ctmon/report/diff_cache_keys.py)."""

    frame_id: int | None
    cache: str | None  # fx_graph | aot_autograd
    graph: str | None  # forward | backward | inference (FX graph records)
    key: str | None
    components: list[list[str]]  # [attr, hash] pairs
    settings: NotRequired[dict[str, object] | None]  # Inductor/AOTAutograd settings not at default; None: unrecorded


class RunSummary(TypedDict):
    path: str
    paths: NotRequired[list[str]]  # the recordings merged into this run, where it is several (a job's nodes)
    input: str
    command: list[str]
    cwd: str | None
    session_id: str | None
    versions: dict[str, str | None]
    config: dict[str, object]  # torch._dynamo.config's settings in force, and recompile_limit
    compile_calls: list[CompileCall]
    compile: CompileTotals
    cache: Cache
    frames: list[Frame]
    compiles: list[Compile]
    graph_breaks: list[GraphBreak]
    steps: StepBlocks
    gpu_mem_peak_bytes: int | None
    notes: list[Note]
    cache_keys: NotRequired[list[CacheKeyRecord]]  # absent: the run's cache keys are not compared
    # Inductor/AOTAutograd settings (their values are in ``config``): absent or
    # None where the run recorded none (ctmon/report/diff.py: module_settings)
    module_settings: NotRequired[ModuleSettings | None]


class ModuleSettings(TypedDict):
    """What a run's cache records say of its Inductor and AOTAutograd settings
    beyond their values: the defaults they name, and those whose value
    differed between records (the run cannot be said to have one)."""

    defaults: dict[str, object]
    mixed: list[str]


# What pairs a frame, or a graph break, of one run with the other's: its
# file (relative to the run's working directory), line, and name or reason.
FrameKey = tuple[str | None, int | None, str]
BreakKey = tuple[str | None, int | None, str]


class Place(TypedDict):
    """Where an entry new since BASE is, for the findings at that place."""

    file: str | None
    line: int | None


class EntryDetails(TypedDict, total=False):
    """What an entry says beyond its figures, where it has it."""

    file: str | None
    line: int | None
    reason: str
    components: list[str]  # a cache key's components that changed
    settings: list[str]  # the settings inside them that changed (qualified names)
    # how a timing was judged
    ratio_ci: list[float] | None
    paired: int
    change_pct: float
    noise_pct: float
    base_ci: list[float] | None
    new_ci: list[float] | None


class DiffEntry(EntryDetails):
    kind: str
    subject: str
    what: str
    base: object
    new: object


class Side(TypedDict):
    path: str | None
    input: str | None
    command: list[str] | None
    session_id: str | None
    paths: NotRequired[list[str]]  # a run of several recordings (a job's nodes), merged
    modes: NotRequired[list[str]]  # a bench output: the modes it holds


class Verdicts(TypedDict):
    regressions: list[DiffEntry]
    improvements: list[DiffEntry]
    changed: list[DiffEntry]  # neither better nor worse: versions, settings
    unchanged: list[DiffEntry]  # equal, or within the noise


class DiffDoc(Verdicts):
    diff_version: int
    base: Side
    new: Side
    method: dict[str, str]


class BenchEntry(DiffEntry):
    mode: str  # the bench mode whose runs the entry compares


class NotRead(TypedDict):
    side: str  # "base" or "new"
    mode: str
    why: str


class BenchDiffDoc(TypedDict):
    """``ctmon diff BENCH_A BENCH_B --json``: one diff per mode both ran."""

    diff_version: int
    input: str  # "bench"
    base: Side
    new: Side
    modes: dict[str, DiffDoc]
    only_base: list[str]
    only_new: list[str]
    not_read: list[NotRead]
    regressions: list[BenchEntry]
    improvements: list[BenchEntry]
    changed: list[BenchEntry]
    unchanged: list[BenchEntry]
    method: dict[str, str]
