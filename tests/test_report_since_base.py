"""Findings new since BASE, in every output of ``--baseline BASE``: the
report's JSON (``new_since_base``), Markdown and text, ``record
--baseline``'s closing lines, and the live screen's comparison
(ctmon/findings/since_base.py), on a real pair of runs.

The pair is tests/workloads/diff_job.py (eager backend): BASE with
``--new-shape`` (a shape recompile at its last step), NEW with
``--graph-break --new-shape``: a graph break BASE had not, and the same
shape recompile. So NEW's graph-break finding is new since BASE, and its
shape-recompile finding is not."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest
from helpers import ctmon, marker_lines, one_line_containing, workload
from markdown_it import MarkdownIt

from ctmon.cli.diff import base_facts, load_run, new_places
from ctmon.findings.since_base import new_places as live_new_places
from ctmon.read.load import load
from ctmon.report.build import build_report
from ctmon.report.diff import compare, run_summary

JOB = workload("diff_job.py")
BREAK_LINE = marker_lines(JOB)["print"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """BASE recorded, then NEW recorded with ``record --baseline BASE`` (its
    closing lines kept for the test of them)."""
    tmp = tmp_path_factory.mktemp("since")
    base, new = str(tmp / "shape.jsonl"), str(tmp / "pr.jsonl")
    run = ctmon("record", "-q", "-o", base, JOB, "--new-shape")
    assert run.returncode == 0, run.stderr[-2000:]
    run = ctmon("record", "-o", new, "--baseline", base, JOB, "--graph-break", "--new-shape")
    assert run.returncode == 0, run.stderr[-2000:]
    return {"base": base, "new": new, "record": run}


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    out = ctmon("report", *args)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return out


def _by_rule(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["id"].split(":")[0]: f for f in report["findings"]}


@pytest.mark.slow
def test_json_and_text_mark_the_new_breaks_finding_and_add_only_that(pair: dict[str, Any]) -> None:
    marked = json.loads(_report(pair["new"], "--json", "--baseline", pair["base"]).stdout)
    plain = json.loads(_report(pair["new"], "--json").stdout)
    found = _by_rule(marked)
    brk = found["graph-breaks"]
    assert brk["line"] == BREAK_LINE, brk
    assert len(brk["new_since_base"]) == 1, brk
    assert (
        brk["new_since_base"][0].startswith("new graph break at ")
        and f"diff_job.py:{BREAK_LINE}: " in (brk["new_since_base"][0])
    ), brk["new_since_base"]
    # BASE recompiled the same frame for the same shape: that finding is not new
    assert "new_since_base" not in found["shape-recompiles"], found["shape-recompiles"]
    # keys only added: without the marks, the report is the report made without --baseline
    for f in marked["findings"]:
        f.pop("new_since_base", None)
    assert marked == plain
    assert "new_since_base" not in json.dumps(plain)
    # the text says the same, first in the finding's evidence
    text = _report(pair["new"], "--baseline", pair["base"]).stdout
    said = [ln.strip() for ln in text.splitlines() if "new since shape.jsonl:" in ln]
    assert len(said) == 1 and said[0].startswith("- new since shape.jsonl: new graph break at"), text[:3000]


@pytest.mark.slow
def test_markdown_marks_the_new_breaks_finding_only(pair: dict[str, Any]) -> None:
    md = _report(pair["new"], "--md", "--baseline", pair["base"]).stdout
    lines = md.splitlines()
    title = next(ln for ln in lines if ln.startswith("- **warning**") and "Graph breaks" in ln)
    assert title.endswith("**new since shape.jsonl**"), title
    said = lines[lines.index(title) + 1]
    assert said.startswith("  - New since shape.jsonl: new graph break at"), said
    shape = [ln for ln in lines if ln.startswith("- **") and f"diff_job.py:{BREAK_LINE}`" not in ln]
    assert shape and not any("new since" in ln for ln in shape), shape
    html = MarkdownIt().render(md)
    assert html.count("<strong>new since shape.jsonl</strong>") == 1, html  # bold, not stars
    assert "new since" not in _report(pair["new"], "--md").stdout  # none without --baseline


@pytest.mark.slow
def test_record_with_a_baseline_marks_the_new_finding_in_its_closing_lines(pair: dict[str, Any]) -> None:
    said = [ln for ln in pair["record"].stderr.splitlines() if ln.startswith("ctmon: WARNING:")]
    brk = [ln for ln in said if "Graph breaks" in ln]
    assert len(brk) == 1 and "[new since shape.jsonl]" in brk[0], said
    others = [ln for ln in said if ln not in brk]
    assert others and not any("new since" in ln for ln in others), said


@pytest.mark.slow
def test_the_live_comparison_finds_what_the_diff_finds(pair: dict[str, Any]) -> None:
    """The screen compares its store with BASE's facts; the reports take the
    diff's regressions: the same new places, said the same way."""
    base = load_run(pair["base"], "BASE")
    session, _ = load(pair["new"])
    doc = compare(base, run_summary(pair["new"], session, build_report(session, lean=True)))
    live = live_new_places(base_facts(base, "shape.jsonl"), session)
    assert sorted(live, key=repr) == sorted(new_places(doc), key=repr)
    assert [n.kind for n in live].count("graph_break") == 1, live


@pytest.mark.slow
def test_a_bad_baseline_is_one_line_before_the_job_starts(pair: dict[str, Any], tmp_path: Any) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "job.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    missing = str(tmp_path / "missing.jsonl")
    out = ctmon("attach", "--no-tui", "--baseline", missing, str(script))
    one_line_containing(out, "attach: --baseline", "missing.jsonl")
    out = ctmon("attach", "--no-tui", "--baseline", pair["base"], str(script))  # another script's run
    one_line_containing(out, "attach: --baseline", "not runs of one job")
    assert not os.path.exists(marker)
    out = ctmon("replay", pair["new"], "--baseline", missing)
    one_line_containing(out, "replay: --baseline", "missing.jsonl")
    other = tmp_path / "other.jsonl"
    with open(pair["base"]) as f:  # the same run, said to be of another script
        other.write_text(f.read().replace("diff_job.py", "other_job.py"))
    out = ctmon("replay", pair["new"], "--baseline", str(other))
    one_line_containing(out, "replay: --baseline", "not runs of one job")
