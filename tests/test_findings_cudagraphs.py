"""mode="reduce-overhead": CUDA-graph warm-ups, recordings, re-recordings and
replays, from PyTorch's own CUDA-graph trees (ctmon/agent/cudagraphs.py).

CI has no GPU. The recordings in tests/fixtures/cudagraphs/ were made on an
H200 (torch 2.11, CUDA 13) by benchmarks/gpu/cudagraph_check.py: a tiny MLP
trained with reduce-overhead at batch sizes 8, 16, 24, 32 (12 steps each)
under ``ctmon record``, in four variants -- as a user writes it (``shapes``),
with ``torch._dynamo.mark_dynamic`` on the batch dim, with each batch padded
to 32 (the fix), and with ``cudagraph_skip_dynamic_graphs=True``.
h200_raw.json holds PyTorch's own side of each run, read in the job: its
counters, its timer of recordings, the tree manager's state, and the
arguments of every ``run_eager``/``record_function`` call, captured outside
ctmon's wrappers.
"""

from __future__ import annotations

import enum
import importlib.util
import json
import os
import types
from dataclasses import dataclass
from typing import Any

import pytest
from helpers import ROOT, record

from ctmon.agent.cudagraphs import CudagraphObserver, install
from ctmon.findings.cudagraphs import rerecord_count, rerecorded_frames, runs_in_steps
from ctmon.findings.current import findings_of
from ctmon.read.load import load
from ctmon.store.session import Session
from ctmon.wire.decode import Decoder

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "cudagraphs")
SCENARIOS = {"shapes": "h200_shapes", "mark-dynamic": "h200_mark_dynamic", "padded": "h200_padded"}
SCENARIOS["skip-dynamic"] = "h200_skip_dynamic"


def _check_script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "cudagraph_check", os.path.join(ROOT, "benchmarks", "gpu", "cudagraph_check.py")
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


with open(os.path.join(FIXTURES, "h200_raw.json"), encoding="utf-8") as _f:
    PYTORCH: dict[str, Any] = json.load(_f)


def session(scenario: str) -> Session:
    s, _ = load(os.path.join(FIXTURES, SCENARIOS[scenario] + ".jsonl"))
    return s


def by_id(s: Session) -> dict[str, Any]:
    return {f.id: f for f in findings_of(s)}


# ---- counts: ctmon's against PyTorch's own, on the GPU runs ----


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_counts_equal_pytorchs_own(scenario: str) -> None:
    s, side = session(scenario), PYTORCH[scenario]
    cg = s.cudagraphs
    # every graph PyTorch recorded (its CUDAGraphNodes, by compile and kind), and no other
    assert {f"{g.compile_id} {g.graph}": g.recordings for g in cg.graphs.values() if g.recordings} == side[
        "nodes_by_graph"
    ]
    # compilation_time_metrics["CUDAGraphNode.record"]: one entry per recording; graph ids handed out
    assert cg.recordings_total == cg.recordings == side["record_timer"] == side["graph_counter"]
    assert cg.warmups_total == cg.warmups == side["warmed_up_functions"]
    assert sum(s.compile.cudagraph_skips.values()) == side["counters_inductor"].get("cudagraph_skips", 0)
    rerecords = sum(rerecord_count(gs) for gs in rerecorded_frames(s).values())
    assert rerecords == _check_script().rerecords_of_calls(side["raw"])
    assert s.steps.count == side["forward_calls"] == 48


@pytest.mark.parametrize("scenario", ["shapes", "mark-dynamic", "padded"])
def test_every_graph_call_is_counted_once(scenario: str) -> None:
    """A step calls the forward graph and the backward graph once each: every
    call is a warm-up, a recording, an eager run or a replay."""
    cg, side = session(scenario).cudagraphs, PYTORCH[scenario]
    assert cg.counted and cg.replays > 0
    assert cg.replays + cg.eager + cg.warmups_total + cg.recordings_total == 2 * side["forward_calls"]
    assert cg.coverage == pytest.approx(cg.replays / (2 * side["forward_calls"]))


# ---- slow steps ----


@pytest.mark.parametrize("scenario", ["shapes", "mark-dynamic", "padded", "skip-dynamic"])
def test_warmup_and_recording_steps_are_explained_as_such(scenario: str) -> None:
    s = session(scenario)
    fs = by_id(s)
    series = s.steps.current
    assert series is not None
    boundaries = runs_in_steps(s.cudagraphs.runs, series.times, range(1, len(series)))
    with_graph_work = {series.number(k) for k in boundaries}  # as the findings number steps
    assert with_graph_work, "the run warmed up and recorded graphs"
    other = fs.get("spikes:other")
    if other is not None:  # a slow step left unexplained holds no CUDA-graph work
        named = {int(e.split(":")[0].removeprefix("step ")) for e in other.evidence}
        assert not named & with_graph_work
    graphs = fs["spikes:cudagraphs"]
    assert graphs.severity == "info" and "warmed up or recorded CUDA graphs" in graphs.title
    assert "check the data" not in graphs.fix.lower() and "DataLoader" not in graphs.fix
    assert any("recorded Sequential [0/0]: forward" in e for e in graphs.evidence)


def test_new_sizes_name_the_steps_and_the_graphs() -> None:
    fs = by_id(session("shapes"))
    ev = fs["spikes:cudagraphs"].evidence
    # the first recording, one step after the first compile's warm-up; then each new size
    assert any(e.startswith("step 2: ") and "recorded Sequential [0/0]: forward 8×64, backward 8×1" in e for e in ev)
    assert any(e.startswith("step 26: ") and "recorded Sequential [0/1]: forward 24×64" in e for e in ev)
    assert any(e.startswith("step 25: ") and "warmed up Sequential [0/1]: forward 24×64" in e for e in ev)
    # the warm-up of 16 rode on the recompile's step: a compile explains it
    assert fs["spikes:compile"].evidence[0].startswith("step 13: ")


# ---- re-recordings, and the fix that works ----


@pytest.mark.parametrize("scenario", ["shapes", "mark-dynamic"])
def test_rerecordings_for_new_sizes(scenario: str) -> None:
    (f,) = [f for f in findings_of(session(scenario)) if f.id.startswith("cudagraphs-rerecorded:")]
    assert f.title == "CUDA graphs re-recorded 6× for Sequential (3 new input sizes: 16×64; 24×64; 32×64)"
    assert f.severity == "warning"  # after the steady start: each one stalled the loop
    assert f.file.endswith("cudagraph_check.py") and f.line == 225
    assert any("replayed 80 of the 96 graph calls" in e for e in f.evidence)
    # what works: padding; what does not: mark_dynamic (this very run, in mark-dynamic)
    assert "Pad the inputs to a few bucket sizes" in f.fix
    assert "torch._dynamo.mark_dynamic or dynamic=True do not avoid this" in f.fix
    assert "cudagraph_skip_dynamic_graphs = True" in f.fix and "gives up reduce-overhead's speed-up" in f.fix


def test_mark_dynamic_does_not_avoid_rerecording() -> None:
    """mark_dynamic removes the recompile, not the recordings: the same 8."""
    plain, marked = session("shapes"), session("mark-dynamic")
    assert plain.compile.recompile_count == 1 and marked.compile.recompile_count == 0
    assert plain.cudagraphs.recordings == marked.cudagraphs.recordings == 8
    (g_fwd,) = [g for g in marked.cudagraphs.graphs.values() if g.graph == "forward"]
    assert g_fwd.dynamic and g_fwd.sizes == ["8×64", "16×64", "24×64", "32×64"]


def test_padding_ends_the_rerecordings() -> None:
    """The fix applied: every batch padded to 32, the padding masked out of the loss."""
    s = session("padded")
    fs = by_id(s)
    assert not [i for i in fs if i.startswith("cudagraphs-")]
    assert s.cudagraphs.recordings == 2 < session("shapes").cudagraphs.recordings  # one forward, one backward
    assert s.cudagraphs.coverage is not None and s.cudagraphs.coverage > session("shapes").cudagraphs.coverage


def test_skip_dynamic_graphs_runs_them_without_cuda_graphs_and_says_so() -> None:
    """cudagraph_skip_dynamic_graphs=True: no recording for the new sizes, and
    the dynamic graph runs without CUDA graphs -- with no skip in PyTorch's
    counter (torch 2.11), which ctmon says rather than show a clean run."""
    s = session("skip-dynamic")
    fs = findings_of(s)
    assert not [f for f in fs if f.id.startswith("cudagraphs-rerecorded:") and "new input size" in f.title]
    (unused,) = [f for f in fs if f.id.startswith("cudagraphs-unused:")]
    assert unused.title == "CUDA graphs not used for 1 compile of Sequential, and PyTorch gave no reason"
    assert unused.evidence[0].startswith("0/1: recompiled: 0/0: tensor 'args[0]' size mismatch")
    assert "cudagraph_skip_dynamic_graphs = True" in unused.fix and "padding the inputs" in unused.fix
    # Inductor partitioned this run's backward in two; PyTorch then recorded both again twice
    (again,) = [f for f in fs if f.id.startswith("cudagraphs-rerecorded:")]
    assert again.title == "CUDA graphs re-recorded 4× for Sequential (same input sizes)"
    assert again.severity == "info" and 'TORCH_LOGS="+cudagraphs"' in again.fix


def test_recordings_decode_strictly() -> None:
    dec = Decoder()
    for name in SCENARIOS.values():
        with open(os.path.join(FIXTURES, name + ".jsonl"), "rb") as f:
            lines = [ln for ln in f if ln.strip()]
        assert len(dec.decode_all(lines)) == len(lines)
    assert (dec.bad, dict(dec.unknown)) == (0, {})


# ---- the agent's observer, fed what PyTorch passed on the GPU ----


class CompilationMode(enum.Enum):  # torch/_inductor/cudagraph_trees.py: CompilationMode
    FORWARD = enum.auto()
    BACKWARD = enum.auto()
    INFERENCE = enum.auto()


@dataclass(frozen=True)
class FunctionID:  # torch/_inductor/cudagraph_trees.py: FunctionID (a dataclass of one int)
    id: int


@dataclass(frozen=True)
class GraphID:
    id: int


@dataclass
class Shaped:
    shape: tuple[int, ...]


class TreeManager:
    """The attributes of CUDAGraphTreeManager the observer reads (torch 2.11-2.13:
    ``warmed_up_functions``, ``id_to_compile_id``, ``id_to_mode``,
    ``ids_to_funcs[fid].static_input_idxs``, ``device_index``, and
    ``current_node.id`` after ``record_function``), set from one captured call."""

    def __init__(self) -> None:
        self.warmed_up_functions: set[FunctionID] = set()
        self.id_to_compile_id: dict[FunctionID, str] = {}
        self.id_to_mode: dict[FunctionID, CompilationMode] = {}
        self.ids_to_funcs: dict[FunctionID, Any] = {}
        self.device_index = 0
        self.current_node: Any = None
        self.next_graph_id = -1

    def run_eager(self, new_inputs: list[Any], function_id: FunctionID) -> str:
        self.warmed_up_functions.add(function_id)
        new_inputs.clear()  # PyTorch empties the list as it runs
        return "out"

    def record_function(self, new_inputs: list[Any], function_id: FunctionID) -> str:
        self.current_node = types.SimpleNamespace(id=GraphID(self.next_graph_id))
        new_inputs.clear()
        return "out"

    def execute_node(self, node: Any, new_inputs: list[Any]) -> str:
        return "replayed"


def _replay(raw: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], CudagraphObserver]:
    sent: list[dict[str, Any]] = []
    obs = CudagraphObserver(sent.append)
    module = types.ModuleType("cudagraph_trees")
    module.CUDAGraphTreeManager = type("CUDAGraphTreeManager", (TreeManager,), {})  # type: ignore[attr-defined]
    assert install(module, obs)
    m = module.CUDAGraphTreeManager()  # type: ignore[attr-defined]
    for r in raw:
        fid = FunctionID(r["function_id"])
        m.id_to_compile_id[fid] = r["compile_id"]
        m.id_to_mode[fid] = CompilationMode[r["mode"]]
        m.ids_to_funcs[fid] = types.SimpleNamespace(static_input_idxs=r["static_input_idxs"])
        m.device_index = r["device_index"]
        if r["already_warm"]:
            m.warmed_up_functions.add(fid)
        inputs = [x["int"] if "int" in x else Shaped(tuple(x["shape"])) for x in r["inputs"]]
        if r["method"] == "run_eager":
            assert m.run_eager(inputs, fid) == "out"
        else:
            m.next_graph_id = r["graph_id_after"]
            assert m.record_function(inputs, fid) == "out"
        assert inputs == []  # the call got the very list
    return sent, obs


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_observer_gives_the_recorded_events_from_pytorchs_calls(scenario: str) -> None:
    sent, obs = _replay(PYTORCH[scenario]["raw"])
    with open(os.path.join(FIXTURES, SCENARIOS[scenario] + ".jsonl"), encoding="utf-8") as f:
        recorded = [json.loads(ln) for ln in f if '"cudagraph_tree"' in ln]
    on_gpu = [e for e in recorded if e["event"] != "counts"]
    strip = lambda e: {k: v for k, v in e.items() if k not in ("t", "dur_s")}  # noqa: E731
    assert [strip(e) for e in sent] == [strip(e) for e in on_gpu]
    last = [e for e in recorded if e["event"] == "counts"][-1]
    assert (obs.warmups, obs.recordings, obs.eager) == (last["warmups"], last["recordings"], last["eager"])


def test_replays_are_counted_in_c_and_sent_as_counts() -> None:
    sent, obs = _replay(PYTORCH["padded"]["raw"])
    cls = type("M", (TreeManager,), {})
    module = types.ModuleType("m")
    module.CUDAGraphTreeManager = cls  # type: ignore[attr-defined]
    install(module, obs)
    m = cls()
    for _ in range(5):
        assert m.execute_node(None, []) == "replayed"
    assert type(cls.execute_node).__name__ == "_lru_cache_wrapper"  # no Python frame per replay
    (counts,) = obs.final()
    assert (counts["event"], counts["replays"], counts["warmups"], counts["recordings"]) == ("counts", 5, 2, 2)
    assert obs.final() == [] and obs.counts() == []  # nothing new: nothing sent


def test_a_torch_whose_manager_differs_is_left_alone() -> None:
    """A manager without one of the three methods (a future torch): nothing
    wrapped, so nothing half-counted."""
    cls = type(
        "CUDAGraphTreeManager", (), {"run_eager": TreeManager.run_eager, "execute_node": TreeManager.execute_node}
    )
    module = types.ModuleType("m")
    module.CUDAGraphTreeManager = cls  # type: ignore[attr-defined]
    assert not install(module, CudagraphObserver(lambda ev: None))
    assert cls.run_eager is TreeManager.run_eager and cls.execute_node is TreeManager.execute_node


def test_store_takes_the_agents_counts_where_events_were_lost() -> None:
    s = Session()
    s.apply({"kind": "cudagraph_tree", "t": 1.0, "event": "counts", "replays": 90, "warmups": 4, "recordings": 6})
    cg = s.cudagraphs
    assert (cg.warmups_total, cg.recordings_total, cg.calls) == (4, 6, 100)
    assert cg.coverage == 0.9
    assert not findings_of(s)  # counts alone name no graph


# ---- the hook in a real job (CPU: the trees' module imports, nothing runs on a GPU) ----

JOB = r"""
import torch
from torch._inductor import cudagraph_trees as ct
m = ct.CUDAGraphTreeManager
print("wrapped", [getattr(getattr(m, n), "__ctmon_wrapped__", None) is not None
                  for n in ("run_eager", "record_function", "execute_node")])
# PyTorch's method runs as it would: its own error, unchanged, on a machine without CUDA
fake = object.__new__(m)
for method in (m.record_function, m.record_function.__ctmon_wrapped__):
    try:
        method(fake, [], None)
    except Exception as e:
        print("raised", type(e).__name__)
torch._dynamo.reset()
f = torch.compile(lambda x: x.sin() + 1, backend="eager")
for _ in range(3):
    f(torch.randn(4))
print("done")
"""


@pytest.mark.slow
def test_agent_wraps_the_trees_when_the_job_imports_them(tmp_path) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    run = record(tmp_path, [str(script)], torch_trace=False)
    assert run.returncode == 0, run.proc.stderr[-2000:]
    out = run.proc.stdout
    assert "wrapped [True, True, True]" in out
    raised = [ln for ln in out.splitlines() if ln.startswith("raised")]
    assert len(raised) == 2 and raised[0] == raised[1]
    assert "done" in out
    with open(run.recording, encoding="utf-8") as f:
        assert '"cudagraph_tree"' not in f.read()  # no graph reached the trees: nothing to say


@pytest.mark.parametrize(
    "ev",
    [
        {"event": "record"},  # nothing known but the kind of event
        {"event": "warmup", "dur_s": -1.0, "function_id": -5, "shapes": [[]], "ints": []},
        {"event": "record", "compile_id": "9/9", "graph": None, "dur_s": 1e300, "shapes": [[0] * 8] * 8},
        {"event": "counts", "replays": -3, "warmups": 2},
        {"event": "something newer", "replays": 4},
    ],
)
def test_odd_events_fold_and_analyse_without_error(ev: dict[str, Any]) -> None:
    from ctmon.findings import analyze

    s = session("shapes")
    for _ in range(2):  # the same function twice: recorded again
        s.apply({"kind": "cudagraph_tree", "t": s.last_t or 1.0, **ev})
    assert s.bad_events == 0
    analyze(s, strict=True)
