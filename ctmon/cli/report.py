"""``ctmon report FILE``: summarise a recording (text, ``--json`` or ``--md``)."""

from __future__ import annotations

import json
import os
import sys

from ctmon.cli import CliError
from ctmon.cli.record import parse_budgets
from ctmon.report import gate
from ctmon.words.textsafe import clean

HELP = """usage: ctmon report FILE [FILE ...] [--json | --md] [--fail-on EXPR ...] [--baseline BASE [--any-job]]

Summarise a recording made by 'ctmon record' or 'ctmon attach'. Several
files: the recordings of one distributed job's nodes, merged into one report.

options:
  --json      print the report as JSON (schema: docs/REPORT.md)
  --md        print Markdown, fit for a pull-request comment
  --fail-on EXPR
              exit 3 if EXPR holds, e.g. 'recompiles>2' or 'limit_hits>0' (repeatable);
              exit 4 if the recording is incomplete (the disk cut it short);
              metrics: recompiles, compiles, graph_breaks, graph_break_sites, limit_hits,
              compile_failures, compile_time_s, fx_cache_misses, aot_cache_misses,
              cache_bypasses, critical_findings, warning_findings, p50_ms, p90_ms, steps;
              'regression' (with --baseline): exit 3 if anything regressed since BASE
  --baseline BASE
              compare with an earlier run (a recording or TORCH_TRACE dir) as 'ctmon diff
              BASE FILE' does; its regressions are listed on stderr (BASE: a directory
              of one job's node recordings is merged)
  --any-job   with --baseline: compare with a run of another script too
  -h, --help  show this help and exit
"""


def main(argv: list[str]) -> int:
    fmt = "text"
    paths: list[str] = []
    budgets: list[str] = []
    baseline: str | None = None
    any_job = False
    it = iter(argv)
    for a in it:
        if a in ("-h", "--help"):
            sys.stdout.write(HELP)
            return 0
        if a == "--json":
            fmt = "json"
        elif a == "--md":
            fmt = "md"
        elif a == "--fail-on" or a.startswith("--fail-on="):
            expr = a.partition("=")[2] if "=" in a else next(it, None)
            if not expr:
                raise CliError("report: --fail-on needs an expression, e.g. 'recompiles>2'")
            budgets.append(expr)
        elif a == "--baseline" or a.startswith("--baseline="):
            baseline = a.partition("=")[2] if "=" in a else next(it, None)
            if not baseline:
                raise CliError("report: --baseline needs a recording or TORCH_TRACE directory")
        elif a == "--any-job":
            any_job = True
        elif a.startswith("-"):
            raise CliError(f"report: unknown option {a} (try: ctmon report --help)")
        else:
            paths.append(a)
    if not paths:
        raise CliError("report: a recording FILE is required (ctmon report FILE)")
    from ctmon.cli.diff import mark_new_findings, plain_budgets, read_baseline, regression_failure, with_new_since_base

    checks = parse_budgets(plain_budgets(budgets))
    # the baseline first: a bad one is one line before any output
    base = read_baseline("report", baseline, budgets, any_job)
    from ctmon.cli.progress import reading
    from ctmon.read.merge import load_nodes
    from ctmon.report.build import build_report
    from ctmon.report.text import full_text

    session, stats, nodes = load_nodes(paths, reading(" ".join(paths)[:80]))
    report = build_report(session, nodes)
    since = base.diff(paths[0], session, report) if base is not None else None
    regressed = base.lines(since) if base is not None and since is not None else []
    for w in stats.warnings + gate.capture_lines(report):
        sys.stderr.write(clean(f"ctmon: {w}\n"))
    # with --baseline, each finding at a place new since BASE says so (ctmon/findings/since_base.py)
    if fmt == "json":
        shown = with_new_since_base(report, since) if since is not None else report
        _write_out(json.dumps(shown, indent=2, sort_keys=False, allow_nan=False, default=str) + "\n")
    elif fmt == "md":
        from ctmon.report.markdown import markdown

        shown = with_new_since_base(report, since) if since is not None else report
        _write_out(markdown(shown, base.name if base is not None else None))
    else:
        shown = mark_new_findings(report, since, base.name) if base is not None and since is not None else report
        _write_out(full_text(shown))
    failures = gate.broken(checks, report)
    for line in regressed:
        sys.stderr.write(line + "\n")
    if base is not None and base.fails and regressed:
        failures.append(regression_failure(regressed))
    for msg in failures:
        sys.stderr.write(f"ctmon: {msg}\n")
    if failures and gate.recording_notes(report):
        return gate.RECORDING_EXIT  # as `ctmon record`'s gate: an incomplete recording vouches for no budget
    return gate.BUDGET_EXIT if failures else 0


def _write_out(text: str) -> None:
    """The report on stdout. A stdout that cannot take it (a full disk) is
    one line, exit 1; a reader that went away (``| head``) is no error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        # what is still buffered would fail again as Python exits, as a traceback: it goes nowhere
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise CliError(f"report: cannot write the report: {e.strerror or e}", status=1) from None
