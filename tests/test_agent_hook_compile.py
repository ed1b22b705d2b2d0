"""The hook inside real torch.compile processes: compile events, exactly.

In every test PyTorch's own TORCH_TRACE runs alongside ctmon in the same
process, and ctmon's counts must equal what PyTorch wrote.
"""

from __future__ import annotations

import pytest
from helpers import assert_matches_torch_trace, marker_lines, record, workload

pytestmark = pytest.mark.slow  # real compiled jobs under ctmon record


def def_line(path: str, name: str) -> int:
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if line.startswith(f"def {name}("):
                return i
    raise AssertionError(name)


def test_shape_recompiles_with_reasons(tmp_path):
    run = record(tmp_path, [workload("recompile_shapes.py")])
    assert run.returncode == 0, run.proc.stderr
    rep = run.report()
    assert_matches_torch_trace(rep, run.trace())
    assert rep["compile"]["compiles"] == 3  # seq 8, 12, 16; 12 again hits the cache
    assert rep["compile"]["recompiles"] == 2
    (frame,) = rep["frames"]
    assert frame["name"] == "attention_scores"
    assert frame["file"].endswith("recompile_shapes.py") and frame["line"] == def_line(
        workload("recompile_shapes.py"), "attention_scores"
    )
    assert frame["compiles"] == 3 and frame["entries"] == 3 and not frame["limit_hit"]
    reasons = frame["recompile_reasons"]
    assert len(reasons) == 2
    assert all("size mismatch at index 1" in r for r in reasons), reasons
    assert "expected 8, actual 12" in reasons[0] and "actual 16" in reasons[1]


def test_recompile_limit_hit_is_attributed_to_the_frame(tmp_path):
    run = record(tmp_path, [workload("recompile_limit.py")])
    assert run.returncode == 0, run.proc.stderr
    rep = run.report()
    assert_matches_torch_trace(rep, run.trace())
    c = rep["compile"]
    assert c["limit_hits"] == 1 and c["compiles"] == 4 and c["recompile_limit"] == 3
    (frame,) = rep["frames"]
    # PyTorch's record of the refused compile has no code name: ctmon follows
    # its frame id back to the user's function.
    assert (
        frame["name"] == "pool"
        and frame["line"] == def_line(workload("recompile_limit.py"), "pool")
        and frame["limit_hit"] is True
    )
    assert frame["entries"] == 3
    events = run.events()
    refused = [e for e in events if e["kind"] == "compile" and e.get("fail_type")]
    assert len(refused) == 1 and "co_name" not in refused[0]
    assert refused[0]["fail_reason"].startswith("Dynamo recompile limit exceeded")


def test_graph_breaks_at_user_file_and_line(tmp_path):
    path = workload("graph_breaks.py")
    lines = marker_lines(path)
    run = record(tmp_path, [path])
    assert run.returncode == 0, run.proc.stderr
    rep = run.report()
    assert_matches_torch_trace(rep, run.trace())
    sites = {(b["file"], b["line"]): b for b in rep["graph_breaks"]}
    assert (path, lines["print"]) in sites, sites.keys()
    assert (path, lines["item"]) in sites, sites.keys()
    assert "print" in sites[(path, lines["print"])]["reason"]
    assert "item()" in sites[(path, lines["item"])]["reason"]
    assert rep["compile"]["graph_breaks"] == sum(b["count"] for b in rep["graph_breaks"])
    stack = sites[(path, lines["item"])]["user_stack"]
    assert stack and stack[-1]["line"] == lines["item"] and stack[-1]["name"] == "forward"
    # frames are named after the user's class, resume functions readably
    names = {f["name"] for f in rep["frames"]}
    assert "Net.forward" in names, names
    assert f"forward (resumed at line {lines['print']})" in names, names
    assert rep["steps"]["count"] == 4 and rep["steps"]["source"] == "optimizer"
