"""Every demo, small and on CPU, under ``ctmon record``: the phenomenon it
teaches shows in the report, and ``--fix`` removes it.

Inductor only where it is the point (the cache demo); elsewhere the demos'
CPU default backend (aot_eager) or ``--backend aot_eager``: Dynamo's
recompiles, graph breaks and limits are the same, at a fraction of the
compile time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from helpers import ROOT, assert_matches_torch_trace, env_with, marker_lines, record

pytestmark = pytest.mark.slow  # every demo, run for real

DEMOS = os.path.join(ROOT, "demos")
DEMO_FILES = [
    "gpt_baseline.py",
    "recompile_storm.py",
    "graph_breaks.py",
    "cache_restart.py",
    "compile_modes.py",
    "inference_buckets.py",
]


def demo(name: str) -> str:
    return os.path.join(DEMOS, name)


def run_demo(tmp_path, name: str, *args: str, torch_trace: bool = False):
    os.makedirs(tmp_path, exist_ok=True)
    run = record(tmp_path, [demo(name), *args], torch_trace=torch_trace)
    assert run.returncode == 0, run.proc.stdout[-3000:] + "\n" + run.proc.stderr[-3000:]
    rep = run.report()
    assert rep["exit_code"] == 0
    assert "summary:" in run.proc.stdout, run.proc.stdout[-2000:]
    return run, rep


def only_frame(rep, name: str):
    frames = [f for f in rep["frames"] if f["name"] == name]
    assert len(frames) == 1, [f["name"] for f in rep["frames"]]
    return frames[0]


# ---- 1. the healthy baseline ----


def test_gpt_baseline_is_healthy(tmp_path):
    _, rep = run_demo(tmp_path, "gpt_baseline.py", "--steps", "12", "--backend", "aot_eager")
    c = rep["compile"]
    assert (c["compiles"], c["recompiles"], c["graph_breaks"], c["limit_hits"], c["failures"]) == (1, 0, 0, 0, 0), c
    assert c["backward_compiles"] == 1
    frame = only_frame(rep, "GPT.forward")
    assert frame["file"] == os.path.join(DEMOS, "_tinygpt.py") and frame["entries"] == 1
    assert rep["steps"]["count"] == 12 and rep["steps"]["source"] == "optimizer"


# ---- 2. the recompile storm ----


def test_recompile_storm_hits_the_limit(tmp_path):
    run, rep = run_demo(tmp_path, "recompile_storm.py", "--steps", "14", torch_trace=True)
    assert_matches_torch_trace(rep, run.trace())
    c = rep["compile"]
    assert c["limit_hits"] >= 1 and c["recompile_limit"] == 8, c
    assert c["compiles"] == 9 and c["recompiles"] == 8, c  # 8 graphs, then the refused 9th
    frame = only_frame(rep, "GPT.forward")
    assert frame["limit_hit"] is True and frame["entries"] == 8
    reasons = frame["recompile_reasons"]
    assert len(reasons) == 8
    assert all("'idx' size mismatch at index 1" in r for r in reasons), reasons
    assert rep["steps"]["compile_steps"] >= 7  # the recompiles stalled steps
    assert "ran eagerly" in run.proc.stdout


def test_recompile_storm_fix_dynamic(tmp_path):
    run, rep = run_demo(tmp_path, "recompile_storm.py", "--steps", "14", "--fix")
    assert "mark_dynamic" in run.proc.stdout
    c = rep["compile"]
    assert (c["compiles"], c["recompiles"], c["limit_hits"]) == (1, 0, 0), c
    assert only_frame(rep, "GPT.forward")["entries"] == 1


def test_recompile_storm_fix_bucket(tmp_path):
    _, rep = run_demo(tmp_path, "recompile_storm.py", "--steps", "14", "--fix", "bucket")
    c = rep["compile"]
    assert c["limit_hits"] == 0 and 1 <= c["compiles"] <= 3, c  # buckets 32, 64, 128
    for reason in only_frame(rep, "GPT.forward")["recompile_reasons"]:
        assert re.search(r"expected (32|64), actual (64|128)", reason), reason


# ---- 3. graph breaks ----


def test_graph_breaks_at_the_marked_lines(tmp_path):
    path = demo("graph_breaks.py")
    lines = marker_lines(path)
    assert set(lines) == {"print", "item", "branch", "numpy"}
    run, rep = run_demo(tmp_path, "graph_breaks.py", "--steps", "4", torch_trace=True)
    assert_matches_torch_trace(rep, run.trace())
    sites = {b["line"]: b for b in rep["graph_breaks"] if b["file"] == path}
    assert set(lines.values()) <= set(sites), (lines, sorted(sites))
    assert "print" in sites[lines["print"]]["reason"]
    assert "item()" in sites[lines["item"]]["reason"]
    assert "Data-dependent branching" in sites[lines["branch"]]["reason"]
    assert "numpy" in sites[lines["numpy"]]["reason"].lower()
    assert rep["compile"]["graph_breaks"] >= 4
    names = {f["name"] for f in rep["frames"]}
    assert "MonitoredGPT.forward" in names
    assert f"forward (resumed at line {lines['print']})" in names, names


def test_graph_breaks_fix_removes_them(tmp_path):
    _, rep = run_demo(tmp_path, "graph_breaks.py", "--steps", "4", "--fix")
    c = rep["compile"]
    assert (c["graph_breaks"], c["compiles"], c["recompiles"]) == (0, 1, 0), c
    assert rep["graph_breaks"] == []
    assert only_frame(rep, "FixedMonitoredGPT.forward")["entries"] == 1


# ---- 4. compile caches across restarts (Inductor) ----


def _cache(rep):
    return rep["cache"]["fx_graph"], rep["cache"]["aot_autograd"]


def test_cache_restart_default_misses_and_portable_artifacts_hit(tmp_path):
    portable = str(tmp_path / "artifacts")
    # the default start: a fresh, empty cache dir -- everything misses
    # (--portable with no artifacts yet: the same start, then it saves them)
    _, rep = run_demo(tmp_path / "run1", "cache_restart.py", "--steps", "2", "--portable", portable)
    fx, aot = _cache(rep)
    assert fx["miss"] >= 1 and aot["miss"] >= 1 and fx["hit"] == 0 and aot["hit"] == 0, rep["cache"]
    fresh = rep["cache"]["cache_dir"]
    assert "ctmon-demo-fresh-cache-" in fresh and not os.path.exists(fresh)  # thrown away at exit
    assert rep["cache"]["entries_at_start"] in (None, {"fx_graph": 0, "aot_autograd": 0})
    assert os.path.getsize(os.path.join(portable, "torch_compile_artifacts.bin")) > 0
    # another fresh cache dir, but the artifacts are loaded first: both caches hit
    run, rep = run_demo(tmp_path / "run2", "cache_restart.py", "--steps", "2", "--portable", portable)
    assert "loaded" in run.proc.stdout
    fx, aot = _cache(rep)
    assert fx["hit"] >= 1 and aot["hit"] >= 1 and fx["miss"] == 0 and aot["miss"] == 0, rep["cache"]
    assert rep["cache"]["cache_dir"] not in (fresh, None) and "ctmon-demo-fresh-cache-" in rep["cache"]["cache_dir"]


def test_cache_restart_fix_hits_on_restart(tmp_path):
    cache_dir = str(tmp_path / "persistent-cache")
    _, rep = run_demo(tmp_path / "run1", "cache_restart.py", "--steps", "2", "--fix", "--cache-dir", cache_dir)
    fx, aot = _cache(rep)
    assert fx["miss"] >= 1 and aot["miss"] >= 1 and fx["hit"] == 0 and aot["hit"] == 0, rep["cache"]
    assert rep["cache"]["cache_dir"] == cache_dir
    # the restart finds what the first run compiled
    _, rep = run_demo(tmp_path / "run2", "cache_restart.py", "--steps", "2", "--fix", "--cache-dir", cache_dir)
    fx, aot = _cache(rep)
    assert fx["hit"] >= 1 and aot["hit"] >= 1 and fx["miss"] == 0 and aot["miss"] == 0, rep["cache"]
    assert rep["cache"]["cache_dir"] == cache_dir and rep["cache"]["entries_at_start"]["fx_graph"] >= 1


# ---- 5. compile modes ----


def test_compile_modes_table_and_choice(tmp_path):
    run, rep = run_demo(
        tmp_path,
        "compile_modes.py",
        "--backend",
        "aot_eager",
        "--modes",
        "eager,default",
        "--steps",
        "5",
        "--warmup",
        "2",
        "--fix",
    )
    out = run.proc.stdout
    table = [ln for ln in out.splitlines() if ln.startswith(("eager ", "default "))]
    assert len(table) == 2, out
    assert "--fix: training 5 steps with mode" in out
    # ctmon's steps are the demo's: 5 per mode, then 5 with the chosen mode
    assert rep["steps"]["source"] == "api" and rep["steps"]["count"] == 15, rep["steps"]
    c = rep["compile"]
    assert 1 <= c["compiles"] <= 2 and c["recompiles"] == 0 and c["graph_breaks"] == 0, c


# ---- 6. serving with changing batch sizes ----


def test_inference_buckets_compiles_while_serving(tmp_path):
    _, rep = run_demo(tmp_path, "inference_buckets.py", "--steps", "24")
    st, c = rep["steps"], rep["compile"]
    assert st["source"] == "api" and st["count"] == 25, st  # serving start + one per request
    assert st["compile_steps"] >= 5, st  # requests that waited for a compile
    assert c["compiles"] >= 5 and c["limit_hits"] >= 1, c
    reasons = only_frame(rep, "GPT.forward")["recompile_reasons"]
    assert reasons and all("'idx' size mismatch at index 0" in r for r in reasons), reasons
    shape = [f for f in rep["findings"] if f["rule"] == "shape-recompiles"]
    assert [f["severity"] for f in shape] == ["warning"], shape


def test_inference_buckets_fix_compiles_before_serving(tmp_path):
    run, rep = run_demo(tmp_path, "inference_buckets.py", "--steps", "24", "--fix")
    st, c = rep["steps"], rep["compile"]
    assert st["source"] == "api" and st["count"] == 25, st
    assert st["compile_steps"] == 0, st  # every compile happened in the warm-up
    assert c["compiles"] == 5 and c["limit_hits"] == 0, c  # buckets 1, 2, 4, 8, 16
    assert "warm-up: 5 buckets" in run.proc.stdout
    # the buckets' compiles are recognised as a warm-up, not reported as a storm
    shape = [f for f in rep["findings"] if f["rule"] == "shape-recompiles"]
    assert [(f["severity"], "in its warm-up" in f["title"]) for f in shape] == [("info", True)], shape


# ---- every demo: --help, and a clear error for --device cuda without CUDA ----

_PROBE = r"""
import contextlib, io, json, os, runpy, sys
import torch
demos, names = sys.argv[1], sys.argv[2:]
sys.path.insert(0, demos)
out = {}
for name in names:
    path = os.path.join(demos, name)
    for key, argv in (("help", ["--help"]), ("cuda", ["--device", "cuda", "--steps", "2"])):
        if key == "cuda" and torch.cuda.is_available():
            continue
        buf = io.StringIO()
        sys.argv = [path, *argv]
        code = 0
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                runpy.run_path(path, run_name="__main__")
            except SystemExit as e:
                code = e.code
        out[name + ":" + key] = [code, buf.getvalue()]
print(json.dumps(out))
"""


def test_every_demo_has_help_and_a_cuda_guard():
    import json

    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, DEMOS, *DEMO_FILES],
        capture_output=True,
        text=True,
        env=env_with(),
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in DEMO_FILES:
        code, text = res[name + ":help"]
        assert code == 0, (name, text)
        for opt in ("--device", "--steps", "--fix", "--backend"):
            assert opt in text, (name, opt)
        if name + ":cuda" in res:
            code, text = res[name + ":cuda"]
            assert code == 2 and "CUDA is not available" in text, (name, code, text[-500:])
