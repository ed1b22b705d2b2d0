"""``ctmon report FILE``: summarise a recording (text, ``--json`` or ``--md``)."""

from __future__ import annotations

import json
import sys

from ctmon.cli import CliError
from ctmon.reader import ReadStats, read_recording
from ctmon.report.build import build_report
from ctmon.report.text import full_text
from ctmon.store import Session

HELP = """usage: ctmon report FILE [--json | --md]

Summarise a recording made by 'ctmon record' or 'ctmon attach'.

options:
  --json      print the report as JSON (schema: docs/REPORT.md)
  --md        print Markdown, fit for a pull-request comment
  -h, --help  show this help and exit
"""


def load(path: str) -> tuple[Session, ReadStats]:
    stats = ReadStats()
    session = Session().apply_all(read_recording(path, stats))
    return session, stats


def main(argv: list[str]) -> int:
    fmt = "text"
    path = None
    for a in argv:
        if a in ("-h", "--help"):
            sys.stdout.write(HELP)
            return 0
        if a == "--json":
            fmt = "json"
        elif a == "--md":
            fmt = "md"
        elif a.startswith("-"):
            raise CliError(f"report: unknown option {a} (try: ctmon report --help)")
        elif path is None:
            path = a
        else:
            raise CliError("report: give one recording")
    if path is None:
        raise CliError("report: a recording FILE is required (ctmon report FILE)")
    session, stats = load(path)
    report = build_report(session)
    for w in stats.warnings:
        sys.stderr.write(f"ctmon: {w}\n")
    if fmt == "json":
        json.dump(report, sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
    elif fmt == "md":
        from ctmon.report.markdown import markdown

        sys.stdout.write(markdown(report))
    else:
        sys.stdout.write(full_text(report))
    return 0
