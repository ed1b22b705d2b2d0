"""The fixture recordings and their expected reports (tests/fixtures/golden/)."""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
GOLDEN = os.path.join(FIXTURES, "golden")
# Differs with every release, and says nothing about the recording.
VOLATILE = ("ctmon_version",)


def recordings() -> list[str]:
    """Every recording kept as a fixture: made by earlier versions of ctmon
    (recordings/, recordings/v1/: protocol 1 as written in 2026-11) and on GPUs (gpu/)."""
    found = []
    for pattern in ("recordings/*.jsonl", "recordings/*/*.jsonl", "gpu/*.jsonl"):
        found += glob.glob(os.path.join(FIXTURES, pattern))
    return sorted(found)


def expected_path(recording: str) -> str:
    rel = os.path.relpath(recording, FIXTURES).replace(os.sep, "__")
    return os.path.join(GOLDEN, rel[: -len(".jsonl")] + ".json")


def report_of(recording: str) -> dict[str, Any]:
    """What ``ctmon report RECORDING --json`` prints, as an object."""
    from ctmon.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(["report", recording, "--json"])
    assert rc == 0, (recording, rc)
    report: dict[str, Any] = json.loads(out.getvalue())
    for key in VOLATILE:
        report.pop(key, None)
    return report
