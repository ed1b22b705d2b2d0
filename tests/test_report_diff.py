"""``ctmon diff BASE NEW`` and ``ctmon report NEW --baseline BASE --fail-on
regression``: what changed between two runs, regressions first, timings
judged against the runs' own noise.

Real runs (marked slow) share their jobs through module-scoped fixtures:
one tiny script (tests/workloads/diff_job.py), compiled with the eager
backend, whose flags add a graph break, a shape recompile, or a backend that
sleeps. The comparison's rules are tested on hand-built run summaries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from helpers import ROOT, ctmon, env_with, marker_lines, one_line_containing, record, workload
from markdown_it import MarkdownIt

from ctmon.cli.diff import mark_new_findings
from ctmon.read.load import load
from ctmon.report.build import build_report
from ctmon.report.diff import COMPILE_MIN_S, compare, run_summary, same_job, script_of
from ctmon.report.diff_render import render_markdown, render_text
from ctmon.store import Session

JOB = workload("diff_job.py")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "recordings")


# ------------------------------------------------------------ real runs


def _record(tmp: Any, name: str, *flags: str) -> str:
    run = record(tmp / name, [JOB, *flags], torch_trace=False, options=["-q"])
    assert run.returncode == 0, run.proc.stderr[-2000:]
    return run.recording


def _trace(tmp: Any, name: str, *flags: str) -> str:
    """A run made without ctmon: PyTorch's own TORCH_TRACE only."""
    out = str(tmp / name)
    proc = subprocess.run(
        [sys.executable, JOB, *flags],
        env=env_with(TORCH_TRACE=out),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _record(tmp_path_factory.mktemp("diff"), "base")


@pytest.fixture(scope="module")
def again(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _record(tmp_path_factory.mktemp("diff"), "again")


@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _record(tmp_path_factory.mktemp("diff"), "changed", "--graph-break", "--new-shape")


@pytest.fixture(scope="module")
def slow_backend(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _record(tmp_path_factory.mktemp("diff"), "slow", "--slow-backend")


def _diff(*args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = ctmon("diff", *args, "--json")
    assert "Traceback" not in out.stderr, out.stderr
    return out, json.loads(out.stdout) if out.stdout else {}


def _kinds(entries: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in entries if e["kind"] == kind]


def _assert_break_and_recompile_named(doc: dict[str, Any]) -> None:
    line = marker_lines(JOB)["print"]
    breaks = _kinds(doc["regressions"], "graph_break")
    assert len(breaks) == 1 and "print" in breaks[0]["reason"], breaks
    assert breaks[0]["subject"].endswith(f"diff_job.py:{line}"), breaks
    assert "new graph break" in breaks[0]["what"]
    reasons = [e["new"] for e in _kinds(doc["regressions"], "recompile")]
    assert any("size mismatch at index 0. expected 4, actual 3" in r for r in reasons), reasons
    assert doc["regressions"][0]["kind"] == "graph_break"  # most important first


@pytest.mark.slow
def test_a_new_graph_break_and_shape_recompile_are_named_and_fail(base: str, changed: str) -> None:
    out, doc = _diff(base, changed)
    assert out.returncode == 0, out.stderr  # without --fail, a diff is only said
    _assert_break_and_recompile_named(doc)
    assert not doc["improvements"]
    text = ctmon("diff", base, changed, "--fail")
    assert text.returncode == 3, text.stderr
    assert "new graph break at" in text.stdout and "REGRESSED" in text.stdout
    assert "(new since BASE)" in next(ln for ln in text.stdout.splitlines() if "new graph break at" in ln)


@pytest.mark.slow
def test_two_runs_of_the_same_code_are_no_regression(base: str, again: str) -> None:
    out = ctmon("diff", base, again, "--json", "--fail")
    assert out.returncode == 0, out.stdout
    doc = json.loads(out.stdout)
    assert doc["regressions"] == [] and doc["improvements"] == []
    steps = {e["subject"]: e for e in _kinds(doc["unchanged"], "step_time")}
    assert set(steps) == {"step_p50", "step_p90"}, doc["unchanged"]
    # the timings were compared, against a stated noise, not skipped
    assert all(e["noise_pct"] >= 5 and e["base_ci"] and e["new_ci"] for e in steps.values()), steps
    assert "how timings were judged" in ctmon("diff", base, again).stdout


@pytest.mark.slow
def test_torch_trace_dirs_of_runs_made_without_ctmon(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("traces")
    plain, plain_again = _trace(tmp, "plain"), _trace(tmp, "plain_again")
    flagged = _trace(tmp, "flagged", "--graph-break", "--new-shape")
    out, doc = _diff(plain, flagged, "--fail")
    assert out.returncode == 3, out.stderr
    _assert_break_and_recompile_named(doc)
    assert doc["base"]["input"] == doc["new"]["input"] == "torch_trace"
    out, doc = _diff(plain, plain_again, "--fail")
    assert out.returncode == 0, doc["regressions"]
    assert doc["regressions"] == []


@pytest.mark.slow
def test_a_slower_backend_is_found_with_its_phase(base: str, slow_backend: str) -> None:
    out, doc = _diff(base, slow_backend, "--fail")
    assert out.returncode == 3, out.stderr
    timed = {e["subject"]: e for e in _kinds(doc["regressions"], "compile_time")}
    assert {"total", "phase:backend"} <= set(timed), doc["regressions"]
    assert "phase:dynamo" not in timed  # the sleep is in the backend, and only there
    assert timed["phase:backend"]["new"] - timed["phase:backend"]["base"] > COMPILE_MIN_S
    backend = [e for e in doc["changed"] if e["subject"].endswith(":backend")]
    assert backend and backend[0]["base"] == "eager" and backend[0]["new"] == "slow_backend", doc["changed"]
    assert not _kinds(doc["regressions"], "graph_break") and not _kinds(doc["regressions"], "recompile")


@pytest.mark.slow
def test_report_with_a_baseline_gates_on_regression(base: str, again: str, changed: str) -> None:
    out = ctmon("report", changed, "--baseline", base, "--fail-on", "regression")
    assert out.returncode == 3, out.stderr
    assert "regression since" in out.stderr and "new graph break" in out.stderr
    assert "Traceback" not in out.stderr
    # the finding of the new break says it is new since BASE (the text only)
    line = marker_lines(JOB)["print"]
    text = " ".join(out.stdout.split())  # as the text wraps it
    assert "- new since rec.jsonl: new graph break at " in text and f"diff_job.py:{line}: Failed" in text, text
    assert "- new since rec.jsonl: new recompile of Net.forward" in text, text
    quiet = ctmon("report", again, "--baseline", base, "--fail-on", "regression")
    assert quiet.returncode == 0, quiet.stderr


@pytest.mark.slow
def test_record_with_a_baseline_gates_on_regression(base: str, tmp_path: Any) -> None:
    """The CI use in one command: record the job and gate it on BASE."""
    gate = ["--baseline", base, "--fail-on", "regression"]
    worse = record(tmp_path / "worse", [JOB, "--graph-break", "--new-shape"], torch_trace=False, options=["-q", *gate])
    assert worse.returncode == 3, worse.proc.stderr[-2000:]
    said = [ln for ln in worse.proc.stderr.splitlines() if ln.startswith("ctmon: regression since rec.jsonl: ")]
    assert any("new graph break" in ln for ln in said), worse.proc.stderr
    assert any("size mismatch at index 0" in ln for ln in said), worse.proc.stderr
    assert "Traceback" not in worse.proc.stderr
    same = record(tmp_path / "same", [JOB], torch_trace=False, options=["-q", *gate])
    assert same.returncode == 0, same.proc.stderr[-2000:]
    assert "regression since" not in same.proc.stderr


@pytest.mark.slow
def test_markdown_of_a_real_diff_renders_whole(base: str, changed: str) -> None:
    md = ctmon("diff", base, changed, "--md").stdout
    _assert_renders(md)
    items = [t.content for t in _tokens(md) if t.type == "text"]
    assert any("new graph break at" in x for x in items), items


@pytest.mark.slow
def test_a_changed_inductor_setting_is_named_in_the_cache_key(tmp_path: Any) -> None:
    """Two runs share one Inductor cache; the second sets an Inductor config
    flag (part of the FX graph cache key): every graph misses, and the diff
    says the key changed in inductor_config, for the forward and backward
    graphs, from the recordings and from the TORCH_TRACE directories alike;
    from the recordings (which keep the settings in force) it names the
    setting, max_autotune_pointwise, in the key's entry and as a setting."""
    shared = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    job = workload(os.path.join("findings", "cache_runs.py"))
    runs = []
    for name, flags in (("base", []), ("tuned", ["--tuned"])):
        run = record(tmp_path / name, [job, "--steps", "1", *flags], options=["-q"], extra_env=shared)
        assert run.returncode == 0, run.proc.stderr[-2000:]
        runs.append(run)
    setting = "torch._inductor.config.max_autotune_pointwise"
    for a, b in ((runs[0].recording, runs[1].recording), (runs[0].trace_dir, runs[1].trace_dir)):
        recorded = a == runs[0].recording  # a TORCH_TRACE has no settings: none is named
        out, doc = _diff(str(a), str(b))
        changed = _kinds(doc["changed"], "cache_key")
        keys = {e["subject"].rsplit(":", 1)[-1]: e for e in changed if e["subject"].startswith("fx_graph:")}
        assert set(keys) == {"forward", "backward"}, changed
        for e in keys.values():
            assert e["components"] == ["inductor_config"] and e["base"] != e["new"], e
            assert e.get("settings") == ([setting] if recorded else None), e
        # AOTAutograd's key holds the config too; PyTorch lists its components only when debug-logging
        (aot,) = [e for e in changed if e["subject"].startswith("aot_autograd:")]
        assert "key changed (PyTorch listed no components of it" in aot["what"], aot
        assert aot.get("settings") == ([setting] if recorded else None), aot
        config = [e["what"] for e in _kinds(doc["changed"], "config") if e["subject"].startswith("torch.")]
        assert config == ([f"{setting}: False (default) → True"] if recorded else []), doc["changed"]
        text = ctmon("diff", str(a), str(b)).stdout
        assert "FX graph cache for " in text and " forward: key changed in inductor_config" in text, text
        assert (" forward: key changed in inductor_config: max_autotune_pointwise\n" in text) == recorded, text


# -------------------------------------------- recorded fixtures (fast)


def _tokens(md: str) -> list[Any]:
    out = []
    for block in MarkdownIt("commonmark").parse(md):
        out += block.children or []
    return out


def _assert_renders(md: str) -> None:
    """As the report's Markdown is checked: code spans whole, no emphasis
    out of underscores or stars in names."""
    toks = _tokens(md)
    stray = [t.content for t in toks if t.type == "text" and "`" in t.content]
    assert not stray, stray
    assert not [t for t in toks if t.type == "em_open"], md


def test_markdown_of_recorded_runs_renders_whole() -> None:
    md = ctmon("diff", os.path.join(FIXTURES, "many_breaks.jsonl"), os.path.join(FIXTURES, "tour.jsonl"), "--md")
    assert md.returncode == 0, md.stderr
    _assert_renders(md.stdout)
    assert md.stdout.startswith("### ctmon diff: ")


def test_the_lean_report_holds_all_a_diff_reads() -> None:
    """The diff builds each side's report without findings, steps or system
    samples (the costly parts on a day-long run): its summary is the same."""
    for name in ("many_breaks.jsonl", "tour.jsonl"):
        path = os.path.join(FIXTURES, name)
        session, _ = load(path)
        full = run_summary(path, session, build_report(session))
        assert run_summary(path, session, build_report(session, lean=True)) == full, name
        assert full["graph_breaks"] or full["frames"], name  # something was compared


def test_bad_input_is_one_line_and_exit_2(tmp_path: Any) -> None:
    good = os.path.join(FIXTURES, "many_breaks.jsonl")
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"x": 1}\n')
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_containing(ctmon("diff", good), "two runs are needed")
    one_line_containing(ctmon("diff", good, str(tmp_path / "absent.jsonl")), "NEW", "absent.jsonl")
    one_line_containing(ctmon("diff", str(junk), good), "BASE", "junk.jsonl")
    one_line_containing(ctmon("diff", good, str(empty)), "NEW", "empty")
    one_line_containing(ctmon("diff", good, good, "--frobnicate"), "unknown option")
    # recordings of different scripts: not runs of one job
    other = os.path.join(FIXTURES, "healthy.jsonl")
    one_line_containing(ctmon("diff", other, good), "train.py", "pipeline.py", "--any-job")
    assert ctmon("diff", other, good, "--any-job").returncode == 0
    one_line_containing(ctmon("report", good, "--fail-on", "regression"), "--baseline")
    one_line_containing(ctmon("report", good, "--baseline", str(junk)), "--baseline", "junk.jsonl")


def test_record_reads_its_baseline_before_the_job_starts(tmp_path: Any) -> None:
    """A bad --baseline is one line, exit 2, and the job never runs."""
    marker = tmp_path / "ran"
    job = tmp_path / "job.py"
    job.write_text(f"open({str(marker)!r}, 'w').close()\n")
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"x": 1}\n')
    other_job = os.path.join(FIXTURES, "many_breaks.jsonl")  # a recording of another script
    rec = str(tmp_path / "rec.jsonl")

    def run(*opts: str) -> subprocess.CompletedProcess[str]:
        return ctmon("record", "-q", "-o", rec, *opts, str(job))

    one_line_containing(run("--fail-on", "regression"), "record", "--baseline")
    one_line_containing(run("--baseline", str(junk), "--fail-on", "regression"), "--baseline", "junk.jsonl")
    one_line_containing(run("--baseline", str(tmp_path / "absent.jsonl")), "--baseline", "absent.jsonl")
    one_line_containing(run("--baseline", other_job, "--fail-on", "regression"), "--baseline", "job.py")
    assert not marker.exists() and not os.path.exists(rec)


# ------------------------------------------------- the rules, by hand


def _run(**over: Any) -> dict[str, Any]:
    """A run summary as ``run_summary`` makes one: one frame compiled once."""
    run: dict[str, Any] = {
        "path": "r.jsonl",
        "input": "recording",
        "command": ["python", "train.py"],
        "cwd": "/home/me/proj",
        "session_id": "s",
        "versions": {"python": "3.11.7", "torch": "2.6.0", "triton": None, "cuda": None, "device": None},
        "config": {"recompile_limit": 8},
        "compile_calls": [{"file": "/home/me/proj/train.py", "line": 9, "backend": "inductor", "mode": None}],
        "compile": {
            "compiles": 1,
            "recompiles": 0,
            "graph_breaks": 0,
            "limit_hits": 0,
            "failures": 0,
            "frames": 1,
            "backward_compiles": 0,
            "total_time_s": 10.0,
            "phases_s": {"dynamo": 2.0, "backend": 8.0, "inductor": 7.0, "code_gen": 3.0},
            "traced_phases_s": {},
        },
        "cache": {"fx_graph": {"hit": 0, "miss": 1, "bypass": 0}, "aot_autograd": {"hit": 0, "miss": 1, "bypass": 0}},
        "frames": [_frame()],
        "compiles": [_compile("0/0", 10.0, 8.0)],
        "graph_breaks": [],
        "steps": _steps(100.0, 0.01),
        "gpu_mem_peak_bytes": None,
        "notes": [],
    }
    run.update(over)
    return run


def _frame(**over: Any) -> dict[str, Any]:
    f = {
        "frame_id": 0,
        "name": "GPT.forward",
        "file": "/home/me/proj/model.py",
        "line": 40,
        "compiles": 1,
        "recompile_reasons": [],
        "limit_hit": False,
        "recompile_limit": 8,
    }
    f.update(over)
    return f


def _compile(cid: str, time_s: float, backend_s: float, frame_id: int = 0) -> dict[str, Any]:
    return {"compile_id": cid, "frame_id": frame_id, "time_s": time_s, "phases_s": {"backend": backend_s}}


def _steps(p50: float, spread: float) -> dict[str, Any]:
    """Five blocks around ``p50``, ``spread`` apart (a share of it)."""
    blocks = [round(p50 * (1 + spread * k), 4) for k in (-1, -0.5, 0, 0.5, 1)]
    return {
        "steady": 100,
        "p50_ms": p50,
        "p90_ms": p50 * 1.1,
        "blocks_p50_ms": blocks,
        "blocks_p90_ms": [b * 1.1 for b in blocks],
    }


def _subjects(doc: dict[str, Any], verdict: str, kind: str) -> list[str]:
    return [e["subject"] for e in doc[verdict] if e["kind"] == kind]


def test_identical_runs_have_nothing_to_say() -> None:
    doc = compare(_run(), _run())
    assert doc["regressions"] == doc["improvements"] == doc["changed"] == []
    assert doc["unchanged"] and doc["method"]["step_time"]
    assert "no regression" in render_text(doc)


def test_a_step_time_shift_inside_the_runs_spread_is_not_a_regression() -> None:
    noisy = compare(_run(steps=_steps(100.0, 0.3)), _run(steps=_steps(120.0, 0.3)))
    assert _subjects(noisy, "regressions", "step_time") == []
    p50 = next(e for e in noisy["unchanged"] if e["subject"] == "step_p50")
    assert p50["noise_pct"] >= 30 and "within noise" in p50["what"]
    # the same shift on tight runs is one
    tight = compare(_run(steps=_steps(100.0, 0.01)), _run(steps=_steps(120.0, 0.01)))
    assert _subjects(tight, "regressions", "step_time") == ["step_p50", "step_p90"]
    # and under bench's "same speed" (5 %) never, however tight
    close = compare(_run(steps=_steps(100.0, 0.001)), _run(steps=_steps(103.0, 0.001)))
    assert _subjects(close, "regressions", "step_time") == []
    faster = compare(_run(steps=_steps(120.0, 0.01)), _run(steps=_steps(100.0, 0.01)))
    assert _subjects(faster, "improvements", "step_time") == ["step_p50", "step_p90"]


def test_too_few_steady_steps_decide_nothing() -> None:
    few = {"steady": 2, "p50_ms": 10.0, "p90_ms": 11.0, "blocks_p50_ms": [], "blocks_p90_ms": []}
    doc = compare(_run(steps=few), _run(steps={**few, "p50_ms": 30.0, "p90_ms": 33.0}))
    assert _subjects(doc, "regressions", "step_time") == []
    assert "too few steady steps" in next(e for e in doc["unchanged"] if e["subject"] == "step_p50")["what"]


def test_compile_time_is_called_with_its_phase_and_over_the_noise_only() -> None:
    slower = _run(
        compile={**_run()["compile"], "total_time_s": 14.0, "phases_s": {"dynamo": 2.0, "backend": 12.0}},
        compiles=[_compile("0/0", 14.0, 12.0)],
    )
    doc = compare(_run(), slower)
    assert _subjects(doc, "regressions", "compile_time") == ["total", "phase:backend"]
    assert "phase:dynamo" in _subjects(doc, "unchanged", "compile_time")
    # under a second: never, however large a share
    small = _run(compile={**_run()["compile"], "total_time_s": 0.9}, compiles=[_compile("0/0", 0.9, 0.1)])
    assert (
        _subjects(
            compare(small, _run(compile={**small["compile"], "total_time_s": 1.7})), "regressions", "compile_time"
        )
        == []
    )


def test_phase_timers_absent_from_one_run_are_not_compared() -> None:
    """A recording made before ctmon read PyTorch's phase timers has none:
    the other run's are not all "new"."""
    timed = _run(compile={**_run()["compile"], "traced_phases_s": {"inductor": 7.0, "code_gen": 3.0}})
    doc = compare(_run(), timed)
    assert not [e for lst in ("regressions", "unchanged") for e in doc[lst] if e["subject"].startswith("traced:")]
    both = compare(timed, _run(compile={**timed["compile"], "traced_phases_s": {"inductor": 9.5, "code_gen": 3.0}}))
    assert _subjects(both, "regressions", "compile_time") == ["traced:inductor"]


def test_paired_compiles_that_disagree_are_noise() -> None:
    """Two compiles of one frame each: one 4x slower, one 4x faster, the
    total up by 4 s: the ratios' interval holds 1, so it is not called."""
    frame = _frame(compiles=2, recompile_reasons=["0/0: size mismatch"])
    a = _run(
        frames=[frame],
        compiles=[_compile("0/0", 2.0, 1.0), _compile("0/1", 8.0, 4.0)],
        compile={**_run()["compile"], "compiles": 2, "total_time_s": 10.0},
    )
    b = _run(
        frames=[frame],
        compiles=[_compile("0/0", 8.0, 4.0), _compile("0/1", 2.0, 1.0)],
        compile={**_run()["compile"], "compiles": 2, "total_time_s": 14.0},
    )
    doc = compare(a, b)
    total = next(e for e in doc["unchanged"] if e["subject"] == "total")
    assert total["paired"] == 2 and total["ratio_ci"][0] < 1 < total["ratio_ci"][1]
    assert "within noise" in total["what"]


def test_frames_and_breaks_match_across_checkouts_and_compile_ids() -> None:
    """The same code run from another directory, its recompile under another
    compile id: nothing new."""
    brk = {"file": "/home/me/proj/model.py", "line": 50, "reason": "print", "count": 1}
    a = _run(frames=[_frame(recompile_reasons=["0/0: tensor 'x' size mismatch"])], graph_breaks=[brk])
    b = _run(
        cwd="/ci/work",
        frames=[_frame(file="/ci/work/model.py", recompile_reasons=["1/0: tensor 'x' size mismatch"])],
        graph_breaks=[{**brk, "file": "/ci/work/model.py"}],
        compile_calls=[{"file": "/ci/work/train.py", "line": 9, "backend": "inductor", "mode": None}],
    )
    doc = compare(a, b)
    assert doc["regressions"] == [] and doc["improvements"] == [], doc


def test_new_and_gone_breaks_recompiles_and_the_limit_in_order() -> None:
    a = _run(graph_breaks=[{"file": "/home/me/proj/model.py", "line": 50, "reason": "print", "count": 1}])
    b = _run(
        frames=[_frame(compiles=8, recompile_reasons=["0/0: size mismatch at index 1"], limit_hit=True)],
        graph_breaks=[{"file": "/home/me/proj/model.py", "line": 61, "reason": "item()", "count": 2}],
        compile={**_run()["compile"], "compiles": 8, "recompiles": 7, "limit_hits": 1},
    )
    doc = compare(a, b)
    kinds = [e["kind"] for e in doc["regressions"]]
    assert kinds[:3] == ["limit_hit", "graph_break", "recompile"], kinds
    assert doc["regressions"][1]["subject"] == "model.py:61"  # where the job ran from
    assert doc["regressions"][2]["new"] == "size mismatch at index 1"
    assert _subjects(doc, "improvements", "graph_break") == ["model.py:50"]
    assert {"compiles", "recompiles", "limit_hits"} <= set(_subjects(doc, "regressions", "count"))


def test_what_is_new_since_base_says_so() -> None:
    """A break, recompile or frame NEW has and BASE had not reads "new since
    BASE" in the text and Markdown; one gone, or only counted again, not."""
    gone = {"file": "/home/me/proj/model.py", "line": 50, "reason": "print", "count": 1}
    a = _run(graph_breaks=[gone])
    b = _run(
        frames=[_frame(compiles=2, recompile_reasons=["0/1: size mismatch at index 1"])],
        graph_breaks=[{"file": "/home/me/proj/model.py", "line": 61, "reason": "item()", "count": 2}],
    )
    doc = compare(a, b)
    for out in (render_text(doc), render_markdown(doc)):
        marked = [ln for ln in out.splitlines() if "new since BASE" in ln]
        assert len(marked) == 2, out
        assert "model.py:61" in marked[0] and "size mismatch at index 1" in marked[1], marked
    _assert_renders(render_markdown(doc))
    new_break = _kinds(doc["regressions"], "graph_break")[0]
    assert (new_break["file"], new_break["line"]) == ("model.py", 61)  # for NEW's findings at that place


def test_report_findings_at_a_new_place_say_new_since_base() -> None:
    doc = compare(
        _run(), _run(graph_breaks=[{"file": "/home/me/proj/model.py", "line": 61, "reason": "item()", "count": 2}])
    )
    finding = {"title": "Graph breaks", "file": "/home/me/proj/model.py", "line": 61, "evidence": ["model.py:61 ×2"]}
    elsewhere = {"title": "Other", "file": "/home/me/proj/model.py", "line": 70, "evidence": ["x"]}
    report = {"cwd": "/home/me/proj", "findings": [finding, elsewhere]}
    shown = mark_new_findings(report, doc, "base.jsonl")
    first = shown["findings"][0]["evidence"]
    assert first[0].startswith("new since base.jsonl: new graph break at model.py:61: item()"), first
    assert first[1:] == ["model.py:61 ×2"]
    assert shown["findings"][1] == elsewhere
    # a new recompile marks the findings at its frame that quote its reason, not the others there
    frame = _frame(compiles=2, recompile_reasons=["0/1: size mismatch at index 1"])
    doc = compare(_run(), _run(frames=[frame]))
    quoting = {"file": "/home/me/proj/model.py", "line": 40, "evidence": ["0/1: size mismatch at index 1"]}
    cost = {"file": "/home/me/proj/model.py", "line": 40, "evidence": ["GPT.forward: 3 s in 2 compiles"]}
    shown = mark_new_findings({**report, "findings": [quoting, cost]}, doc, "base.jsonl")
    assert shown["findings"][0]["evidence"][0].startswith("new since base.jsonl: new recompile of GPT.forward")
    assert shown["findings"][1] == cost
    assert report["findings"][0]["evidence"] == ["model.py:61 ×2"]  # the report itself (its JSON) unchanged


def test_caches_versions_and_memory() -> None:
    a = _run(gpu_mem_peak_bytes=10 << 30)
    b = _run(
        versions={**_run()["versions"], "torch": "2.7.0"},
        cache={"fx_graph": {"hit": 1, "miss": 3, "bypass": 0}, "aot_autograd": {"hit": 0, "miss": 1, "bypass": 0}},
        gpu_mem_peak_bytes=12 << 30,
    )
    doc = compare(a, b)
    assert _subjects(doc, "regressions", "cache") == ["fx_graph.miss"]
    assert _subjects(doc, "improvements", "cache") == ["fx_graph.hit"]
    assert _subjects(doc, "changed", "version") == ["torch"]  # context, not a regression
    assert _subjects(doc, "regressions", "gpu_memory") == ["gpu_mem_peak"]
    # a few MiB of a 10 GiB peak is noise
    near = compare(a, _run(gpu_mem_peak_bytes=(10 << 30) + (32 << 20)))
    assert _subjects(near, "unchanged", "gpu_memory") == ["gpu_mem_peak"]
    # a run that does not know its versions (a TORCH_TRACE) differs in none
    unknown = {k: None for k in _run()["versions"]}
    assert compare(_run(), _run(versions=unknown))["changed"] == []


def test_which_job_a_run_is() -> None:
    assert script_of(["python", "/x/train.py", "--lr", "1"]) == "train.py"
    assert script_of(["python", "-m", "pkg.train"]) == "-m pkg.train"
    assert script_of([]) is None
    assert same_job(_run(), _run(command=["python", "/elsewhere/train.py", "--flag"])) is None
    assert same_job(_run(), _run(command=[])) is None  # a TORCH_TRACE names no command
    assert "not runs of one job" in str(same_job(_run(), _run(command=["python", "eval.py"])))


def test_markdown_of_awkward_text_renders_whole() -> None:
    brk = {
        "file": "/p/my_model.py",
        "line": 3,
        "reason": "call `torch._dynamo.graph_break()` | *x* __init__",
        "count": 1,
    }
    md = render_markdown(compare(_run(), _run(graph_breaks=[brk])))
    _assert_renders(md)
    codes = [t.content for t in _tokens(md) if t.type == "code_inline"]
    assert "torch._dynamo.graph_break()" in codes


# ------------------------------------------------- cache keys, from events


def _cache_key_session(inductor_hash: str, *, components: bool = True) -> Session:
    """One frame compiled once, its forward graph's FX cache record keyed by
    components of which ``inductor_config`` hashes to ``inductor_hash``."""
    s = Session()
    where = {"compile_id": "0/0", "frame_id": 0}
    s.apply({"kind": "compile_start", "t": 1.0, **where, "name": "forward", "file": "/p/train.py", "line": 12})
    pairs = [["gm", "g1"], ["fx_kwargs[cpp_wrapper]", "f0"], ["inductor_config", inductor_hash]]
    cache: dict[str, Any] = {"kind": "cache", "t": 1.5, **where, "cache": "fx_graph", "result": "miss"}
    cache.update(key="k" + inductor_hash, graph="forward", components=pairs if components else [])
    s.apply(cache)
    s.apply(
        {
            "kind": "compile",
            "t": 2.0,
            **where,
            "co_name": "forward",
            "co_filename": "/p/train.py",
            "co_firstlineno": 12,
            "has_guarded_code": True,
        }
    )
    assert s.bad_events == 0
    return s


def _summary(s: Session) -> Any:
    return run_summary("r.jsonl", s, build_report(s, lean=True))


def test_a_cache_key_change_names_its_components() -> None:
    base, new = _summary(_cache_key_session("c1")), _summary(_cache_key_session("c2"))
    doc = compare(base, new)
    (entry,) = _kinds(doc["changed"], "cache_key")
    assert entry["components"] == ["inductor_config"] and (entry["base"], entry["new"]) == ("kc1", "kc2")
    assert entry["what"] == "FX graph cache for /p/train.py:12 forward: key changed in inductor_config"
    assert "key changed in inductor_config" in render_text(doc)
    assert not _kinds(doc["regressions"], "cache_key")  # the misses it causes are the regression
    # the same key: nothing to say; a run without components still says the key changed
    assert not _kinds(compare(base, _summary(_cache_key_session("c1")))["changed"], "cache_key")
    bare = _summary(_cache_key_session("c3", components=False))
    (entry,) = _kinds(compare(base, bare)["changed"], "cache_key")
    assert entry["components"] == [] and "listed no components" in entry["what"]
    # a summary made before cache keys were kept compares nothing of them
    old = {k: v for k, v in base.items() if k != "cache_keys"}
    assert not _kinds(compare(old, new)["changed"], "cache_key")


def test_a_phase_timed_two_ways_reads_as_two_figures() -> None:
    """Inductor's time from the compiles' own metrics and from PyTorch's phase
    timers are two figures: their lines must not read alike."""
    base, new = _summary(_cache_key_session("c1")), _summary(_cache_key_session("c1"))
    for run, seconds in ((base, 2.0), (new, 9.0)):
        run["compile"]["phases_s"] = {"backend": seconds + 1, "inductor": seconds, "code_gen": 0.1}
        run["compile"]["traced_phases_s"] = {"inductor": seconds + 0.5, "aot_autograd": 0.2}
    doc = compare(base, new)
    whats = [
        e["what"]
        for e in doc["regressions"] + doc["unchanged"]
        if e["subject"] in ("phase:inductor", "traced:inductor")
    ]
    assert len(whats) == 2 and len(set(w.split(" 2.")[0] for w in whats)) == 2, whats
    assert any(w.startswith("compile time in Inductor (traced)") for w in whats), whats
