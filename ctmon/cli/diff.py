"""``ctmon diff BASE NEW``: what changed between two runs of one job."""

from __future__ import annotations

import gc
import json
import sys
from typing import Any

from ctmon.cli import CliError
from ctmon.textsafe import clean

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


def load_run(path: str, label: str) -> dict[str, Any]:
    """One side's summary; one line (exit 2) when it cannot be read."""
    from ctmon.cli.progress import reading
    from ctmon.report.build import build_report
    from ctmon.report.diff import run_summary
    from ctmon.report.gate import capture_lines
    from ctmon.report.merge import load_nodes
    from ctmon.wire.errors import RecordingError

    try:
        session, stats, _ = load_nodes([path], reading(path[:80]))
    except RecordingError as e:
        raise CliError(f"{label}: {e}") from None
    except OSError as e:  # a directory or file that went away or cannot be opened
        raise CliError(f"{label}: cannot read {path}: {e.strerror or e}") from None
    report = build_report(session)
    for w in stats.warnings + capture_lines(report):
        sys.stderr.write(clean(f"ctmon: {label}: {w}\n"))
    return run_summary(path, session, report)


def diff_paths(base_path: str, new_path: str, any_job: bool = False) -> dict[str, Any]:
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


def regressions_since(base: dict[str, Any], path: str, session: Any, report: dict[str, Any]) -> list[str]:
    """What regressed in a run already read (``ctmon report --baseline``)
    since ``base`` (``load_run``'s), one line each."""
    from ctmon.report.diff import compare, run_summary, same_job

    new = run_summary(path, session, report)
    mismatch = same_job(base, new)
    if mismatch:
        raise CliError(f"report: --baseline: {mismatch}")
    return [e["what"] for e in compare(base, new)["regressions"]]
