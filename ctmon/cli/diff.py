"""``ctmon diff BASE NEW``: what changed between two runs of one job."""

from __future__ import annotations

import gc
import json
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctmon.cli import CliError
from ctmon.words.textsafe import clean

if TYPE_CHECKING:
    from ctmon.report.diff_model import DiffDoc, DiffEntry, RunSummary
    from ctmon.report.model import Finding, Report
    from ctmon.store import Session

HELP = """usage: ctmon diff BASE NEW [--json | --md] [--fail] [--any-job]

Compare two runs of one job: each a recording ('ctmon record') or a
TORCH_TRACE directory. Says what got worse, what got better, and what
differs (versions, settings), most important first: graph breaks and
recompiles (with their reasons), compile time in total and per phase, cache
results, steady step time (p50, p90) and GPU memory peak. Timings are
judged against the runs' own noise: a difference inside it is no regression.

options:
  --json      print the diff as JSON (schema: docs/REPORT.md, 'ctmon diff --json')
  --md        print Markdown, fit for a pull-request comment
  --fail      exit 3 when anything regressed (0 when nothing did)
  --any-job   compare runs of different scripts too
  -h, --help  show this help and exit

exit codes: 0, 3 with --fail when something regressed, 2 on bad input.
"""


def main(argv: list[str]) -> int:
    fmt, fail, any_job = "text", False, False
    paths: list[str] = []
    for a in argv:
        if a in ("-h", "--help"):
            sys.stdout.write(HELP)
            return 0
        if a in ("--json", "--md"):
            fmt = a[2:]
        elif a == "--fail":
            fail = True
        elif a == "--any-job":
            any_job = True
        elif a.startswith("-") and a != "-":
            raise CliError(f"diff: unknown option {a} (try: ctmon diff --help)")
        else:
            paths.append(a)
    if len(paths) != 2:
        raise CliError("diff: two runs are needed: ctmon diff BASE NEW (recordings or TORCH_TRACE directories)")
    doc = diff_paths(paths[0], paths[1], any_job=any_job)
    from ctmon.cli.report import _write_out

    if fmt == "json":
        _write_out(json.dumps(doc, indent=2, allow_nan=False, default=str) + "\n")
    elif fmt == "md":
        from ctmon.report.diff_render import render_markdown

        _write_out(render_markdown(doc))
    else:
        from ctmon.report.diff_render import render_text

        _write_out(render_text(doc))
    return 3 if fail and doc["regressions"] else 0


def load_run(path: str, label: str) -> RunSummary:
    """One side's summary; one line (exit 2) when it cannot be read."""
    from ctmon.cli.progress import reading
    from ctmon.read.merge import load_nodes
    from ctmon.report.build import build_report
    from ctmon.report.diff import run_summary
    from ctmon.report.gate import capture_lines
    from ctmon.wire.errors import RecordingError

    try:
        session, stats, _ = load_nodes([path], reading(path[:80]))
    except RecordingError as e:
        raise CliError(f"{label}: {e}") from None
    except OSError as e:  # a directory or file that went away or cannot be opened
        raise CliError(f"{label}: cannot read {path}: {e.strerror or e}") from None
    report = build_report(session, lean=True)  # the diff reads no findings, steps or system samples
    for w in stats.warnings + capture_lines(report):
        sys.stderr.write(clean(f"ctmon: {label}: {w}\n"))
    return run_summary(path, session, report)


def diff_paths(base_path: str, new_path: str, any_job: bool = False) -> DiffDoc:
    from ctmon.report.diff import compare, same_job

    base = load_run(base_path, "diff: BASE")
    # BASE's store is only garbage now, but it holds reference cycles: freed
    # before NEW is read, the diff's memory peak stays near one report's
    gc.collect()
    new = load_run(new_path, "diff: NEW")
    mismatch = same_job(base, new)
    if mismatch and not any_job:
        raise CliError(f"diff: {mismatch} (--any-job compares them anyway)")
    return compare(base, new)


REGRESSION = "regression"  # --fail-on regression: the gate of 'ctmon diff --fail', against --baseline


@dataclass
class Baseline:
    """``--baseline BASE``: the earlier run, read, and whether a regression
    since it fails the gate (``--fail-on regression``)."""

    run: RunSummary
    fails: bool
    command: str  # the command's name, for its error lines

    @property
    def name(self) -> str:
        return os.path.basename(str(self.run["path"]).rstrip("/"))

    def diff(self, path: str, session: Session, report: Report) -> DiffDoc:
        """``ctmon diff BASE path`` of a run already read."""
        from ctmon.report.diff import compare, run_summary, same_job

        new = run_summary(path, session, report)
        mismatch = same_job(self.run, new)
        if mismatch:
            raise CliError(f"{self.command}: --baseline: {mismatch}")
        return compare(self.run, new)

    def lines(self, doc: DiffDoc) -> list[str]:
        """The stderr lines: one per regression of the diff, naming BASE."""
        return [clean(f"ctmon: regression since {self.name}: {e['what']}") for e in doc["regressions"]]


def read_baseline(command: str, baseline: str | None, fail_on: list[str]) -> Baseline | None:
    """``--baseline BASE`` read and ``--fail-on regression`` checked, before
    anything runs or is printed (a bad baseline: one line, exit 2)."""
    fails = REGRESSION in fail_on
    if fails and baseline is None:
        raise CliError(f"{command}: --fail-on regression needs --baseline BASE (the run to compare with)")
    if baseline is None:
        return None
    return Baseline(load_run(baseline, f"{command}: --baseline"), fails, command)


def plain_budgets(fail_on: list[str]) -> list[str]:
    """The ``--fail-on`` expressions that are budgets, not ``regression``."""
    return [b for b in fail_on if b != REGRESSION]


def check_same_job(command: str, base: RunSummary, job: list[str]) -> None:
    """Before a job runs: it must be a run of the baseline's job."""
    from ctmon.report.diff import same_job

    mismatch = same_job(base, {"command": job})
    if mismatch:
        raise CliError(f"{command}: --baseline: {mismatch}")


def mark_new_findings(report: Report, doc: DiffDoc, base_name: str) -> Report:
    """The report with each finding whose evidence is new since BASE saying
    so first in its evidence, for the text output only (the JSON stays the
    report's own). A finding's evidence is new where it is at the place of a
    graph break or recompile-limit hit BASE had not, or at the frame of a
    new recompile whose reason it quotes."""
    from ctmon.report.diff import is_new_since_base, relative

    new = [e for e in doc["regressions"] if is_new_since_base(e) and e.get("line") is not None]
    findings: list[Finding] = []
    for f in report.get("findings") or []:
        place = (relative(f.get("file"), report), f.get("line"))
        marks = [f"new since {base_name}: {e['what']}" for e in new if _shows(f, place, e)]
        findings.append({**f, "evidence": marks[:2] + list(f.get("evidence") or [])} if marks else f)
    return {**report, "findings": findings}


def _shows(finding: Finding, place: tuple[str | None, int | None], entry: DiffEntry) -> bool:
    if (entry.get("file"), entry["line"]) != place:
        return False
    if entry["kind"] == "recompile":
        return any(str(entry["new"]) in str(line) for line in finding.get("evidence") or [])
    return entry["kind"] in ("graph_break", "limit_hit")


def regression_failure(lines: list[str]) -> str:
    """The gate's failure line for ``--fail-on regression``."""
    return f"{len(lines)} regression(s) since the baseline (listed above)"
