"""Advice for a model compiled under DistributedDataParallel, proven by applying it.

``torch.compile(DDP(nn.Sequential(...)))`` compiles nothing of the model:
DDP's forward is excluded from Dynamo on purpose, and the module under it is
compiled as a frame of its own only when its forward is not PyTorch's own
code. ctmon says so in one finding, with the fix that works; the same
workload with that fix applied (``DDP(torch.compile(model))``, a module of
the user's own, or for accelerate the model compiled before ``prepare()``)
compiles the model, and the finding is gone. The workload counts the graphs
Dynamo's DDPOptimizer compiles: the advice says both forms split the graph at
DDP's buckets, and the count shows it. One gloo rank on the CPU, eager backend.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest
from helpers import WORKLOADS
from test_findings import Recorded, record_all
from test_findings_unit import F, Run, library_break, only
from test_whole_ranks import free_port

SCRIPT = os.path.join(WORKLOADS, "advice", "ddp_compile.py")
HAS_ACCELERATE = importlib.util.find_spec("accelerate") is not None
RUNS = {
    "plain": [],
    "inner": ["--inner"],
    "user-module": ["--user-module"],
    "user-module-inner": ["--user-module", "--inner"],
    "method": ["--method"],
    **({"accelerate": ["--accelerate"], "accelerate-inner": ["--accelerate", "--inner"]} if HAS_ACCELERATE else {}),
}


def line_of(marker: str) -> int:
    with open(SCRIPT, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip().endswith(f"# {marker}"))


def ddp_optimizer_compiles(r: Recorded) -> int:
    line = next(x for x in r.run.proc.stdout.splitlines() if x.startswith("ddp_optimizer_compiles "))
    return int(line.split()[1])


def compiled_ops(r: Recorded) -> dict[str, int]:
    """Each frame's title, with the operations its graphs hold."""
    ops = {c["compile_id"]: c["graph_ops"] or 0 for c in r.rep["compiles"]}
    return {f["name"]: sum(ops.get(i, 0) for i in f["compile_ids"]) for f in r.rep["frames"]}


def all_text(r: Recorded) -> str:
    return "\n".join(f"{f['title']}\n{f['detail']}\n{f['fix']}" for f in r.findings)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: Any) -> dict[str, Recorded]:
    jobs = {
        name: {
            "target": [SCRIPT, *flags],
            "env": {
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(free_port()),
                "HF_HOME": str(tmp_path_factory.getbasetemp() / "hf"),  # accelerate reads its config there
            },
            "options": ["-q"],
        }
        for name, flags in RUNS.items()
    }
    return record_all(tmp_path_factory.mktemp("ddp"), jobs)


@pytest.mark.slow
def test_ddp_over_sequential_gets_one_finding_with_the_fix_that_works(runs: dict[str, Recorded]) -> None:
    r = runs["plain"]
    assert r.rep["compile"]["compiles"] > 0 and not any(compiled_ops(r).values())  # nothing of the model compiled
    assert [(sev, fid) for sev, fid, _ in r.loud()] == [("warning", "empty-graphs:ddp")], r.loud()
    (f,) = r.rule("empty-graphs")
    assert "Sequential" in f["title"] and "Sequential" in f["detail"]
    assert "`model = DDP(torch.compile(model))`" in f["fix"]
    assert (f["file"], f["line"]) == (SCRIPT, line_of("COMPILE"))  # the call to change
    # one finding per cause: DDP's intended breaks are its evidence, not a second finding saying the opposite
    assert not [x for x in r.findings if x["id"].startswith("graph-breaks:by-design:ddp")]
    assert any("DDP's bookkeeping breaks the graph" in e for e in f["evidence"])
    assert "Nothing to change" not in all_text(r) and "loses" not in all_text(r)
    (call,) = r.rep["compile_calls"]
    assert (call["target"], call["wraps"], call["wraps_module"]) == (
        "DistributedDataParallel",
        "Sequential",
        "torch.nn.modules.container",
    )


@pytest.mark.slow
def test_ddp_compiled_in_place_gets_the_same_finding(runs: dict[str, Recorded]) -> None:
    r = runs["method"]  # DDP(model).compile()
    assert [(sev, fid) for sev, fid, _ in r.loud()] == [("warning", "empty-graphs:ddp")], r.loud()
    (f,) = r.rule("empty-graphs")
    assert "Sequential" in f["title"] and "`model = DDP(torch.compile(model))`" in f["fix"]
    assert (f["file"], f["line"]) == (SCRIPT, line_of("METHOD"))
    (call,) = r.rep["compile_calls"]
    assert (call["target"], call["wraps"]) == ("DistributedDataParallel._call_impl", "Sequential")


@pytest.mark.slow
def test_the_fix_applied_compiles_the_model_and_keeps_ddps_bucket_split(runs: dict[str, Recorded]) -> None:
    r = runs["inner"]
    assert not r.rule("empty-graphs") and not r.loud(), r.loud()
    assert compiled_ops(r) == {"Sequential": 3}  # two linears and a relu, one frame
    assert r.rep["compile"]["graph_breaks"] == 0
    assert ddp_optimizer_compiles(r) >= 1 and ddp_optimizer_compiles(runs["plain"]) == 0
    (call,) = r.rep["compile_calls"]
    assert (call["target"], call["wraps"]) == ("Sequential", None)


@pytest.mark.slow
def test_a_module_of_the_users_own_under_ddp_is_compiled(runs: dict[str, Recorded]) -> None:
    r = runs["user-module"]
    assert not r.rule("empty-graphs") and not r.loud(), r.loud()
    assert compiled_ops(r)["Net.forward"] > 0
    assert ddp_optimizer_compiles(r) >= 1  # torch.compile(DDP(model)) splits at the buckets too
    (f,) = [x for x in r.findings if x["id"].startswith("graph-breaks:by-design:ddp")]
    assert f["severity"] == "info" and "loses" not in f["fix"]
    assert "`DDP(torch.compile(model))`" in f["fix"] and "breaks and their eager hops are gone" in f["fix"]
    # what that finding says of the other form, applied: no DDP break left, the model compiled
    other = runs["user-module-inner"]
    assert other.rep["compile"]["graph_breaks"] == 0 and not other.rule("graph-breaks")
    assert compiled_ops(other) == {"Net.forward": 3} and ddp_optimizer_compiles(other) >= 1


@pytest.mark.slow
def test_ddps_frames_at_one_line_are_told_apart(runs: dict[str, Recorded]) -> None:
    for name in ("plain", "user-module"):
        titles = [f["name"] for f in runs[name].rep["frames"]]
        assert len(titles) >= 4 and len(set(titles)) == len(titles), titles
        assert "DistributedDataParallel" in titles and "DistributedDataParallel › contextlib.helper" in titles


@pytest.mark.skipif(not HAS_ACCELERATE, reason="accelerate is not installed")
@pytest.mark.slow
def test_accelerates_compile_gets_the_lever_the_user_has(runs: dict[str, Recorded]) -> None:
    r = runs["accelerate"]
    assert [(sev, fid) for sev, fid, _ in r.loud()] == [("warning", "empty-graphs:ddp")], r.loud()
    (f,) = r.rule("empty-graphs")
    assert (f["file"], f["line"]) == (SCRIPT, line_of("PREPARE"))  # the user's line, not accelerate's
    assert "prepare()" in f["fix"] and "`model = torch.compile(model)`" in f["fix"] and "dynamo_backend" in f["fix"]
    assert "Nothing to change" not in all_text(r)
    fixed = runs["accelerate-inner"]  # that lever applied
    assert not fixed.rule("empty-graphs") and not fixed.loud(), fixed.loud()
    assert compiled_ops(fixed) == {"Sequential": 3} and ddp_optimizer_compiles(fixed) >= 1


# ---------------------------------------------------- the rule, on events alone

CONTEXTLIB = "/usr/lib/python3.11/contextlib.py"
DDP_MODULE = "torch.nn.parallel.distributed"


def ddp_run(wraps: tuple[str, str] | None) -> Run:
    """torch.compile(DDP(...)) whose frames are all DDP's bookkeeping, empty."""
    call = {"kind": "compile_call", "target": "DistributedDataParallel", "target_module": DDP_MODULE}
    call.update({"file": F, "line": 12, "backend": "eager"})
    if wraps is not None:
        call["wraps"], call["wraps_module"] = wraps
    r = Run().add(call).steps(1)
    r.compile(0, "helper", file=CONTEXTLIB, line=299, graph_op_count=0)
    library_break(
        r,
        CONTEXTLIB,
        105,
        "Attempted to call function marked as skipped: DistributedDataParallel._inside_ddp_forward",
    )
    return r.compile(1, "__init__", file=CONTEXTLIB, line=104, graph_op_count=0).steps(4)


def test_an_older_recording_without_the_wrapped_class_gets_the_ddp_cause() -> None:
    fs = ddp_run(None).findings()
    f = only(fs, "empty-graphs")
    assert f.id == "empty-graphs:ddp" and "torch.compile(DDP(model))" in f.title
    assert "DDP(torch.compile(model))" in f.fix and "None" not in f.title + f.detail + " ".join(f.evidence)
    assert not [x for x in fs if x.id.startswith("graph-breaks:by-design:ddp")]


def test_a_module_of_the_users_that_compiled_empty_has_another_cause() -> None:
    """DDP compiles a module of the user's own: its empty graph is not DDP's
    doing, so the general finding stays, and DDP's breaks keep their own."""
    fs = ddp_run(("Net", "__main__")).findings()
    assert only(fs, "empty-graphs").id == "empty-graphs"
    assert [x.id for x in fs if x.id.startswith("graph-breaks:by-design")] == ["graph-breaks:by-design:ddp"]
