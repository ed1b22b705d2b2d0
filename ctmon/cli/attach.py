"""``ctmon attach``: run a job and watch it live."""

from __future__ import annotations

import sys

from ctmon.cli.args import OptionSpec, format_help, parse_launch
from ctmon.cli.record import run_headless

OPTIONS = [
    OptionSpec(("-o", "--output"), "output", True, help="keep the recording in FILE", metavar="FILE"),
    OptionSpec(("--no-tui",), "no_tui", help="no TUI: run headless like 'ctmon record'"),
]
USAGE = "ctmon attach [options] SCRIPT|-m MODULE [ARGS...]"
DESCRIPTION = "Run a Python job under ctmon and watch compiles, graph breaks, caches and step times live."


def main(argv: list[str]) -> int:
    parsed = parse_launch("attach", argv, OPTIONS)
    if parsed.help:
        sys.stdout.write(format_help(USAGE, DESCRIPTION, OPTIONS))
        return 0
    assert parsed.spec is not None
    return run_headless(parsed.spec, parsed.values.get("output"))  # type: ignore[arg-type]
