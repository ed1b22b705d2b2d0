"""The session store, the report built from it and its text rendering.

Events here mirror what ``ctmon record`` writes for tests/workloads/*.py
(values copied from real recordings, irrelevant fields trimmed).
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from ctmon.report.build import build_report
from ctmon.report.text import exit_text, full_text, summary_lines
from ctmon.store import Session
from ctmon.store.compiles import display_name, is_limit_hit
from ctmon.store.output import MAX_LINE_CHARS, OutputBuffer
from ctmon.store.step_stats import percentile
from ctmon.store.steps import StepSeries
from ctmon.wire import protocol
from ctmon.words.units import ms_or_s, seconds

T0 = 1795346334.0
GB = "/work/main/tests/workloads/graph_breaks.py"
RL = "/work/main/tests/workloads/recompile_limit.py"


def run(*events) -> Session:
    s = Session()
    for ev in events:
        s.apply(ev)
    assert s.bad_events == 0, "fixture events must all be well-formed"
    return s


def steps(src: str, i0: int, t: float, ns: list[int]) -> dict:
    return {"kind": "steps", "t": t, "src": src, "i0": i0, "ns": ns}


# ----------------------------------------------------------- real-like events

SESSION_EV = {
    "kind": "session",
    "t": 1795346328.5086753,
    "v": 1,
    "ctmon": "0.1.0",
    "id": "20261122-111848-recompile_limit-5965",
    "mode": "record",
    "command": ["python", RL],
    "cwd": "/tmp",
    "host": "vm",
    "pid": 5965,
    "job_pid": 5967,
    "recording": "/tmp/rec/recompile_limit.jsonl",
}
PROCESS_EV = {
    "kind": "process",
    "t": 1795346328.705449,
    "pid": 5967,
    "ppid": 5965,
    "python": "3.11.7",
    "argv": [RL],
    "step_ring": "/tmp/ctmon-0/x/steps-5967.ring",
}
TORCH_EV = {
    "kind": "torch",
    "t": 1795346331.2417254,
    "torch": "2.13.0+cpu",
    "cuda": None,
    "hip": None,
    "triton": None,
    "cache_dir": "/tmp/torchinductor_root",
    "cache_entries": {"fx_graph": 0, "aot_autograd": 0},
}


def _start(cid: str, fid: int, t: float, **kw) -> dict:
    ev = {
        "kind": "compile_start",
        "t": t,
        "compile_id": cid,
        "frame_id": fid,
        "name": "pool",
        "file": RL,
        "line": 7,
        "user": {"file": RL, "line": 7, "name": "pool"},
        "user_code": True,
        "recompile_limit": 3,
    }
    ev.update(kw)
    return ev


def _metrics(cid: str, fid: int, t: float, **kw) -> dict:
    ev = {
        "kind": "compile",
        "t": t,
        "compile_id": cid,
        "frame_id": fid,
        "co_name": "pool",
        "co_filename": RL,
        "co_firstlineno": 7,
        "guard_count": 8,
        "graph_op_count": 1,
        "has_guarded_code": True,
        "recompile_limit": 3,
    }
    ev.update(kw)
    return ev


LIMIT_REASON = (
    "Dynamo recompile limit exceeded\n  Explanation: Dynamo attempted to recompile the code object too many "
    "times, exceeding the recompile_limit cache size limit (currently set to 3). Excessive recompilations can "
    "degrade performance due to the compilation overhead of each recompilation.\n  Hint: To monitor "
    "recompilations, enable TORCH_LOGS=recompiles.\n\n  Developer debug context: Limit type: recompile_limit\n"
)

RECOMPILE_LIMIT_RUN = [
    SESSION_EV,
    PROCESS_EV,
    TORCH_EV,
    _start("0/0", 0, 1795346334.1535442),
    steps("compiled_call", 0, 1795346334.1390638, [0]),
    _metrics(
        "0/0", 0, 1795346334.4340715, cache_size=0, entire_frame_compile_time_s=0.279183, start_time=1795346334.148159
    ),
    {
        "kind": "recompile_reasons",
        "t": 1795346334.4448988,
        "compile_id": "0/1",
        "frame_id": 0,
        "reasons": ["0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3"],
    },
    _start("0/1", 0, 1795346334.4454584),
    steps("compiled_call", 1, 1795346334.4400895, [301019627]),
    _metrics(
        "0/1",
        0,
        1795346334.5748556,
        cache_size=1,
        entire_frame_compile_time_s=0.131773,
        start_time=1795346334.440868,
        recompile_reason="0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3",
    ),
    {
        "kind": "recompile_reasons",
        "t": 1795346334.577188,
        "compile_id": "0/2",
        "frame_id": 0,
        "reasons": [
            "0/1: tensor 'x' size mismatch at index 0. expected 3, actual 4",
            "0/0: tensor 'x' size mismatch at index 0. expected 2, actual 4",
        ],
    },
    _start("0/2", 0, 1795346334.5775795),
    steps("compiled_call", 2, 1795346334.5760975, [136008204]),
    _metrics(
        "0/2",
        0,
        1795346334.6225348,
        cache_size=2,
        entire_frame_compile_time_s=0.043618,
        start_time=1795346334.57682,
        recompile_reason="0/1: tensor 'x' size mismatch at index 0. expected 3, actual 4",
    ),
    {
        "kind": "recompile_reasons",
        "t": 1795346334.6247594,
        "compile_id": "0/3",
        "frame_id": 0,
        "reasons": [
            "0/2: tensor 'x' size mismatch at index 0. expected 4, actual 5",
            "0/1: tensor 'x' size mismatch at index 0. expected 3, actual 5",
            "0/0: tensor 'x' size mismatch at index 0. expected 2, actual 5",
        ],
    },
    steps("compiled_call", 3, 1795346334.6237214, [47623666]),
    # refused by the limit: no compile_start, no code name -- only frame_id says which frame
    {
        "kind": "compile",
        "t": 1795346334.629645,
        "compile_id": "0/3",
        "frame_id": 0,
        "entire_frame_compile_time_s": 0.003193,
        "fail_type": "Unsupported",
        "fail_reason": LIMIT_REASON,
        "recompile_reason": "0/2: tensor 'x' size mismatch at index 0. expected 4, actual 5",
        "start_time": 1795346334.624469,
        "recompile_limit": 3,
    },
    {"kind": "output", "t": 1795346334.631904, "stream": "stdout", "data": "ok"},
    steps("compiled_call", 4, 1795346334.6315641, [7842248, 154179, 57656]),
    {"kind": "output", "t": 1795346334.632038, "stream": "stdout", "data": "\n"},
    {"kind": "exit", "t": 1795346336.2857952, "code": 0, "signal": None},
]


def _gb(cid, fid, t, line, summary, reason, **kw):
    ev = {
        "kind": "graph_break",
        "t": t,
        "compile_id": cid,
        "frame_id": fid,
        "file": GB,
        "line": line,
        "summary": summary,
        "reason": reason,
        "user_stack": [
            {"file": GB, "line": 21, "name": "<module>", "code": "loss = net(torch.randn(4, 8)).sum()"},
            {"file": GB, "line": line, "name": "forward", "code": 'print("forward")'},
        ],
    }
    ev.update(kw)
    return ev


PRINT_GB = dict(
    summary="Failed to trace builtin operator: print",
    reason="Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):\n\n"
    "Failed to trace builtin operator\n  Explanation: Dynamo does not know how to trace builtin operator "
    "`print` with argument types ['str'] (has_kwargs False)",
    explanation="Dynamo does not know how to trace builtin operator `print` with argument types ['str'] (has_kwargs False)",
    hints=[
        "Avoid calling builtin `print` with argument types ['str'].",
        "If you are attempting to call a logging function (e.g. `print`), you can try adding it to "
        "`torch._dynamo.config.reorderable_logging_functions`.",
        "Please report an issue to PyTorch.",
    ],
    url="https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0059.html",
    gb_id="gb0059",
)
ITEM_GB = dict(
    summary="Unsupported Tensor.item() call with capture_scalar_outputs=False",
    reason="Unsupported Tensor.item() call with capture_scalar_outputs=False\n  Explanation: Dynamo does not "
    "support tracing `Tensor.item()` with config.capture_scalar_outputs=False.",
    explanation="Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False.",
    hints=["Set `torch._dynamo.config.capture_scalar_outputs = True`"],
    url="https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0124.html",
    gb_id="gb0124",
)


def _gstart(cid, fid, t, name, line):
    return {
        "kind": "compile_start",
        "t": t,
        "compile_id": cid,
        "frame_id": fid,
        "name": name,
        "file": GB,
        "line": line,
        "user": {"file": GB, "line": line, "name": name},
        "user_code": True,
        "module": "Net",
        "module_file": GB,
        "module_line": 11,
        "module_user": True,
        "recompile_limit": 8,
    }


def _gmetrics(cid, fid, t, name, line, time_s, start, **kw):
    ev = {
        "kind": "compile",
        "t": t,
        "compile_id": cid,
        "frame_id": fid,
        "co_name": name,
        "co_filename": GB,
        "co_firstlineno": line,
        "cache_size": 0,
        "entire_frame_compile_time_s": time_s,
        "start_time": start,
        "has_guarded_code": True,
        "recompile_limit": 8,
    }
    ev.update(kw)
    return ev


GRAPH_BREAK_RUN = [
    dict(SESSION_EV, command=["python", GB], id="20261122-111837-graph_breaks-5458"),
    _gstart("0/0", 0, 1795346323.7613435, "forward", 11),
    steps("compiled_call", 0, 1795346323.7490203, [0]),
    _gb("0/0", 0, 1795346323.9358277, 13, **PRINT_GB),
    _gmetrics("0/0", 0, 1795346325.7964473, "forward", 11, 2.038372, 1795346323.755088),
    {"kind": "output", "t": 1795346325.817597, "stream": "stdout", "data": "forward\n"},
    _gstart("1/0", 1, 1795346325.8194396, "torch_dynamo_resume_in_forward_at_13", 13),
    _gb("1/0", 1, 1795346325.847679, 14, **ITEM_GB),
    _gmetrics("1/0", 1, 1795346326.0256214, "torch_dynamo_resume_in_forward_at_13", 13, 0.204562, 1795346325.818719),
    _gstart("2/0", 2, 1795346326.0494308, "torch_dynamo_resume_in_forward_at_14", 14),
    _gmetrics("2/0", 2, 1795346326.2327676, "torch_dynamo_resume_in_forward_at_14", 14, 0.181228, 1795346326.048822),
    {
        "kind": "bwd_compile",
        "t": 1795346326.2446904,
        "compile_id": "2/0",
        "frame_id": 2,
        "duration_us": 3817,
        "start_time": 1795346326.238723,
    },
    {
        "kind": "bwd_compile",
        "t": 1795346326.2514348,
        "compile_id": "0/0",
        "frame_id": 0,
        "duration_us": 2622,
        "start_time": 1795346326.246419,
    },
    steps("optimizer", 0, 1795346326.2573838, [0]),
    {
        "kind": "recompile_reasons",
        "t": 1795346326.26116,
        "compile_id": "2/1",
        "frame_id": 2,
        "reasons": ["2/0: ___stack0 == 1.725206971168518  # return self.b(h) / (1.0 + scale)"],
    },
    _gstart("2/1", 2, 1795346326.261589, "torch_dynamo_resume_in_forward_at_14", 14),
    _gmetrics(
        "2/1",
        2,
        1795346326.6475875,
        "torch_dynamo_resume_in_forward_at_14",
        14,
        0.384716,
        1795346326.260481,
        cache_size=1,
        recompile_reason="2/0: ___stack0 == 1.725206971168518  # return self.b(h) / (1.0 + scale)",
    ),
    {
        "kind": "bwd_compile",
        "t": 1795346326.6575363,
        "compile_id": "2/1",
        "frame_id": 2,
        "duration_us": 3432,
        "start_time": 1795346326.651771,
    },
    steps("optimizer", 1, 1795346326.6587284, [401344649, 2548385]),
    steps("optimizer", 3, 1795346326.6629324, [1656210]),
    {"kind": "exit", "t": 1795346328.3107936, "code": 0, "signal": None},
]


# ------------------------------------------------------------------ compiles


def test_compile_pairing_start_then_metrics():
    s = run(SESSION_EV, _start("0/0", 0, T0 + 0.1))
    assert s.state == "compiling"
    assert "0/0" in s.compile.active
    s.apply(_metrics("0/0", 0, T0 + 0.4, cache_size=0, entire_frame_compile_time_s=0.25, start_time=T0 + 0.12))
    assert s.compile.active == {}
    assert s.state == "running"
    (rec,) = s.compile.compiles
    assert rec.compile_id == "0/0" and rec.frame_id == 0
    assert rec.ok and not rec.is_recompile and not rec.limit_hit
    assert rec.start_t == pytest.approx(T0 + 0.12)
    assert rec.span == pytest.approx((T0 + 0.12, T0 + 0.37))
    assert rec.guards == 8 and rec.graph_ops == 1
    f = s.compile.frames[0]
    assert (f.loc.file, f.loc.line, f.title) == (RL, 7, "pool")
    assert f.entries == 1
    assert s.compile.compile_count == 1 and s.compile.total_time_s == pytest.approx(0.25)
    assert s.log[-1].kind == "compile" and "0/0" in s.log[-1].text and "pool" in s.log[-1].text


def test_compile_start_time_falls_back_to_the_start_event():
    s = run(_start("0/0", 0, T0 + 1.0), _metrics("0/0", 0, T0 + 2.0, entire_frame_compile_time_s=0.5))
    assert s.compile.compiles[0].start_t == pytest.approx(T0 + 1.0)


def test_interleaved_compiles_pair_by_compile_id():
    s = run(
        _start("0/0", 0, T0 + 1.0),
        _start("1/0", 1, T0 + 2.0, name="inner", line=30),
        _metrics("1/0", 1, T0 + 2.5, co_name="inner", co_firstlineno=30, entire_frame_compile_time_s=0.4),
        _metrics("0/0", 0, T0 + 3.0, entire_frame_compile_time_s=1.9),
    )
    recs = {r.compile_id: r for r in s.compile.compiles}
    assert recs["0/0"].start_t == pytest.approx(T0 + 1.0)
    assert recs["1/0"].start_t == pytest.approx(T0 + 2.0)
    assert s.compile.frames[1].title == "inner"
    assert s.compile.active == {}


def test_metrics_without_frame_id_use_the_start_events():
    ev = _metrics("4/0", None, T0 + 1.0, entire_frame_compile_time_s=0.1)
    del ev["frame_id"]
    s = run(_start("4/0", 4, T0), ev)
    assert list(s.compile.frames) == [4]
    assert s.compile.compiles[0].frame_id == 4


def test_recompile_limit_run():
    s = run(*RECOMPILE_LIMIT_RUN)
    cs = s.compile
    assert list(cs.frames) == [0], "the refused compile has no start and no name, yet it is frame 0's"
    f = cs.frames[0]
    assert [c.compile_id for c in f.compiles] == ["0/0", "0/1", "0/2", "0/3"]
    assert f.title == "pool"
    assert f.limit_hit
    assert f.entries == 3
    assert f.recompile_limit == 3 and cs.recompile_limit == 3
    assert cs.compile_count == 4 and cs.recompile_count == 3
    assert cs.limit_hits == 1 and cs.failures == 0
    assert cs.active == {}
    last = f.compiles[-1]
    assert last.limit_hit and not last.ok
    # guard failures merged by compile id, oldest reason list for the right compile
    assert f.compiles[0].guard_failures == []
    assert f.compiles[1].guard_failures == ["0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3"]
    assert len(f.compiles[2].guard_failures) == 2
    assert len(last.guard_failures) == 3
    assert cs._reasons == {}
    crit = [e for e in s.log if e.kind == "limit"]
    assert len(crit) == 1 and crit[0].severity == "critical" and RL in crit[0].text
    assert [e.kind for e in s.log].count("recompile") == 2
    assert s.state == "exited"

    r = build_report(s)
    assert r["compile"]["limit_hits"] == 1 and r["compile"]["recompiles"] == 3
    (fr,) = r["frames"]
    assert fr["limit_hit"] is True and fr["name"] == "pool" and fr["file"] == RL and fr["line"] == 7
    assert fr["compiles"] == 4 and fr["recompiles"] == 3
    assert fr["recompile_reasons"] == [
        "0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3",
        "0/1: tensor 'x' size mismatch at index 0. expected 3, actual 4",
        "0/2: tensor 'x' size mismatch at index 0. expected 4, actual 5",
    ]
    assert fr["compile_ids"] == ["0/0", "0/1", "0/2", "0/3"]
    text = full_text(r)
    assert "LIMIT HIT" in text
    assert "3 compiles, 2 recompiles + 1 refused at the recompile limit (3)" in text


def test_limit_hit_for_a_frame_never_seen_before():
    s = run(
        {
            "kind": "compile",
            "t": T0,
            "compile_id": "7/8",
            "frame_id": 7,
            "entire_frame_compile_time_s": 0.001,
            "fail_type": "Unsupported",
            "fail_reason": LIMIT_REASON,
        }
    )
    f = s.compile.frames[7]
    assert f.limit_hit and f.title == "?"
    assert s.compile.limit_hits == 1
    assert build_report(s)["frames"][0]["limit_hit"] is True


@pytest.mark.parametrize(
    "reason, hit",
    [
        (LIMIT_REASON, True),
        ("cache_size_limit reached for function f", True),
        ("torch._dynamo hit config.recompile_limit (8)", True),
        ("Recompile limit exceeded", True),
        ("Unsupported: data-dependent operator", False),
        ("recompile limit", False),  # names the limit but says nothing was hit
        (None, False),
        (42, False),
    ],
)
def test_is_limit_hit(reason, hit):
    assert is_limit_hit("Unsupported", reason) is hit


def test_failed_compile_that_is_not_a_limit_hit():
    s = run(
        _start("0/0", 0, T0),
        _metrics(
            "0/0",
            0,
            T0 + 1,
            fail_type="BackendCompilerFailed",
            fail_reason="backend='inductor' raised:\nRuntimeError: boom",
        ),
    )
    assert s.compile.failures == 1 and s.compile.limit_hits == 0
    assert not s.compile.frames[0].limit_hit
    assert s.compile.frames[0].entries == 0
    assert s.log[-1].kind == "error" and "BackendCompilerFailed" in s.log[-1].text and "boom" not in s.log[-1].text


def test_recompile_reason_without_a_reasons_event():
    s = run(_metrics("0/1", 0, T0, recompile_reason="0/0: x changed"))
    assert s.compile.compiles[0].guard_failures == ["0/0: x changed"]


def test_graph_break_run():
    s = run(*GRAPH_BREAK_RUN)
    cs = s.compile
    assert cs.compile_count == 4 and cs.recompile_count == 1 and cs.graph_break_count == 2
    assert cs.bwd_compiles == 3
    assert cs.bwd_time_s == pytest.approx((3817 + 2622 + 3432) / 1e6)
    assert cs.recompile_limit == 8
    titles = {fid: f.title for fid, f in cs.frames.items()}
    assert titles == {0: "Net.forward", 1: "forward (resumed at line 13)", 2: "forward (resumed at line 14)"}
    # graph breaks are counted against the compile they happened in
    recs = {c.compile_id: c for c in cs.compiles}
    assert recs["0/0"].graph_breaks == 1 and recs["1/0"].graph_breaks == 1 and recs["2/0"].graph_breaks == 0
    assert s.steps.source == "optimizer" and s.steps.count == 4

    r = build_report(s)
    assert [(b["line"], b["count"]) for b in r["graph_breaks"]] == [(13, 1), (14, 1)]
    b13 = r["graph_breaks"][0]
    assert b13["reason"] == "Failed to trace builtin operator: print"
    assert b13["file"] == GB and b13["url"].endswith("gb0059.html")
    assert b13["user_stack"][-1]["line"] == 13
    assert r["compile"]["total_time_s"] == pytest.approx(2.038372 + 0.204562 + 0.181228 + 0.384716 + 0.009871, abs=2e-3)
    assert r["compile"]["backward_compiles"] == 3
    assert r["frames"][0]["name"] == "forward (resumed at line 14)" and r["frames"][0]["compiles"] == 2
    text = full_text(r)
    assert f"{GB}:13  ×1  Failed to trace builtin operator: print" in text
    assert "Net.forward" in text


def test_graph_break_sites_group_by_file_and_line():
    evs = [_gb(f"{i}/0", i, T0 + i, 13, **PRINT_GB) for i in range(3)]
    evs.append(_gb("3/0", 3, T0 + 3, 14, **ITEM_GB))
    evs.append(_gb("4/0", 4, T0 + 4, 13, **dict(PRINT_GB, summary="Failed to trace builtin operator: print")))
    evs.append(_gb("5/0", 5, T0 + 5, 13, **dict(PRINT_GB, summary="Some other wording")))
    s = run(*evs)
    cs = s.compile
    assert cs.graph_break_count == 6
    assert set(cs.breaks) == {(GB, 13), (GB, 14)}
    site = cs.breaks[(GB, 13)]
    assert site.count == 5
    assert site.reason == "Failed to trace builtin operator: print", "the most common summary names the site"
    assert site.reasons["Some other wording"] == 1
    assert site.compile_ids == ["0/0", "1/0", "2/0", "4/0", "5/0"]
    assert site.frame_ids == {0, 1, 2, 4, 5}
    assert site.first_t == pytest.approx(T0) and site.last_t == pytest.approx(T0 + 5)
    assert site.explanation and site.hints and site.gb_id == "gb0059"
    assert [b.count for b in cs.breaks_sorted()] == [5, 1]
    assert [e.kind for e in s.log].count("graph_break") == 6
    r = build_report(s)
    assert r["compile"]["graph_breaks"] == 6
    assert sum(b["count"] for b in r["graph_breaks"]) == 6


def test_graph_break_site_compile_ids_are_bounded():
    s = run(*[_gb(f"0/{i}", 0, T0 + i, 13, **PRINT_GB) for i in range(200)])
    site = s.compile.breaks[(GB, 13)]
    assert site.count == 200
    assert len(site.compile_ids) <= s.compile.MAX_SITE_IDS


def test_graph_break_with_no_location():
    s = run(
        {
            "kind": "graph_break",
            "t": T0,
            "compile_id": "0/0",
            "frame_id": 0,
            "file": None,
            "line": None,
            "reason": "something odd",
        },
        _gb("1/0", 1, T0, 13, **PRINT_GB),
    )
    r = build_report(s)
    assert {b["file"] for b in r["graph_breaks"]} == {None, GB}
    assert "something odd" in full_text(r)


def test_graph_break_with_a_malformed_location_is_refused_whole():
    """A graph_break whose file is not a string (corrupt or hand-written
    recording) is not an event: refused where it enters, counted, and the
    report is built from the rest."""
    s = Session()
    s.apply({"kind": "graph_break", "t": T0, "compile_id": "0/0", "frame_id": 0, "file": 17, "line": 3, "reason": "x"})
    s.apply(_gb("1/0", 1, T0, 13, **PRINT_GB))
    assert s.bad_events == 1
    r = build_report(s)
    assert r["compile"]["graph_breaks"] == 1
    full_text(r)


def test_caches_and_bypass_reasons():
    evs = []
    for cache, result, n in [
        ("fx_graph", "hit", 3),
        ("fx_graph", "miss", 2),
        ("aot_autograd", "hit", 1),
        ("aot_autograd", "miss", 4),
    ]:
        evs += [
            {
                "kind": "cache",
                "t": T0,
                "compile_id": "0/0",
                "frame_id": 0,
                "cache": cache,
                "result": result,
                "key": "fhc3gkefcmik",
                "detail": "hit",
            }
            for _ in range(n)
        ]
    evs += [
        {
            "kind": "cache",
            "t": T0,
            "compile_id": "0/0",
            "cache": "fx_graph",
            "result": "bypass",
            "reason": "Can't cache HigherOrderOperators.",
        },
        {
            "kind": "cache",
            "t": T0,
            "compile_id": "1/0",
            "cache": "fx_graph",
            "result": "bypass",
            "reason": "Can't cache HigherOrderOperators.",
        },
        {
            "kind": "cache",
            "t": T0,
            "compile_id": "1/0",
            "cache": "aot_autograd",
            "result": "bypass",
            "reason": "Cannot cache a graph with compiled autograd enabled",
        },
        # time saved counts once, from the AOTAutograd hit that includes the FX graphs below it
        {"kind": "cache", "t": T0, "cache": "aot_autograd", "result": "hit", "time_saved_s": 24.225},
        {"kind": "cache", "t": T0, "cache": "fx_graph", "result": "hit", "time_saved_s": 22.2},
        # ignored: a result this version does not know
        {"kind": "cache", "t": T0, "cache": "fx_graph", "result": "disabled"},
    ]
    s = run(*evs)
    s.apply({"kind": "cache", "t": T0, "cache": 3, "result": "hit"})  # not an event: refused whole
    assert s.bad_events == 1
    cs = s.compile
    assert cs.cache["fx_graph"].as_dict() == {"hit": 4, "miss": 2, "bypass": 2}
    assert cs.cache["aot_autograd"].as_dict() == {"hit": 2, "miss": 4, "bypass": 1}
    assert cs.bypass_reasons == {
        "fx_graph: Can't cache HigherOrderOperators.": 2,
        "aot_autograd: Cannot cache a graph with compiled autograd enabled": 1,
    }
    assert cs.time_saved_s == pytest.approx(24.225)
    r = build_report(s)
    assert r["cache"]["fx_graph"] == {"hit": 4, "miss": 2, "bypass": 2}
    assert r["cache"]["aot_autograd"] == {"hit": 2, "miss": 4, "bypass": 1}
    assert r["cache"]["bypass_reasons"][0] == {"reason": "fx_graph: Can't cache HigherOrderOperators.", "count": 2}
    assert r["cache"]["time_saved_s"] == pytest.approx(24.225)
    log = [e.text for e in s.log if e.kind == "cache"]
    assert any("bypass" in x and "HigherOrderOperators" in x for x in log)
    text = full_text(r)
    assert "FX graph     4 hit  2 miss  2 bypass" in text
    lines = summary_lines(r)
    assert any("FX graph 4 hit / 2 miss / 2 bypass" in x for x in lines)


def test_autotune_and_cudagraph_skips():
    s = run(
        {
            "kind": "autotune",
            "t": T0,
            "compile_id": "0/0",
            "kernels": [
                {"name": "triton_poi_0", "autotune_cache_state": "hit"},
                {"name": "k1", "cached": True},
                {"name": "k2", "autotune_cache_state": "miss"},
            ],
        },
        {"kind": "cudagraph", "t": T0, "reason": "skipping cudagraphs due to mutated inputs"},
        _metrics("0/0", 0, T0, cudagraph_skip_reason="skipping cudagraphs due to cpu device"),
    )
    s.apply({"kind": "autotune", "t": T0, "compile_id": "1/0", "kernels": ["junk"]})  # not an event
    assert s.bad_events == 1
    r = build_report(s)
    assert r["cache"]["autotune"] == {"kernels": 3, "cached": 2}
    assert {x["reason"] for x in r["cudagraphs"]["skips"]} == {
        "skipping cudagraphs due to mutated inputs",
        "skipping cudagraphs due to cpu device",
    }


def test_display_name():
    assert display_name("torch_dynamo_resume_in_forward_at_13") == "forward (resumed at line 13)"
    assert display_name("torch_dynamo_resume_in_my_fn_2_at_7") == "my_fn_2 (resumed at line 7)"
    assert display_name("forward") == "forward"
    assert display_name(None) is None


def test_module_compiled_through_torch_wrapper_points_at_the_user():
    # torch.compile(module) with a torch module class: Dynamo compiles torch's wrapper
    s = run(
        {
            "kind": "compile_start",
            "t": T0,
            "compile_id": "0/0",
            "frame_id": 0,
            "name": "inner",
            "file": "/venv/site-packages/torch/_dynamo/external_utils.py",
            "line": 67,
            "user": {"file": "/w/train.py", "line": 7, "name": "<module>", "code": "loss = cm(x).sum()"},
            "user_code": False,
            "module": "Sequential",
            "module_file": "/venv/site-packages/torch/nn/modules/container.py",
            "module_line": 240,
            "module_user": False,
        }
    )
    f = s.compile.frames[0]
    assert (f.loc.file, f.loc.line, f.title) == ("/w/train.py", 7, "Sequential")
    assert f.code.name == "inner"
    # the user's own nn.Module: point at its forward()
    s = run(
        {
            "kind": "compile_start",
            "t": T0,
            "compile_id": "0/0",
            "frame_id": 0,
            "name": "inner",
            "file": "/venv/site-packages/torch/_dynamo/external_utils.py",
            "line": 67,
            "user_code": False,
            "module": "Net",
            "module_file": "/w/model.py",
            "module_line": 12,
            "module_user": True,
        }
    )
    f = s.compile.frames[0]
    assert (f.loc.file, f.loc.line, f.title) == ("/w/model.py", 12, "Net.forward")


# ---------------------------------------------------------------------- steps


def test_steps_single_source():
    s = run(steps("optimizer", 0, T0, [0, 10_000_000, 20_000_000]), steps("optimizer", 3, T0 + 0.03, [30_000_000]))
    assert s.steps.source == "optimizer" and s.steps.count == 4
    ser = s.steps.current
    assert list(ser.times) == pytest.approx([T0, T0 + 0.01, T0 + 0.03, T0 + 0.03])
    st = ser.stats()
    assert st.count == 4 and st.intervals == 3
    assert (st.min_ms, st.max_ms, st.last_ms) == pytest.approx((10.0, 30.0, 30.0))
    assert st.mean_ms == pytest.approx(20.0) and st.steps_per_s == pytest.approx(50.0)


def test_step_sources_precedence():
    s = run(steps("compiled_call", 0, T0, [0, 5_000_000, 5_000_000]))
    assert s.steps.source == "compiled_call" and s.steps.count == 3
    s.apply(steps("optimizer", 0, T0 + 1, [0, 20_000_000]))
    assert s.steps.source == "optimizer" and s.steps.count == 2
    assert set(s.steps.series) == {"optimizer"}, "lower-ranked series are dropped"
    rev = dict(s.rev)
    s.apply(steps("compiled_call", 3, T0 + 2, [5_000_000]))  # outranked now: ignored
    assert s.steps.count == 2 and set(s.steps.series) == {"optimizer"}
    assert dict(s.rev) == rev
    s.apply(steps("api", 0, T0 + 3, [0, 1_000_000, 1_000_000, 1_000_000]))
    assert s.steps.source == "api" and s.steps.count == 4
    s.apply(steps("optimizer", 2, T0 + 4, [20_000_000]))
    assert s.steps.source == "api" and s.steps.count == 4
    assert build_report(s)["steps"]["source"] == "api"


@pytest.mark.parametrize(
    "ev",
    [
        steps("gpu_magic", 0, T0, [0, 1]),
        {"kind": "steps", "t": T0, "src": "optimizer", "i0": 0, "ns": "0,1"},
        {"kind": "steps", "t": T0, "src": "optimizer", "i0": -1, "ns": [0, 1]},
        {"kind": "steps", "t": T0, "src": "optimizer", "i0": "0", "ns": [0, 1]},
        {"kind": "steps", "t": T0, "src": None, "ns": [0, 1]},
    ],
)
def test_malformed_steps_are_ignored(ev):
    s = Session()
    s.apply(ev)
    assert s.steps.count == 0 and s.rev["steps"] == 0


def test_duplicate_steps_batch_is_ignored():
    a = steps("optimizer", 0, T0, [0, 10_000_000])
    s = run(a, a)
    assert s.steps.count == 2


def test_dropped_boundaries_leave_a_gap():
    s = run(
        steps("optimizer", 0, T0, [0, 1_000_000, 1_000_000]), steps("optimizer", 10, T0 + 5, [0, 2_000_000, 2_000_000])
    )
    ser = s.steps.current
    assert s.steps.count == 13
    assert ser.intervals() == pytest.approx([1.0, 1.0, 2.0, 2.0]), "no interval spans the gap"
    assert all(b >= a for a, b in zip(ser.times, ser.times[1:], strict=False)), "times stay sorted through the gap"
    st = ser.stats()
    assert st.intervals == 4 and st.count == 13
    assert build_report(s)["steps"]["count"] == 13


def test_device_windows_override_host_intervals():
    s = run(steps("optimizer", 0, T0, [0] + [10_000_000] * 8))
    assert s.steps.current.stats().p50_ms == pytest.approx(10.0)
    rev = s.rev["steps"]
    s.apply({"kind": "device_time", "t": T0 + 1, "src": "optimizer", "i0": 0, "i1": 4, "ms": 8.0})
    assert s.rev["steps"] == rev + 1
    ser = s.steps.current
    assert ser.intervals() == pytest.approx([2.0] * 4 + [10.0] * 4)
    st = ser.stats()
    assert st.min_ms == pytest.approx(2.0) and st.p50_ms == pytest.approx(6.0)
    r = build_report(s)
    assert r["steps"]["device_timed"] is True
    assert "device-timed" in full_text(r)


@pytest.mark.parametrize(
    "ev",
    [
        {"kind": "device_time", "t": T0, "src": "api", "i0": 0, "i1": 2, "ms": 1.0},  # no such series
        {"kind": "device_time", "t": T0, "src": "optimizer", "i0": 3, "i1": 3, "ms": 1.0},
        {"kind": "device_time", "t": T0, "src": "optimizer", "i0": 3, "i1": 1, "ms": 1.0},
        {"kind": "device_time", "t": T0, "src": "optimizer", "i0": 0, "i1": 2, "ms": -1.0},
        {"kind": "device_time", "t": T0, "src": "optimizer", "i0": 0, "i1": 2, "ms": "1"},
        {"kind": "device_time", "t": T0, "src": "optimizer", "i0": "0", "i1": 2, "ms": 1.0},
        {"kind": "device_time", "t": T0, "src": "optimizer", "i0": -2, "i1": 1, "ms": 3.0},  # negative index
    ],
    ids=["no-series", "empty", "reversed", "negative-ms", "str-ms", "str-i0", "negative-i0"],
)
def test_bad_device_windows_change_nothing(ev):
    s = run(steps("optimizer", 0, T0, [0] + [10_000_000] * 4))
    s.apply(ev)
    assert s.steps.current.intervals() == pytest.approx([10.0] * 4)
    assert s.steps.current.device_windows == 0


def test_device_window_that_arrives_before_its_steps():
    """The agent sends device windows over its socket; boundaries travel
    through the ring and are drained by the supervisor after it has handled
    socket data, so a window may be applied before the steps it covers (the
    recording keeps that order). It must still override those intervals."""
    s = run(steps("optimizer", 0, T0, [0, 10_000_000, 10_000_000]))  # boundaries 0..2
    s.apply({"kind": "device_time", "t": T0 + 0.03, "src": "optimizer", "i0": 1, "i1": 4, "ms": 6.0})
    s.apply(steps("optimizer", 3, T0 + 0.03, [10_000_000, 10_000_000, 10_000_000]))  # boundaries 3..5
    assert s.steps.current.intervals() == pytest.approx([10.0, 2.0, 2.0, 2.0, 10.0])


def test_wall_times_stay_exact_at_high_step_rates():
    """100k boundaries/s: summing deltas onto a ~1.8e9 s float loses up to
    half an ulp (~0.12 us) per step, so a long batch drifts by milliseconds
    and the next batch starts 'before' the previous one ended."""
    t0 = 1795346681.0
    n = 100_000
    s = run(steps("api", 0, t0, [0] + [10_000] * (n - 1)))
    ser = s.steps.current
    assert ser.times[-1] - t0 == pytest.approx((n - 1) * 10e-6, abs=1e-6)
    s.apply(steps("api", n, t0 + n * 10e-6, [10_000] * 10))
    assert all(b >= a for a, b in zip(ser.times, ser.times[1:], strict=False)), "times must stay sorted"


def test_percentile_matches_numpy_on_edge_sizes():
    assert percentile([], 0.5) is None
    assert percentile([3.0], 0.9) == 3.0
    for vals in ([1.0, 2.0], [1.0, 2.0, 4.0], [0.5, 0.5, 0.5, 9.0]):
        for q in (0.0, 0.1, 0.5, 0.9, 0.99, 1.0):
            assert percentile(vals, q) == pytest.approx(np.percentile(vals, q * 100))


@pytest.mark.parametrize("seed", range(6))
def test_step_stats_match_numpy(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 3000)
    deltas = [rng.randint(1, 50_000_000) for _ in range(n - 1)]
    if seed % 2:
        deltas = [d if rng.random() > 0.05 else d * 100 for d in deltas]  # compile-time outliers
    # split into batches, as the supervisor does
    s = Session()
    i = 0
    ns = [0] + deltas
    while i < n:
        k = rng.randint(1, 200)
        s.apply(steps("optimizer", i, T0 + i, ns[i : i + k]))
        i += k
    # intervals are stored as float32 (16 bytes a step in all): 7 significant digits
    ms = (np.array(deltas) / 1e6).astype(np.float32).astype(np.float64)
    st = s.steps.current.stats()
    assert st.count == n and st.intervals == n - 1
    for got, q in ((st.p50_ms, 50), (st.p90_ms, 90), (st.p99_ms, 99)):
        assert got == pytest.approx(np.percentile(ms, q), rel=1e-9)
    assert st.mean_ms == pytest.approx(ms.mean(), rel=1e-7)
    assert st.min_ms == pytest.approx(ms.min()) and st.max_ms == pytest.approx(ms.max())
    w = s.steps.current.stats(window=50)
    assert w.p50_ms == pytest.approx(np.percentile(ms[-50:], 50), rel=1e-9)  # same float32 values
    assert w.intervals == min(50, n - 1)
    r = build_report(s)
    assert r["steps"]["p50_ms"] == pytest.approx(np.percentile(ms, 50), abs=1e-4)
    assert r["steps"]["p90_ms"] == pytest.approx(np.percentile(ms, 90), abs=1e-4)
    assert r["steps"]["mean_ms"] == pytest.approx(ms.mean(), abs=1e-4)


def test_stats_cache_follows_new_steps_and_windows():
    s = run(steps("optimizer", 0, T0, [0, 10_000_000, 10_000_000]))
    assert s.steps.current.stats().max_ms == pytest.approx(10.0)
    s.apply(steps("optimizer", 3, T0 + 1, [50_000_000]))
    assert s.steps.current.stats().max_ms == pytest.approx(50.0)
    s.apply({"kind": "device_time", "t": T0, "src": "optimizer", "i0": 2, "i1": 3, "ms": 1.0})
    assert s.steps.current.stats().max_ms == pytest.approx(10.0)


def test_compile_marked_steps():
    ser = StepSeries("optimizer")
    ser.add_batch(0, 100.0, [0] + [1_000_000_000] * 4)  # boundaries at 100..104
    assert ser.compile_marked([(101.5, 101.7)]) == {2}
    assert ser.compile_marked([(102.9, 103.4)]) == {3, 4}
    assert ser.compile_marked([(99.0, 99.5)]) == set(), "before the first boundary: no interval"
    assert ser.compile_marked([(104.5, 110.0)]) == set(), "after the last boundary: no interval yet"
    assert ser.compile_marked([(99.0, 100.5)]) == {1}
    assert ser.compile_marked([(101.5, 101.7), (101.8, 101.9), (103.1, 103.2)]) == {2, 4}


def test_compile_steps_in_the_report():
    s = run(
        steps("optimizer", 0, T0, [0] + [1_000_000_000] * 4),
        _start("0/0", 0, T0 + 1.5),
        _metrics("0/0", 0, T0 + 1.7, entire_frame_compile_time_s=0.2, start_time=T0 + 1.5),
        _start("0/1", 0, T0 + 2.9),
        _metrics("0/1", 0, T0 + 3.4, entire_frame_compile_time_s=0.5, start_time=T0 + 2.9, recompile_reason="r"),
    )
    assert build_report(s)["steps"]["compile_steps"] == 3
    assert "3 step(s) paid for a compile" in full_text(build_report(s))


def test_real_runs_step_stats():
    s = run(*RECOMPILE_LIMIT_RUN)
    st = s.steps.current.stats()
    assert s.steps.source == "compiled_call" and st.count == 7 and st.intervals == 6
    assert st.max_ms == pytest.approx(301.019627)
    assert st.min_ms == pytest.approx(0.057656)
    assert build_report(s)["steps"]["compile_steps"] == 4


# --------------------------------------------------------------------- output


def test_output_partial_lines_per_stream():
    o = OutputBuffer()
    o.feed("stdout", "hel")
    o.feed("stderr", "warn")
    o.feed("stdout", "lo\nwor")
    assert [(x.stream, x.text) for x in o.lines] == [("stdout", "hello")]
    assert o.partial("stdout") == "wor" and o.partial("stderr") == "warn"
    o.feed("stderr", "ing\n")
    assert [(x.stream, x.text) for x in o.lines] == [("stdout", "hello"), ("stderr", "warning")]
    o.flush_partial()
    assert o.lines[-1].text == "wor" and o.partial("stdout") == ""
    assert o.total_lines == 3 and o.total_chars == len("hel" + "warn" + "lo\nwor" + "ing\n")


def test_output_carriage_returns_keep_the_final_state():
    o = OutputBuffer()
    o.feed("stderr", " 10%|#         |\r 50%|#####     |\r100%|##########|\n")
    o.feed("stdout", "windows line\r\n")
    o.feed("stdout", "\r\r\n")
    assert [x.text for x in o.lines] == ["100%|##########|", "windows line", ""]


def test_output_long_lines_are_cut():
    o = OutputBuffer()
    o.feed("stdout", "x" * (MAX_LINE_CHARS + 123) + "\n")
    (line,) = o.lines
    assert line.text.startswith("x" * MAX_LINE_CHARS)
    assert len(line.text) < MAX_LINE_CHARS + 40 and "123" in line.text


def test_output_unterminated_flood_is_bounded():
    o = OutputBuffer()
    for _ in range(100):
        o.feed("stdout", "y" * 1000)
        assert len(o.partial("stdout")) <= MAX_LINE_CHARS * 4
    assert len(o.lines) >= 1
    assert all(len(x.text) < MAX_LINE_CHARS + 40 for x in o.lines)


def test_output_keeps_the_last_lines():
    o = OutputBuffer(max_lines=5)
    o.feed("stdout", "".join(f"line {i}\n" for i in range(12)))
    assert [x.text for x in o.lines] == [f"line {i}" for i in range(7, 12)]
    assert o.total_lines == 12


def test_session_output_and_exit_flush():
    s = run(
        {"kind": "output", "t": T0, "data": "no stream given\n"},
        {"kind": "output", "t": T0, "stream": "stdout", "data": "epoch 1\nepoch 2 loss="},
    )
    s.apply({"kind": "output", "t": T0, "stream": "stderr", "data": 5})  # not text: not an event
    assert s.bad_events == 1
    assert [(x.stream, x.text) for x in s.output.lines] == [("stdout", "no stream given"), ("stdout", "epoch 1")]
    assert s.output.partial("stderr") == ""
    s.apply({"kind": "exit", "t": T0 + 1, "code": 1, "signal": None})
    assert s.output.lines[-1].text == "epoch 2 loss="


def test_exit_flushing_a_partial_line_marks_output_changed():
    """The exit flushes the job's last unterminated line into the output
    lines; a viewer that repaints on rev['output'] must be told."""
    s = run({"kind": "output", "t": T0, "stream": "stdout", "data": "Segmentation fault (core dumped)"})
    before = s.rev["output"]
    s.apply({"kind": "exit", "t": T0 + 1, "code": None, "signal": "SIGSEGV"})
    assert s.output.lines[-1].text == "Segmentation fault (core dumped)"
    assert s.rev["output"] > before


# ------------------------------------------------------------ exit and state


@pytest.mark.parametrize(
    "code, sig, status, text",
    [
        (0, None, 0, "exited with code 0"),
        (3, None, 3, "exited with code 3"),
        (None, "SIGKILL", 137, "was killed by SIGKILL"),
        (None, "SIGTERM", 143, "was killed by SIGTERM"),
        (None, "SIGSEGV", 139, "was killed by SIGSEGV"),
        (None, "SIGNOTREAL", 128, "was killed by SIGNOTREAL"),
        # neither: a job ctmon did not start (ctmon.install()) -- its status is not known
        (None, None, None, "ended (exit status not known to ctmon)"),
    ],
)
def test_exit_status(code, sig, status, text):
    s = run({"kind": "exit", "t": T0, "code": code, "signal": sig})
    assert s.exit.known == (status is not None)
    assert s.state == "exited"
    r = build_report(s)
    assert r["exit_code"] == status
    assert r["exit_signal"] == sig
    assert exit_text(r) == text
    entry = s.log[-1]
    assert entry.kind == "exit"
    assert entry.severity == ("info" if not status else "critical")


def test_state_transitions():
    s = Session()
    assert s.state == "starting"
    s.apply(SESSION_EV)
    s.apply(PROCESS_EV)
    assert s.state == "starting"
    s.apply(_start("0/0", 0, T0))
    assert s.state == "compiling"
    s.apply(_metrics("0/0", 0, T0 + 1))
    assert s.state == "running"
    s.apply(_start("0/1", 0, T0 + 2))
    assert s.state == "compiling"
    s.apply({"kind": "exit", "t": T0 + 3, "code": 0})
    assert s.state == "exited", "exit wins even with a compile in flight"
    t = Session()
    t.apply(steps("api", 0, T0, [0]))
    assert t.state == "running"


def test_meta_and_duration():
    s = run(SESSION_EV, PROCESS_EV, TORCH_EV, {"kind": "exit", "t": SESSION_EV["t"] + 7.5, "code": 0})
    m = s.meta
    assert m.session_id == SESSION_EV["id"] and m.command == ["python", RL]
    assert m.pid == 5967 and m.supervisor_pid == 5965 and m.python == "3.11.7"
    assert m.torch == "2.13.0+cpu" and m.cuda is None
    assert m.cache_entries == {"fx_graph": 0, "aot_autograd": 0}
    assert s.duration_s == pytest.approx(7.5)
    assert not s.newer_protocol
    r = build_report(s)
    assert r["duration_s"] == pytest.approx(7.5) and r["torch"] == "2.13.0+cpu"


def test_duration_without_session_or_exit_uses_event_times():
    s = run(steps("api", 0, T0, [0]), steps("api", 1, T0 + 4, [4_000_000_000]))
    assert s.duration_s == pytest.approx(4.0)
    assert Session().duration_s is None


def test_drops_keep_the_maximum():
    s = run(
        {"kind": "drops", "t": T0, "steps": 5, "events": 2},
        {"kind": "drops", "t": T0, "steps": 3},
    )
    s.apply({"kind": "drops", "t": T0, "events": "9"})  # a count that is not a number: not an event
    assert s.drops == {"steps": 5, "events": 2} and s.bad_events == 1
    r = build_report(s)
    assert r["drops"] == {"steps": 5, "events": 2}
    assert "Dropped: 5 step boundaries, 2 events" in full_text(r)


def test_notes_logs_and_bounds():
    s = run(
        {"kind": "note", "t": T0, "level": "warning", "source": "ctmon", "message": "hook disabled\nmore"},
        {"kind": "note", "t": T0, "level": "error", "source": "dynamo", "message": "boom"},
        {"kind": "note", "t": T0, "message": "fyi"},
    )
    assert [(e.severity, e.text) for e in s.log] == [("warning", "hook disabled"), ("warning", "boom"), ("info", "fyi")]
    assert build_report(s)["notes"][0] == {"level": "warning", "source": "ctmon", "message": "hook disabled\nmore"}
    big = Session()
    for i in range(6000):
        big.apply({"kind": "note", "t": T0 + i, "message": str(i)})
    assert len(big.log) == 5000 and big.log_counts["note"] == 6000
    assert big.log[-1].text == "5999"
    assert len(big.notes) <= 1000
    for i in range(4000):
        big.apply({"kind": "sample", "t": T0 + i, "cpu_percent": 1.0})
    latest = big.latest_sample()
    assert len(big.samples) == 3600 and latest is not None and latest.t == T0 + 3999


def test_unknown_kinds_are_counted_not_applied():
    s = Session()
    s.apply({"kind": "from_2030", "t": T0})
    s.apply({"kind": 7})
    s.apply({"t": T0})
    assert s.unknown == {"from_2030": 1, "7": 1, "None": 1}
    assert s.events == 3 and s.bad_events == 0
    assert sum(s.rev.values()) == 0
    assert s.first_t is None


def test_huge_integer_time_does_not_raise():
    """A line like {"kind":"note","t":1000...000} decodes to a Python int too
    large for a float; apply() must never raise on malformed input."""
    ev = protocol.decode(b'{"kind":"note","t":1' + b"0" * 400 + b',"message":"x"}')
    assert ev is not None
    s = Session()
    s.apply(ev)
    s.apply({"kind": "exit", "t": 10**400, "code": 0})
    build_report(s)


# ------------------------------------------------------------------------ rev


def _touched(s: Session, ev: dict) -> set[str]:
    before = dict(s.rev)
    s.apply(ev)
    return {k for k, v in s.rev.items() if v != before.get(k, 0)}


@pytest.mark.parametrize(
    "ev, sections",
    [
        (SESSION_EV, {"meta"}),
        (PROCESS_EV, {"meta"}),
        (TORCH_EV, {"meta"}),
        ({"kind": "devices", "t": T0, "cuda": [{"index": 0, "name": "NVIDIA H100"}]}, {"meta"}),
        ({"kind": "drops", "t": T0, "steps": 1}, {"meta"}),
        (steps("optimizer", 0, T0, [0, 1_000_000]), {"steps"}),
        ({"kind": "sample", "t": T0, "cpu_percent": 100.0}, {"samples"}),
        ({"kind": "output", "t": T0, "stream": "stdout", "data": "x\n"}, {"output"}),
        ({"kind": "note", "t": T0, "message": "m"}, {"log"}),
        (_start("0/0", 0, T0), {"compile"}),
        (_metrics("0/0", 0, T0), {"compile", "log"}),
        (_gb("0/0", 0, T0, 13, **PRINT_GB), {"compile", "log"}),
        ({"kind": "cache", "t": T0, "cache": "fx_graph", "result": "hit"}, {"compile", "log"}),
        ({"kind": "bwd_compile", "t": T0, "duration_us": 10}, {"compile"}),
        ({"kind": "exit", "t": T0, "code": 0}, {"meta", "log"}),
        ({"kind": "unknown_kind", "t": T0}, set()),
    ],
    ids=lambda x: x["kind"] if isinstance(x, dict) else None,
)
def test_rev_changes_only_the_touched_sections(ev, sections):
    s = Session()
    assert _touched(s, ev) == sections


def test_rev_after_device_window_and_rejected_events():
    s = run(steps("optimizer", 0, T0, [0, 1_000_000, 1_000_000]))
    assert _touched(s, {"kind": "device_time", "t": T0, "src": "optimizer", "i0": 0, "i1": 2, "ms": 1.0}) == {"steps"}
    assert _touched(s, steps("compiled_call", 0, T0, [0])) == set()
    assert _touched(s, {"kind": "device_time", "t": T0, "src": "api", "i0": 0, "i1": 2, "ms": 1.0}) == set()
    assert _touched(s, {"kind": "output", "t": T0, "stream": "stdout", "data": None}) == set()


# ---------------------------------------------------------------------- report

REQUIRED = {
    "exit_code": (int, type(None)),
    ("steps", "count"): int,
    ("steps", "p50_ms"): (float, type(None)),
    ("steps", "p90_ms"): (float, type(None)),
    ("steps", "mean_ms"): (float, type(None)),
    ("compile", "compiles"): int,
    ("compile", "recompiles"): int,
    ("compile", "graph_breaks"): int,
    ("compile", "limit_hits"): int,
    ("compile", "total_time_s"): float,
}
FRAME_KEYS = {
    "name": str,
    "file": (str, type(None)),
    "line": (int, type(None)),
    "compiles": int,
    "recompile_reasons": list,
    "limit_hit": bool,
}
BREAK_KEYS = {"reason": str, "file": (str, type(None)), "line": (int, type(None)), "count": int}


def check_report(r: dict) -> None:
    for key, typ in REQUIRED.items():
        path = key if isinstance(key, tuple) else (key,)
        node = r
        for p in path:
            assert p in node, f"report lacks {'.'.join(path)}"
            node = node[p]
        assert isinstance(node, typ) and not isinstance(node, bool), (path, node)
    assert isinstance(r["frames"], list) and isinstance(r["graph_breaks"], list)
    for f in r["frames"]:
        for k, typ in FRAME_KEYS.items():
            assert k in f and isinstance(f[k], typ), (k, f.get(k))
        assert all(isinstance(x, str) for x in f["recompile_reasons"])
    for b in r["graph_breaks"]:
        for k, typ in BREAK_KEYS.items():
            assert k in b and isinstance(b[k], typ), (k, b.get(k))
    for cache in ("fx_graph", "aot_autograd"):
        assert set(r["cache"][cache]) == {"hit", "miss", "bypass"}
        assert all(isinstance(v, int) for v in r["cache"][cache].values())
    # JSON, and strict JSON at that (no NaN / Infinity for other tools to choke on)
    json.loads(json.dumps(r, allow_nan=False))


def test_report_of_an_empty_session():
    r = build_report(Session())
    check_report(r)
    assert r["exit_code"] is None and r["state"] == "starting"
    assert r["steps"]["count"] == 0 and r["steps"]["p50_ms"] is None
    assert r["compile"]["compiles"] == 0 and r["frames"] == [] and r["graph_breaks"] == []
    text = full_text(r)
    assert "no step boundaries seen" in text and "is still running" in text.lower()
    assert summary_lines(r)[0].startswith("ctmon: job ")


@pytest.mark.parametrize("run_events", [RECOMPILE_LIMIT_RUN, GRAPH_BREAK_RUN], ids=["recompile_limit", "graph_breaks"])
def test_report_of_full_sessions(run_events):
    s = run(*run_events)
    r = build_report(s)
    check_report(r)
    assert r["exit_code"] == 0 and r["state"] == "exited"
    assert r["frames"] and r["steps"]["count"] > 0
    assert r["report_version"] == 1
    text = full_text(r)
    assert text.endswith("\n")
    for heading in ("Steps", "Compilation", "Frames", "Caches"):
        assert f"\n{heading}\n" in text
    lines = summary_lines(r, recording="/tmp/r.jsonl")
    assert lines[0].startswith("ctmon: python ") and "exited with code 0" in lines[0]
    assert lines[-1] == "ctmon: recording: /tmp/r.jsonl  (ctmon report /tmp/r.jsonl)"


def test_report_is_strict_json_with_non_finite_values():
    """Values a recording may carry (JSON parsers accept NaN and 1e999) must
    not leak into the report as NaN/Infinity: report keys are numbers or null."""
    s = Session()
    s.apply(_metrics("0/0", 0, T0, entire_frame_compile_time_s=float("nan")))
    s.apply(_metrics("0/1", 0, T0, entire_frame_compile_time_s=float("inf")))
    s.apply({"kind": "bwd_compile", "t": T0, "duration_us": float("inf")})
    s.apply(steps("optimizer", 0, T0, [0, 10_000_000]))
    s.apply({"kind": "device_time", "t": T0, "src": "optimizer", "i0": 0, "i1": 1, "ms": float("inf")})
    check_report(build_report(s))


def test_report_types_hold_for_malformed_locations():
    """Frame and site locations come straight from events; a float/NaN line
    or a non-string file must not reach the report's typed keys."""
    s = Session()
    s.apply(_metrics("0/0", 0, T0, co_filename=5, co_firstlineno=float("nan"), co_name=["f"]))
    s.apply(_start("1/0", 1, T0, file=None, line="7", name=None))
    s.apply(_metrics("1/0", 1, T0 + 1))
    s.apply(
        {
            "kind": "graph_break",
            "t": T0,
            "compile_id": "1/0",
            "frame_id": 1,
            "file": "/w/a.py",
            "line": 2.5,
            "reason": "r",
        }
    )
    r = build_report(s)
    check_report(r)
    full_text(r)


def test_text_formatting_helpers():
    assert ms_or_s(None) == "-" and ms_or_s(2.5) == "2.50 ms" and ms_or_s(25.0) == "25.0 ms"
    assert ms_or_s(250.0) == "250 ms" and ms_or_s(2500.0) == "2.50 s"
    assert (
        seconds(None) == "-" and seconds(1.234) == "1.23 s" and seconds(12.3) == "12.3 s" and seconds(600) == "10.0 min"
    )


def test_text_report_with_many_recompile_reasons():
    evs = [_metrics(f"0/{i}", 0, T0 + i, recompile_reason=f"0/{i - 1}: reason {i}\nsecond line") for i in range(1, 9)]
    r = build_report(run(*evs))
    text = full_text(r)
    assert "recompiled: reason 1 (a guard of 0/0 failed)" in text and "second line" not in text
    assert "… and 3 more reasons" in text


def test_report_findings_and_devices_render():
    r = build_report(run(*GRAPH_BREAK_RUN))
    r["findings"] = [
        {
            "severity": "critical",
            "title": "Recompile limit hit",
            "file": RL,
            "line": 7,
            "fix": "mark the dim dynamic\nor pad",
        }
    ]
    r["devices"] = [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}]
    text = full_text(r)
    assert "[critical] Recompile limit hit" in text and "fix: mark the dim dynamic" in text
    assert "GPU 0: NVIDIA H100 80GB HBM3" in text
    assert any("CRITICAL: Recompile limit hit" in x for x in summary_lines(r))


def test_math_sanity_of_report_rounding():
    s = run(steps("optimizer", 0, T0, [0, 1_234_567, 7_654_321]))
    r = build_report(s)
    assert r["steps"]["min_ms"] == pytest.approx(1.2346) and r["steps"]["max_ms"] == pytest.approx(7.6543)
    assert not any(isinstance(v, float) and math.isnan(v) for v in r["steps"].values())


@pytest.mark.parametrize("device", [False, True], ids=["host", "device-timed"])
def test_long_series_statistics_equal_the_sorted_lists(monkeypatch, device):
    """Past EXACT_MAX intervals the statistics come from numpy's partition of
    the packed arrays; they must be the ones the sorted list gives."""
    import random

    from ctmon.store import step_stats
    from ctmon.store import steps as S

    rng = random.Random(7)
    ser = S.StepSeries("optimizer")
    i0 = 0
    for b in range(3000):
        ns = [int(rng.lognormvariate(15.9, 0.3)) for _ in range(rng.randint(1, 14))]
        if rng.random() < 0.02:
            ns[0] = 0  # after lost boundaries: no interval
        ser.add_batch(i0 + (5 if rng.random() < 0.01 else 0), 1.0 + b, ns)
        i0 = len(ser)
        if device and b % 7 == 0 and i0 > 3:
            ser.add_device_window(i0 - 3, i0 - 1, rng.uniform(1, 30))
    monkeypatch.setattr(step_stats, "EXACT_MAX", 10**9)
    exact = ser.stats()
    monkeypatch.setattr(step_stats, "EXACT_MAX", 10)
    ser._stats_cache = None
    large = ser.stats()
    assert large.intervals == exact.intervals and large.count == exact.count
    for field in ("p50_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "last_ms"):
        assert getattr(large, field) == getattr(exact, field), field
    assert large.mean_ms == pytest.approx(exact.mean_ms, rel=1e-12)


def test_the_system_section_says_how_busy_each_gpu_was_and_why_there_is_none():
    from ctmon.report.system import system_report

    s = Session()
    s.apply({"kind": "steps", "t": 10.0, "src": "optimizer", "i0": 0, "ns": [0] + [int(1e9)] * 10})  # 10..20 s
    for k, util in enumerate([90, 0, 0, 100, 80, 2, 95, 99, 70, 60, 0, 100]):
        gpu = {"index": 0, "name": "G", "util": util, "mem_used": (k + 1) * 2**30, "mem_total": 80 * 2**30}
        gpu.update(proc_mem=k * 2**29, power_w=300.0)
        s.apply({"kind": "sample", "t": 9.5 + k, "cpu_percent": 50.0 + k, "rss": 2**30, "cpus": 16, "gpus": [gpu]})
    r = system_report(s)
    (g,) = r["gpus"]
    assert (g["samples"], g["util_mean"], g["util_p10"], g["util_p90"]) == (12, 58.0, 0.0, 100.0)
    assert g["memory_peak_bytes"] == 12 * 2**30 and g["job_memory_peak_bytes"] == 11 * 2**29
    # samples at 10.5 .. 19.5 s fall while steps ran: 0, 0, 100, 80, 2, 95, 99, 70, 60, 0 -> 4 idle of 10
    assert g["idle_share_while_stepping"] == 0.4 and g["power_mean_w"] == 300.0
    assert (r["cpu_percent_peak"], r["cpus"], r["rss_peak_bytes"], r["no_gpu"]) == (61.0, 16, 2**30, None)
    cpu_only = Session()
    cpu_only.apply({"kind": "sample", "t": 1.0, "cpu_percent": 10.0, "gpu_error": "no NVIDIA driver (NVML not found)"})
    r = system_report(cpu_only)
    assert r["gpus"] == [] and r["no_gpu"] == "no NVIDIA driver (NVML not found)"


def test_the_end_of_run_summary_counts_in_words_and_says_how_many_findings_it_left_out():
    from ctmon.report.text import summary_lines

    s = Session()
    s.apply({"kind": "compile_start", "t": 1.0, "compile_id": "0/0", "frame_id": 0, "name": "f", "file": "/u.py"})
    s.apply({"kind": "compile", "t": 1.5, "compile_id": "0/0", "frame_id": 0, "entire_frame_compile_time_s": 0.5})
    r = build_report(s)
    r["findings"] = [{"severity": "warning", "title": f"finding {k}", "file": None, "line": None} for k in range(5)]
    lines = summary_lines(r)
    assert any(x.startswith("ctmon: 1 compile, 0 recompiles, 0 graph breaks, 0 recompile-limit hits") for x in lines)
    assert [x for x in lines if "finding " in x] == [f"ctmon: WARNING: finding {k}" for k in range(3)]
    assert "ctmon: +2 more findings (ctmon report shows them all)" in lines
