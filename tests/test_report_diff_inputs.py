"""``ctmon diff`` over more than two recordings: two ``ctmon bench``
outputs (mode by mode, each mode's runs its noise), one job's node
recordings merged into each side (a directory of them, or ``--base``/
``--new`` with each named), and ``--any-job`` for ``--baseline``.

Real runs (marked slow): ``ctmon bench`` of tests/workloads/diff_job.py in
eager and default (its backend stays ``eager``: cheap), two runs a mode;
two torchrun nodes (tests/workloads/ddp_ranks.py), each under its own
``ctmon record``, for a plain run and one where rank 1 recompiles. How a
side is recognised is tested on directories of recorded fixtures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
from helpers import ROOT, ctmon, env_with, one_line_containing, workload
from markdown_it import MarkdownIt

from ctmon.wire.errors import RecordingError

JOB = workload("diff_job.py")
NODES_JOB = workload("ddp_ranks.py")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "recordings")
TOUR = os.path.join(FIXTURES, "tour.jsonl")  # a recording of pipeline.py
OTHER_JOB = os.path.join(FIXTURES, "healthy.jsonl")  # a recording of train.py


def _diff(*args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = ctmon("diff", *args, "--json")
    assert "Traceback" not in out.stderr, out.stderr
    return out, json.loads(out.stdout) if out.stdout else {}


def _kinds(entries: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in entries if e["kind"] == kind]


def _dir(tmp: Any, name: str, files: dict[str, str]) -> str:
    """A directory holding copies of recordings, by their new names."""
    d = tmp / name
    d.mkdir()
    for new, src in files.items():
        shutil.copy(src, d / new)
    return str(d)


# ------------------------------------------------------ two bench outputs


def _bench(tmp: Any, name: str, *flags: str) -> str:
    out_dir = str(tmp / name)
    cmd = ["bench", "--modes", "eager,default", "--runs", "2", "-o", out_dir, "--json", JOB, *flags]
    run = ctmon(*cmd, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {r["mode"]: r for r in json.loads(run.stdout)["modes"]}
    assert all(r["runs"] == 2 and r["status"] == "ok" for r in rows.values()), rows
    return out_dir


@pytest.fixture(scope="module")
def benches(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    tmp = tmp_path_factory.mktemp("bench_diff")
    return _bench(tmp, "main"), _bench(tmp, "pr", "--graph-break")


@pytest.mark.slow
def test_two_bench_outputs_are_compared_mode_by_mode(benches: tuple[str, str]) -> None:
    main, pr = benches
    out, doc = _diff(main, pr, "--fail")
    assert out.returncode == 3, out.stderr
    assert doc["input"] == "bench" and list(doc["modes"]) == ["eager", "default"]
    assert doc["only_base"] == doc["only_new"] == [] and doc["not_read"] == []
    assert doc["base"]["modes"] == doc["new"]["modes"] == ["eager", "default"]
    # the break is in default's compiled forward; eager compiles nothing, so it has none
    breaks = _kinds(doc["modes"]["default"]["regressions"], "graph_break")
    assert len(breaks) == 1 and "print" in breaks[0]["reason"], doc["modes"]["default"]["regressions"]
    assert not _kinds(doc["modes"]["eager"]["regressions"], "graph_break")
    # the top level lists every mode's entries again, each naming its mode
    flat = _kinds(doc["regressions"], "graph_break")
    assert [e["mode"] for e in flat] == ["default"] and flat[0]["what"] == breaks[0]["what"]
    assert {e["mode"] for e in doc["unchanged"]} == {"eager", "default"}
    # step time: each mode's two runs are its two samples (each run's median), so each side has an interval
    for mode in ("eager", "default"):
        steps = _kinds(doc["modes"][mode]["unchanged"] + doc["modes"][mode]["regressions"], "step_time")
        assert {e["subject"] for e in steps} == {"step_p50", "step_p90"}, steps
        assert all(e["base_ci"] and e["new_ci"] for e in steps), steps
    assert "each run's steady p50" in doc["method"]["step_time"]
    text = ctmon("diff", main, pr)
    assert text.returncode == 0, text.stderr
    assert "── default: REGRESSED" in text.stdout and "── eager: no regression" in text.stdout
    assert text.stdout.rstrip().endswith("(in default)") and "new graph break at" in text.stdout
    md = ctmon("diff", main, pr, "--md").stdout
    assert md.startswith("### ctmon diff (bench): REGRESSED")
    tokens = [t for b in MarkdownIt("commonmark").parse(md) for t in (b.children or [])]
    assert not [t for t in tokens if t.type == "em_open"], md
    same = ctmon("diff", main, main, "--fail")
    assert same.returncode == 0 and same.stdout.rstrip().endswith("no regression"), same.stdout


@pytest.mark.slow
def test_modes_in_one_bench_output_only_are_named(benches: tuple[str, str], tmp_path: Any) -> None:
    main, pr = benches
    eager_only = str(tmp_path / "eager_only")
    shutil.copytree(pr, eager_only, ignore=shutil.ignore_patterns("default*"))
    out, doc = _diff(main, eager_only, "--fail")
    assert out.returncode == 0, doc["regressions"]  # a mode not run is not a regression
    assert list(doc["modes"]) == ["eager"] and doc["only_base"] == ["default"] and doc["only_new"] == []
    assert "in BASE only: default" in ctmon("diff", main, eager_only).stdout
    # NEW's default run that cannot be read: said, and a regression (the gate must not pass it)
    broken = str(tmp_path / "broken")
    shutil.copytree(pr, broken)
    with open(os.path.join(broken, "default.jsonl"), "w") as f:
        f.write('{"x": 1}\n')
    out, doc = _diff(main, broken, "--fail")
    assert out.returncode == 3 and "the mode is not compared" in out.stderr, out.stderr
    assert [(e["mode"], e["kind"]) for e in doc["regressions"]] == [("default", "mode")], doc["regressions"]
    assert doc["not_read"][0]["side"] == "new" and doc["not_read"][0]["mode"] == "default"


@pytest.mark.slow
def test_a_bench_output_beside_one_run_is_refused(benches: tuple[str, str], tmp_path: Any) -> None:
    main, _ = benches
    one_line_containing(ctmon("diff", main, TOUR), "diff: NEW", "is one run", "'ctmon bench' output")
    one_line_containing(ctmon("diff", TOUR, main), "diff: BASE", "is one run")
    one_line_containing(ctmon("report", TOUR, "--baseline", main), "--baseline", "'ctmon bench' output")
    # a bench output with a recording of something else in it: not one kind
    mixed = str(tmp_path / "mixed")
    shutil.copytree(main, mixed)
    shutil.copy(TOUR, os.path.join(mixed, "node0.jsonl"))
    one_line_containing(ctmon("diff", main, mixed), "diff: NEW", "mixes 'ctmon bench' runs")


# ----------------------------------------------- one job's nodes, merged


def _two_nodes(tmp: str, *flags: str) -> str:
    """Two torchrun nodes of one job, each recorded by its own ctmon, in one directory."""
    from test_whole_ranks import free_port

    os.makedirs(tmp)
    port = free_port()
    procs = []
    for node in (0, 1):
        launcher = ["torchrun", "--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", "1"]
        launcher += ["--master_addr", "127.0.0.1", "--master_port", str(port)]
        rec = os.path.join(tmp, f"node{node}.jsonl")
        cmd = [sys.executable, "-m", "ctmon", "record", "-q", "-o", rec, "--", *launcher, NODES_JOB, *flags]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env_with(), stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    return tmp


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    tmp = str(tmp_path_factory.mktemp("nodes_diff"))
    return _two_nodes(os.path.join(tmp, "main")), _two_nodes(os.path.join(tmp, "pr"), "--diverge")


def _in(d: str) -> list[str]:
    return [os.path.join(d, "node0.jsonl"), os.path.join(d, "node1.jsonl")]


@pytest.mark.slow
def test_each_side_can_be_one_jobs_nodes_merged(nodes: tuple[str, str]) -> None:
    """Rank 1 (on the second node) recompiles in NEW only: a diff of the
    first nodes' recordings alone cannot see it; the merged runs can."""
    main, pr = nodes
    out, doc = _diff(main, pr, "--fail")
    assert out.returncode == 3, out.stderr
    assert doc["base"]["paths"] == _in(main) and doc["new"]["paths"] == _in(pr)
    counts = {e["subject"]: e for e in _kinds(doc["regressions"], "count")}
    assert counts["recompiles"]["base"] == 0 and counts["recompiles"]["new"] == 1, doc["regressions"]
    # the same runs, each file named
    named, by_files = _diff("--base", *_in(main), "--new", *_in(pr))
    assert named.returncode == 0, named.stderr
    assert by_files["regressions"] == doc["regressions"]
    assert "2 recordings, merged" in ctmon("diff", main, pr).stdout
    # the first node alone: rank 1's recompile is not in it
    _, first = _diff(_in(main)[0], _in(pr)[0])
    assert not [e for e in _kinds(first["regressions"], "count") if e["subject"] == "recompiles"], first
    # a directory of one job's nodes as --baseline, and the merged NEW beside it
    gated = ctmon("report", *_in(pr), "--baseline", main, "--fail-on", "regression")
    assert gated.returncode == 3 and "regression since main: recompiles 0 → 1" in gated.stderr, gated.stderr
    quiet = ctmon("report", *_in(main), "--baseline", main, "--fail-on", "regression")
    assert quiet.returncode == 0, quiet.stderr


@pytest.mark.slow
def test_node_recordings_of_two_jobs_are_refused(nodes: tuple[str, str], tmp_path: Any) -> None:
    main, pr = nodes
    two_jobs = _dir(tmp_path, "two_jobs", {"node0.jsonl": _in(main)[0], "node1.jsonl": _in(pr)[1]})
    one_line_containing(ctmon("diff", two_jobs, pr), "diff: BASE", "not one job")
    one_line_containing(ctmon("diff", "--base", _in(main)[0], _in(pr)[1], "--new", *_in(pr)), "not one job")


# --------------------------------------------- how a side is recognised


def test_a_bench_output_is_told_by_its_recordings_names(tmp_path: Any) -> None:
    from ctmon.read.inputs import BENCH, recognize

    d = _dir(
        tmp_path,
        "bench",
        {
            "eager.jsonl": TOUR,
            "eager-2.jsonl": TOUR,
            "max-autotune-no-cudagraphs.jsonl": TOUR,
            "max-autotune-no-cudagraphs-2.jsonl": TOUR,
            "max-autotune-no-cudagraphs-warm.jsonl": TOUR,
            "try.jsonl": TOUR,
            "default-3.jsonl": TOUR,  # a mode whose first run is gone: nothing cold to compare
        },
    )
    (tmp_path / "bench" / "eager.output.log").write_text("the job's output, not a trace\n")
    inp = recognize([d])
    assert inp.kind == BENCH
    at = os.path.join
    assert inp.modes == {
        "eager": [at(d, "eager.jsonl"), at(d, "eager-2.jsonl")],
        "max-autotune-no-cudagraphs": [at(d, "max-autotune-no-cudagraphs.jsonl")]
        + [at(d, "max-autotune-no-cudagraphs-2.jsonl")],
        "try": [at(d, "try.jsonl")],
    }


def test_a_run_is_a_file_a_trace_directory_or_a_directory_of_nodes(tmp_path: Any) -> None:
    from ctmon.read.inputs import RUN, recognize

    assert recognize([TOUR]).paths == [TOUR] and recognize([TOUR]).kind == RUN
    nodes = _dir(tmp_path, "nodes", {"n0.jsonl": TOUR, "n1.jsonl": OTHER_JOB})
    (tmp_path / "nodes" / "n0.output.log").write_text("output\n")
    assert recognize([nodes]).paths == [os.path.join(nodes, "n0.jsonl"), os.path.join(nodes, "n1.jsonl")]
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "dedicated_log_torch_trace_1.log").write_text("")
    assert recognize([str(trace)]).paths == [str(trace)]
    assert recognize([str(trace), str(trace)]).paths == [str(trace), str(trace)]  # a job's ranks' directories


@pytest.mark.parametrize(
    "layout, said",
    [
        ({}, "empty of runs"),
        ({"x.log": "", "r.jsonl": TOUR}, "both PyTorch trace logs"),
        ({"default.jsonl": TOUR, "node0.jsonl": TOUR}, "mixes 'ctmon bench' runs"),
        ({"default-warm.jsonl": TOUR}, "only --warm runs"),
    ],
)
def test_a_directory_of_no_one_kind_is_refused(tmp_path: Any, layout: dict[str, str], said: str) -> None:
    from ctmon.read.inputs import recognize

    d = tmp_path / "side"
    d.mkdir()
    for name, src in layout.items():
        if src:
            shutil.copy(src, d / name)
        else:
            (d / name).write_text("")
    with pytest.raises(RecordingError, match=said):
        recognize([str(d)])
    one_line_containing(ctmon("diff", TOUR, str(d)), "diff: NEW", said)


def test_several_paths_on_one_side_must_be_one_kind(tmp_path: Any) -> None:
    from ctmon.read.inputs import recognize

    bench = _dir(tmp_path, "bench", {"eager.jsonl": TOUR})
    with pytest.raises(RecordingError, match="a directory and"):
        recognize([bench, TOUR])
    with pytest.raises(RecordingError, match="only TORCH_TRACE directories are read together"):
        recognize([bench, bench])
    one_line_containing(ctmon("diff", "--base", TOUR, bench, "--new", TOUR), "diff: BASE", "a directory and")
    # recordings of single-process runs are no nodes of one job
    one_line_containing(ctmon("diff", "--base", TOUR, TOUR, "--new", TOUR), "diff: BASE", "holds no ranks")


def test_base_and_new_options_are_unambiguous() -> None:
    one_line_containing(ctmon("diff", "--base", TOUR), "both sides are needed")
    one_line_containing(ctmon("diff", TOUR, "--base", TOUR, "--new", TOUR), "name each side's files after")
    one_line_containing(ctmon("diff", "--base", TOUR, "--base", TOUR, "--new", TOUR), "--base is given twice")
    same = ctmon("diff", "--base", TOUR, "--new", TOUR, "--json", "--fail")
    assert same.returncode == 0 and json.loads(same.stdout)["regressions"] == [], same.stderr
    assert "ctmon diff --base FILE" in ctmon("diff", "--help").stdout


def test_bench_step_samples_are_the_runs_where_there_are_two() -> None:
    from ctmon.report.diff_bench import bench_steps

    def steps(p50: float | None, blocks: list[float]) -> Any:
        p90 = None if p50 is None else p50 * 1.2
        return {"steady": 10, "p50_ms": p50, "p90_ms": p90, "blocks_p50_ms": blocks, "blocks_p90_ms": blocks}

    first = steps(10.0, [9.0, 10.0, 11.0])
    assert bench_steps(first, [first]) is first  # one run: its own blocks
    assert bench_steps(first, [first, steps(None, [])]) is first  # a run with no steady steps is no sample
    both = bench_steps(first, [first, steps(12.0, [12.0]), steps(14.0, [14.0])])
    assert both["runs"] == 3 and both["p50_ms"] == 12.0 and both["blocks_p50_ms"] == [10.0, 12.0, 14.0]
    assert both["steady"] == 30


# ----------------------------------------------- --any-job with --baseline


def test_report_baseline_of_another_script_needs_any_job() -> None:
    refused = ctmon("report", TOUR, "--baseline", OTHER_JOB)
    one_line_containing(refused, "--baseline", "train.py", "pipeline.py", "--any-job")
    out = ctmon("report", TOUR, "--baseline", OTHER_JOB, "--any-job", "--fail-on", "regression")
    assert out.returncode == 3 and "regression since healthy.jsonl" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    one_line_containing(ctmon("report", TOUR, "--any-job"), "--any-job goes with --baseline")


def test_record_baseline_of_another_script_needs_any_job(tmp_path: Any) -> None:
    marker = tmp_path / "ran"
    job = tmp_path / "job.py"
    job.write_text(f"open({str(marker)!r}, 'w').close()\n")
    rec = str(tmp_path / "rec.jsonl")

    def run(*opts: str) -> subprocess.CompletedProcess[str]:
        return ctmon("record", "-q", "-o", rec, *opts, str(job))

    one_line_containing(run("--baseline", OTHER_JOB), "--baseline", "job.py", "--any-job")
    assert not marker.exists()
    one_line_containing(run("--any-job"), "--any-job goes with --baseline")
    ran = run("--baseline", OTHER_JOB, "--any-job", "--fail-on", "regression")
    # BASE's breaks are gone in this run (an improvement): no regression, and the job ran
    assert ran.returncode == 0, ran.stderr
    assert marker.exists() and os.path.exists(rec)


def test_each_regression_since_the_baseline_is_one_stderr_line() -> None:
    """A recompile reason can hold PyTorch's stack trace, lines of it: the
    gate's line per regression keeps the reason's first line only."""
    out = ctmon("report", TOUR, "--baseline", os.path.join(FIXTURES, "many_breaks.jsonl"), "--fail-on", "regression")
    assert out.returncode == 3, out.stderr
    said = [ln for ln in out.stderr.splitlines() if "regression since" in ln]
    assert any("new recompile of" in ln for ln in said), out.stderr
    assert all(ln.startswith("ctmon: ") for ln in out.stderr.splitlines()), out.stderr
