"""``ctmon replay``."""

from __future__ import annotations

from ctmon.cli import CliError


def main(argv: list[str]) -> int:
    raise CliError("replay: not available yet")
