"""reduce-overhead training with shape changes, under ctmon: CUDA-graph warm-ups,
recordings, re-recordings, replays and skips as ctmon counts them, next to
PyTorch's own counts of the same run. GPU only (CI has none).

Each scenario is a tiny MLP trained with ``torch.compile(mode="reduce-overhead")``
for 12 steps at each of the batch sizes 8, 16, 24, 32 (three shape changes),
run under ``ctmon record -q -o OUT/cg[-SCENARIO].jsonl``:

  shapes         as a user writes it: Dynamo recompiles at the first change and
                 marks the batch dim dynamic; every later size is a new CUDA graph
  mark-dynamic   torch._dynamo.mark_dynamic on the batch dim from the start: no
                 recompile, and still one CUDA graph recorded per size
  padded         the fix: each batch padded to 32 rows, padding masked out of the
                 loss: one graph, recorded once
  skip-dynamic   torch._inductor.config.triton.cudagraph_skip_dynamic_graphs=True:
                 the dynamic graph is not recorded -- and runs without CUDA graphs;
                 torch 2.11 counts no skip for it (ctmon says so: cudagraphs-unused)

PyTorch's side, read in the job at its end: ``counters["inductor"]``
(``cudagraph_skips``), the timer PyTorch keeps per recording
(``compilation_time_metrics["CUDAGraphNode.record"]``), and the tree manager's
own state (graph ids handed out, functions warmed up, the recorded nodes by
compile and graph kind). The job also captures, around PyTorch's
``run_eager``/``record_function`` (outside ctmon's wrappers), what ctmon's
observer reads there -- the raw records tests/test_findings_cudagraphs.py replays on a
machine without a GPU.

Usage (PYTHONPATH must reach msgspec, for the driver's read of the recordings):
  python benchmarks/gpu/cudagraph_check.py [--out DIR] [--fixtures DIR] [--scenarios a,b]
The first scenario's recording is OUT/cg.jsonl (OUT defaults to /tmp). Seen on an
H200 (torch 2.11): 70 s for all four, run side by side, and the replay-cost arm.
Prints one table per scenario (ctmon | PyTorch) and the findings; exit 1 when a
count differs or a finding is not what the scenario expects. --fixtures DIR
also writes the recordings and DIR/cudagraph_raw.json for the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

from ctmon.findings.current import findings_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIOS = ("shapes", "mark-dynamic", "padded", "skip-dynamic")
SIZES = (8, 16, 24, 32)
STEPS_PER_SIZE = 12
WIDTH = 64
REPLAYS = 20_000  # replays timed per round and arm (replay_cost)


# ------------------------------------------------------------------ the job


def _capture_raw(ct: Any, raw: list[dict[str, Any]]) -> None:
    """Record what ctmon's observer reads around the manager's warm-up and
    recording calls, wrapping PyTorch's methods (ctmon's wrappers inside)."""
    cls = ct.CUDAGraphTreeManager

    def wrap(name: str) -> None:
        inner = getattr(cls, name)

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            new_inputs, fid = args[0], args[1]
            wrapped = self.ids_to_funcs.get(fid)
            cid = getattr(self, "id_to_compile_id", {}).get(fid)
            rec: dict[str, Any] = {
                "method": name,
                "t": time.time(),
                "function_id": fid.id,
                "already_warm": fid in self.warmed_up_functions,
                "compile_id": None if cid is None else str(cid),
                "mode": self.id_to_mode[fid].name,
                "device_index": self.device_index,
                "static_input_idxs": sorted(int(i) for i in getattr(wrapped, "static_input_idxs", ())),
                "inputs": [
                    {"int": x} if isinstance(x, int) else {"shape": list(x.shape)} if hasattr(x, "shape") else {}
                    for x in new_inputs
                ],
            }
            out = inner(self, *args, **kwargs)
            node_id = getattr(getattr(self.current_node, "id", None), "id", None)
            rec["graph_id_after"] = node_id if isinstance(node_id, int) else None
            raw.append(rec)
            return out

        setattr(cls, name, method)

    wrap("run_eager")
    wrap("record_function")


def _count(it: Any) -> int:
    return int(repr(it)[len("count(") : -1])  # itertools.count, read without advancing it


def _pytorch_side(torch: Any, ct: Any) -> dict[str, Any]:
    from torch._dynamo.utils import compilation_time_metrics, counters

    side: dict[str, Any] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "counters_inductor": {k: v for k, v in counters["inductor"].items() if "cudagraph" in k},
        "record_timer": len(compilation_time_metrics.get("CUDAGraphNode.record", [])),
        "ctmon_wrapped": getattr(ct.CUDAGraphTreeManager.execute_node, "__ctmon_wrapped__", None) is not None,
    }
    try:
        manager = ct.get_manager(torch.cuda.current_device(), create_if_none_exists=False)
    except TypeError:
        manager = None
    if manager is None:
        return side
    nodes = []
    todo = [n for ns in manager.roots.values() for n in ns]  # every recorded CUDAGraphNode
    while todo:
        n = todo.pop()
        nodes.append(n)
        todo.extend(c for cs in n.children.values() for c in cs)
    by_graph: Counter[str] = Counter()
    by_frame: Counter[str] = Counter()
    for n in nodes:
        fid = n.wrapped_function.id
        cid = getattr(manager, "id_to_compile_id", {}).get(fid)
        mode = manager.id_to_mode[fid].name.lower()
        by_graph[f"{cid} {mode}"] += 1
        by_frame[f"{getattr(cid, 'frame_id', cid)} {mode}"] += 1
    side.update(recorded_nodes=len(nodes), nodes_by_graph=dict(by_graph), nodes_by_frame=dict(by_frame))
    reads = {
        "graph_counter": lambda: _count(manager.graph_counter),
        "func_counter": lambda: _count(manager.func_counter),
        "warmed_up_functions": lambda: len(manager.warmed_up_functions),
        "unexpected_rerecords": lambda: sum(sum(d.values()) for d in manager.num_rerecord.values()),
    }
    for name, read in reads.items():  # a torch that lacks one still reports the others
        try:
            side[name] = read()
        except Exception as e:
            side[name] = f"unknown: {e!r}"
    return side


def rerecords_of_calls(raw: list[dict[str, Any]]) -> int:
    """Re-recordings as ctmon defines them (ctmon/findings/cudagraphs.py:
    a frame's recordings beyond the first of each kind of graph, the first
    being its first compile's graph at its first size key, in as many
    recordings as it has partitions), from the arguments PyTorch passed to
    ``record_function`` -- captured outside ctmon's wrappers."""
    first: dict[tuple[str, str], tuple[Any, ...]] = {}
    base: dict[tuple[str, str], set[int]] = {}
    recordings: Counter[tuple[str, str]] = Counter()
    for r in raw:
        if r["method"] != "record_function":
            continue
        cid = str(r["compile_id"])
        frame = cid.rsplit("/", 1)[0]
        static = set(r["static_input_idxs"])
        ints = [x["int"] for i, x in enumerate(r["inputs"]) if i not in static and "int" in x][:8]
        key = (frame, r["mode"])
        instance = (cid, *ints)
        first.setdefault(key, instance)
        if first[key] == instance:
            base.setdefault(key, set()).add(r["function_id"])
        recordings[key] += 1
    return sum(n - len(base[key]) for key, n in recordings.items())


def _source_checks(ct: Any) -> dict[str, bool]:
    import inspect

    import torch._inductor.config as cfg
    import torch._inductor.cudagraph_utils as cu

    trees, utils = inspect.getsource(ct), inspect.getsource(cu)
    return {
        "re_recording_debug_log": "Re-recording function" in trees,
        "symint_key_info_log": "Recording cudagraph tree for symint key" in trees,
        "record_timer": '"CUDAGraphNode.record"' in trees,
        "dynamic_shape_warning": "padding inputs to a few fixed number of shapes" in utils,
        "cudagraph_skip_dynamic_graphs": hasattr(cfg.triton, "cudagraph_skip_dynamic_graphs"),
        "cudagraph_capture_sizes": hasattr(cfg.triton, "cudagraph_capture_sizes"),
        "cudagraph_unexpected_rerecord_limit": hasattr(cfg.triton, "cudagraph_unexpected_rerecord_limit"),
    }


def replay_cost(out: str) -> None:
    """Host time of a replayed call with ctmon's replay counter and without
    it, alternating, in a process of its own (no ctmon record: the observer
    is installed as the agent installs it)."""
    sys.path.insert(0, ROOT)
    import torch
    from torch._inductor import cudagraph_trees as ct

    from ctmon.agent.cudagraphs import CudagraphObserver, install

    install(ct, CudagraphObserver(lambda ev: None))
    cls = ct.CUDAGraphTreeManager
    counted = cls.execute_node
    plain = counted.__ctmon_wrapped__
    f = torch.compile(lambda x: x * 2 + 1, mode="reduce-overhead")
    x = torch.randn(16, device="cuda")
    for _ in range(10):
        f(x)
    per: dict[str, list[float]] = {"counted": [], "plain": []}
    for _ in range(5):
        for name, method in (("counted", counted), ("plain", plain)):
            cls.execute_node = method
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(REPLAYS):
                f(x)
            torch.cuda.synchronize()
            per[name].append((time.perf_counter() - t0) / REPLAYS * 1e9)
    cls.execute_node = counted
    with open(out, "w") as f:
        json.dump({name: sorted(v) for name, v in per.items()}, f)


def job(scenario: str, out: str) -> None:
    import torch
    from torch._inductor import cudagraph_trees as ct  # ctmon's hook wraps it here

    raw: list[dict[str, Any]] = []
    _capture_raw(ct, raw)
    if scenario == "skip-dynamic":
        torch._inductor.config.triton.cudagraph_skip_dynamic_graphs = True
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, 128), torch.nn.GELU(), torch.nn.Linear(128, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    cmodel = torch.compile(model, mode="reduce-overhead")
    calls = 0
    for b in SIZES:
        for _ in range(STEPS_PER_SIZE):
            x = torch.randn(b, WIDTH, device="cuda")
            y = torch.randn(b, 1, device="cuda")
            if scenario == "mark-dynamic":
                torch._dynamo.mark_dynamic(x, 0)
            if scenario == "padded":
                pad = SIZES[-1] - b
                xp = torch.cat([x, x.new_zeros(pad, WIDTH)]) if pad else x
                loss = (cmodel(xp)[:b] - y).pow(2).mean()  # the padded rows leave the loss
            else:
                loss = (cmodel(x) - y).pow(2).mean()
            calls += 1
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    side = _pytorch_side(torch, ct)
    side.update(scenario=scenario, forward_calls=calls, source=_source_checks(ct), raw=raw)
    side["rerecords"] = rerecords_of_calls(raw)
    with open(out, "w") as f:
        json.dump(side, f, indent=1)


# ------------------------------------------------------------------ the driver


def _recording(out_dir: str, scenario: str) -> str:
    return os.path.join(out_dir, "cg.jsonl" if scenario == "shapes" else f"cg-{scenario}.jsonl")


def _run(scenario: str, out_dir: str, cache: str) -> subprocess.Popen[str]:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    side = os.path.join(out_dir, f"pytorch-{scenario}.json")
    cmd = [sys.executable, "-m", "ctmon", "record", "-q", "-o", _recording(out_dir, scenario)]
    cmd += [os.path.abspath(__file__), "--job", scenario, "--pytorch", side]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _ctmon_side(path: str) -> tuple[dict[str, Any], list[Any]]:
    sys.path.insert(0, ROOT)
    from ctmon.findings.cudagraphs import rerecord_count, rerecorded_frames
    from ctmon.read.load import load

    s, _ = load(path)
    cg = s.cudagraphs
    counts = {
        "by_graph": {f"{g.compile_id} {g.graph}": g.recordings for g in cg.graphs.values() if g.recordings},
        "steps": s.steps.count,
        "warmups": cg.warmups_total,
        "recordings": cg.recordings_total,
        "rerecords": sum(rerecord_count(gs) for gs in rerecorded_frames(s).values()),
        "again": cg.again,
        "replays": cg.replays,
        "eager": cg.eager,
        "coverage": None if cg.coverage is None else round(cg.coverage, 4),
        "skips": sum(s.compile.cudagraph_skips.values()),
    }
    return counts, findings_of(s)


def _compare(scenario: str, ctmon: dict[str, Any], torch_side: dict[str, Any], findings: list[Any]) -> list[str]:
    """What does not hold, as lines."""
    bad = []
    pairs = [
        ("recordings", ctmon["recordings"], torch_side.get("record_timer")),
        ("recordings (graph ids)", ctmon["recordings"], torch_side.get("graph_counter")),
        ("warm-ups", ctmon["warmups"], torch_side.get("warmed_up_functions")),
        ("re-recordings", ctmon["rerecords"], torch_side.get("rerecords")),
        ("skips", ctmon["skips"], torch_side.get("counters_inductor", {}).get("cudagraph_skips", 0)),
    ]
    if "nodes_by_graph" in torch_side and ctmon["by_graph"] != torch_side["nodes_by_graph"]:
        bad.append(f"recordings by graph: ctmon {ctmon['by_graph']} != PyTorch's nodes {torch_side['nodes_by_graph']}")
    for name, mine, theirs in pairs:
        if theirs is not None and mine != theirs:
            bad.append(f"{name}: ctmon {mine} != PyTorch {theirs}")
    calls = 2 * torch_side.get("forward_calls", 0)  # a forward and a backward graph call per step
    if scenario != "skip-dynamic" and ctmon["coverage"] is not None:
        expected = calls - ctmon["warmups"] - ctmon["recordings"] - ctmon["eager"]
        if ctmon["replays"] != expected:
            bad.append(f"replays: ctmon {ctmon['replays']} != graph calls - warm-ups - recordings - eager {expected}")
    by_id = {f.id: f for f in findings}
    unexplained = by_id.get("spikes:other")
    if unexplained is not None and ("CUDA graph" in " ".join(unexplained.evidence)):
        bad.append("a CUDA-graph step is left 'not explained by compiles'")
    # re-recorded for new sizes: what padding ends and mark_dynamic does not
    for_sizes = [f for f in findings if f.id.startswith("cudagraphs-rerecorded:") and "new input size" in f.title]
    want = scenario in ("shapes", "mark-dynamic")
    if bool(for_sizes) != want:
        bad.append(f"re-recording finding for new sizes {'missing' if want else 'present'}")
    if scenario == "skip-dynamic" and not any(
        f.id.startswith("cudagraphs-unused:") or (f.rule == "cudagraphs" and "skipped" in f.title) for f in findings
    ):
        bad.append("the dynamic graph's compile runs without CUDA graphs, and no finding says so")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", choices=(*SCENARIOS, "cost"))
    ap.add_argument("--pytorch", help="(the job) where to write PyTorch's side")
    ap.add_argument("--out", default="/tmp")
    ap.add_argument("--fixtures", help="also write the recordings and cudagraph_raw.json here")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = ap.parse_args()
    if args.job == "cost":
        replay_cost(args.pytorch)
        return 0
    if args.job:
        job(args.job, args.pytorch)
        return 0
    scenarios = [s for s in args.scenarios.split(",") if s]
    os.makedirs(args.out, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="cg-inductor-")
    t0 = time.time()
    # the scenarios share the GPU: counts, not timings, are compared
    procs = {sc: _run(sc, args.out, cache) for sc in scenarios}
    failed = 0
    raw_all: dict[str, Any] = {}
    for sc, p in procs.items():
        log, _ = p.communicate(timeout=900)
        print(f"=== {sc}: ctmon record exit {p.returncode} ({time.time() - t0:.0f} s)")
        if p.returncode != 0:
            print(log[-3000:])
            failed += 1
            continue
        with open(os.path.join(args.out, f"pytorch-{sc}.json")) as f:
            side = json.load(f)
        raw_all[sc] = side
        try:
            mine, findings = _ctmon_side(_recording(args.out, sc))
        except Exception as e:  # the recordings still go to --fixtures
            print(f"MISMATCH {sc}: ctmon could not read its recording: {e!r}")
            failed += 1
            continue
        print(f"{'':24} {'ctmon':>10} {'PyTorch':>10}")
        rows = [
            ("recordings", mine["recordings"], f"{side.get('record_timer')} / ids {side.get('graph_counter')}"),
            ("warm-ups", mine["warmups"], side.get("warmed_up_functions")),
            ("re-recordings", mine["rerecords"], side.get("rerecords")),
            # PyTorch's num_rerecord leaves out re-recordings for a static input's new address
            ("recorded again / unexpected", mine["again"], side.get("unexpected_rerecords")),
            ("skips", mine["skips"], side.get("counters_inductor", {}).get("cudagraph_skips", 0)),
            ("replays", mine["replays"], "-"),
            ("eager during warm-up", mine["eager"], "-"),
            ("coverage", mine["coverage"], "-"),
            ("steps", mine["steps"], side.get("forward_calls")),
        ]
        for name, a, b in rows:
            print(f"{name:24} {a!s:>10} {b!s:>10}")
        print(f"PyTorch: {side.get('torch')} on {side.get('device')}; nodes {side.get('nodes_by_graph')}")
        print(f"sources: {side.get('source')}")
        for f in findings:
            print(f"[{f.severity}] {f.title}")
            for e in f.evidence[:6]:
                print(f"    - {e}")
            if f.fix:
                print(f"    fix: {f.fix}")
        bad = _compare(sc, mine, side, findings)
        for line in bad:
            print(f"MISMATCH {sc}: {line}")
        failed += bool(bad)
    # alone on the GPU: the host cost of counting replays
    cost_file = os.path.join(args.out, "replay-cost.json")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
    cost = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--job", "cost", "--pytorch", cost_file],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if cost.returncode == 0:
        with open(cost_file) as f:
            raw_all["replay_cost_ns"] = json.load(f)
        print(f"replay host ns, 5 rounds of {REPLAYS} (counted, plain): {raw_all['replay_cost_ns']}")
    else:
        print(f"replay cost: exit {cost.returncode}: {cost.stderr[-1500:]}")
    if args.fixtures:
        os.makedirs(args.fixtures, exist_ok=True)
        for sc in scenarios:
            if os.path.exists(_recording(args.out, sc)):
                shutil.copy(
                    _recording(args.out, sc), os.path.join(args.fixtures, os.path.basename(_recording(args.out, sc)))
                )
        with open(os.path.join(args.fixtures, "cudagraph_raw.json"), "w") as f:
            json.dump(raw_all, f, indent=1)
    shutil.rmtree(cache, ignore_errors=True)
    print("OK" if not failed else f"{failed} scenario(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
