"""``ctmon export``: a run as Chrome trace-event JSON (Perfetto,
chrome://tracing), and the same timeline drawn as SVG.

Checked against the trace-event format: metadata names a process per rank
and its tracks; slices (``X``) have microsecond ``ts`` and ``dur``;
instants (``i``) and counters (``C``); time never goes back on a track. A
synthetic two-rank recording pins the mapping (which event lands where); a
real recording and a real TORCH_TRACE directory go through end to end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import defaultdict
from typing import Any
from xml.etree import ElementTree

import pytest
from helpers import ctmon, env_with, one_line_containing, record, workload

T0 = 1_800_000_000.0
GPU = {"index": 0, "util": 87.0, "mem_used": 3_000_000_000, "mem_total": 80_000_000_000}


def _two_ranks(path: Any) -> str:
    evs: list[dict[str, Any]] = [{"kind": "session", "t": T0, "v": 1, "id": "x", "command": ["torchrun"]}]
    for r in (0, 1):
        evs.append({"kind": "process", "t": T0 + 0.1, "pid": 100 + r, "rank": r, "world_size": 2, "host": "n"})
        evs.append(
            {
                "kind": "compile_start",
                "t": T0 + 1,
                "rank": r,
                "compile_id": "0/0",
                "frame_id": 0,
                "name": "fwd",
                "file": "/u/train.py",
                "line": 7,
            }
        )
        evs.append(
            {
                "kind": "compile",
                "t": T0 + 3,
                "rank": r,
                "compile_id": "0/0",
                "frame_id": 0,
                "entire_frame_compile_time_s": 2.0,
                "backend_compile_time_s": 1.5,
                "inductor_compile_time_s": 1.2,
                "code_gen_time_s": 0.4,
            }
        )
        evs.append(
            {
                "kind": "steps",
                "t": T0 + 3.5,
                "rank": r,
                "src": "optimizer",
                "i0": 0,
                "ns": [0, 100_000_000, 110_000_000, 90_000_000],
            }
        )
    evs.append(
        {
            "kind": "graph_break",
            "t": T0 + 2,
            "rank": 1,
            "compile_id": "0/0",
            "file": "/u/train.py",
            "line": 9,
            "summary": "print",
        }
    )
    evs.append({"kind": "cache", "t": T0 + 2.5, "rank": 0, "cache": "fx_graph", "result": "miss", "compile_id": "0/0"})
    evs.append({"kind": "recompile_reasons", "t": T0 + 4, "rank": 1, "compile_id": "0/1", "reasons": ["size of x"]})
    evs.append({"kind": "compile_start", "t": T0 + 4, "rank": 1, "compile_id": "0/1", "frame_id": 0, "name": "fwd"})
    evs.append(
        {
            "kind": "compile",
            "t": T0 + 4.5,
            "rank": 1,
            "compile_id": "0/1",
            "frame_id": 0,
            "entire_frame_compile_time_s": 0.5,
        }
    )
    for i in range(3):
        evs.append({"kind": "sample", "t": T0 + i, "cpu_percent": 50.0 + i, "rss": 2_000_000_000, "gpus": [GPU]})
    evs.append({"kind": "exit", "t": T0 + 5, "code": 0, "signal": None})
    p = path / "two.jsonl"
    p.write_text("".join(json.dumps(e) + "\n" for e in evs))
    return str(p)


def _export(*args: str) -> dict[str, Any]:
    out = ctmon("export", *args)
    assert out.returncode == 0, out.stderr
    path = args[args.index("-o") + 1]
    with open(path) as f:
        return json.load(f)


def check_format(doc: dict[str, Any]) -> None:
    """What the trace-event format asks of what ctmon writes."""
    evs = doc["traceEvents"]
    assert doc["displayTimeUnit"] == "ms"
    last: dict[tuple[int, Any], float] = defaultdict(lambda: -1.0)
    for e in evs:
        assert e["ph"] in ("M", "X", "i", "C"), e
        assert isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name") and "args" in e
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0 and isinstance(e["tid"], int)
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g")
        if e["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values())
        track = (e["pid"], e.get("tid", e["name"]))
        assert e["ts"] >= last[track], ("time went back on a track", e)
        last[track] = e["ts"]


def test_each_rank_is_a_process_with_steps_compiles_and_events(tmp_path):
    doc = _export("--perfetto", _two_ranks(tmp_path), "-o", str(tmp_path / "out" / "t.json"))
    check_format(doc)
    evs = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in evs if e["name"] == "process_name"}
    assert names == {0: "job", 1: "rank 0 (n, pid 100)", 2: "rank 1 (n, pid 101)"}
    steps = [e for e in evs if e["ph"] == "X" and e["tid"] == 1 and e["pid"] == 2]
    # an optimizer's boundary ends a step: the first interval is the second step, as a 1-based loop log says
    assert [(e["name"], e["dur"]) for e in steps] == [("step 2", 100000.0), ("step 3", 110000.0), ("step 4", 90000.0)]
    assert steps[0]["ts"] == 3.5e6 and steps[1]["ts"] == 3.6e6  # µs from the run's start
    comp = [e for e in evs if e["ph"] == "X" and e["tid"] == 2 and e["pid"] == 2]
    first = comp[0]
    assert first["name"] == "compile 0/0 fwd" and (first["ts"], first["dur"]) == (1e6, 2e6)
    phases = {e["name"]: (e["ts"], e["dur"]) for e in comp[1:4]}
    assert phases["code generation"] == (2.6e6, 4e5)  # placed at the compile's end
    assert comp[-1]["name"] == "recompile 0/1 fwd" and comp[-1]["args"]["recompile_reasons"] == ["size of x"]
    marks = {(e["pid"], e["name"]) for e in evs if e["ph"] == "i"}
    assert (2, "graph break /u/train.py:9") in marks and (1, "fx_graph miss") in marks and (0, "exit (code 0)") in marks
    gpu = [e for e in evs if e["ph"] == "C" and e["name"] == "GPU 0 util %"]
    assert len(gpu) == 3 and gpu[0]["args"] == {"util": 87.0} and gpu[0]["pid"] == 0


@pytest.mark.slow
def test_a_real_recording_and_a_real_trace_export_and_draw(tmp_path, graph_breaks_trace):
    run = record(tmp_path / "rec", [workload("recompile_shapes.py")])
    assert run.returncode == 0, run.proc.stderr
    doc = _export("--perfetto", run.recording, "-o", str(tmp_path / "r.json"))
    check_format(doc)
    comp = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == 2]
    assert len([e for e in comp if e["name"].startswith("recompile")]) == run.report()["compile"]["recompiles"] >= 1
    trace = str(tmp_path / "trace")
    shutil.copytree(graph_breaks_trace, trace)  # the graph-breaks workload, run plainly with TORCH_TRACE
    tdoc = _export("--perfetto", trace, "-o", str(tmp_path / "t.json"))
    check_format(tdoc)
    assert sum(1 for e in tdoc["traceEvents"] if e["name"].startswith("graph break")) >= 2
    _phases_lie_inside_their_compiles(tdoc, 0)
    # a second run into the same directory: two processes without a rank, drawn apart
    _traced_run(trace)
    tdoc = _export("--perfetto", trace, "-o", str(tmp_path / "t2.json"))
    check_format(tdoc)
    names = [e["args"]["name"] for e in tdoc["traceEvents"] if e["name"] == "process_name"]
    procs = [n for n in names if n.startswith("process (pid ")]
    assert len(set(procs)) == 2, names
    for pid in {e["pid"] for e in tdoc["traceEvents"] if e["ph"] == "X"}:
        _phases_lie_inside_their_compiles(tdoc, pid)
    out = ctmon("export", "--svg", run.recording, "-o", str(tmp_path / "r.svg"))
    assert out.returncode == 0, out.stderr
    svg = ElementTree.parse(tmp_path / "r.svg").getroot()  # well-formed
    titles = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t and t.startswith("recompile") for t in titles)


def _traced_run(trace: str) -> None:
    """The graph-breaks workload, plainly, with PyTorch's TORCH_TRACE into ``trace``."""
    subprocess.run(
        [sys.executable, workload("graph_breaks.py")],
        env=env_with(TORCH_TRACE=trace),
        check=True,
        capture_output=True,
        timeout=300,
    )


def _phases_lie_inside_their_compiles(doc: dict[str, Any], pid: int) -> None:
    """PyTorch's phase timers, drawn where they ran: Dynamo's tracing and the
    guards of each compile fall within that compile's slice."""
    comp = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == 2 and e["pid"] == pid]
    frames = {e["args"]["compile_id"]: e for e in comp if e["name"].split()[0] in ("compile", "recompile")}
    tracing = [e for e in comp if e["name"] == "Dynamo tracing"]
    # every compile traced at least once (a graph break restarts the tracing)
    assert frames and {e["args"]["compile_id"] for e in tracing} == set(frames), [e["name"] for e in comp]
    for e in tracing + [e for e in comp if e["name"] == "guards"]:
        outer = frames[e["args"]["compile_id"]]
        assert outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] + 1000, (outer, e)
    assert not [e for e in comp if e["args"].get("placed")]  # no phase guessed from durations


def test_export_refuses_bad_input_in_one_line(tmp_path):
    one_line_containing(ctmon("export", "x.jsonl", "-o", "y.json"), "say which format")
    one_line_containing(ctmon("export", "--perfetto", "-o", "y.json"), "is required")
    one_line_containing(ctmon("export", "--perfetto", str(tmp_path / "none.jsonl"), "-o", "y.json"), "no such")
    rec = _two_ranks(tmp_path)
    (tmp_path / "file").write_text("")
    one_line_containing(ctmon("export", "--perfetto", rec, "-o", str(tmp_path / "file" / "x.json")), "cannot write")
