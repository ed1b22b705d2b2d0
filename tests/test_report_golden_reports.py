"""Every fixture recording still reads as it did: ``report --json`` equals the
expected object kept beside it (tests/fixtures/golden/, written by
tests/fixtures/golden/update.py when a change of the report is intended).

The recordings were written by earlier versions of ctmon, so this is also the
check that old recordings stay readable, key by key."""

from __future__ import annotations

import json
import os

import pytest
from golden import expected_path, recordings, report_of


@pytest.mark.parametrize("recording", recordings(), ids=os.path.basename)
def test_report_is_unchanged(recording: str) -> None:
    with open(expected_path(recording), encoding="utf-8") as f:
        expected = json.load(f)
    got = report_of(recording)
    if got != expected:
        changed = sorted(k for k in set(got) | set(expected) if got.get(k) != expected.get(k))
        pytest.fail(
            f"report of {os.path.basename(recording)} changed in {changed}; if intended, run "
            "tests/fixtures/golden/update.py and review the diff"
        )


def test_every_recording_has_its_expected_report() -> None:
    names = {os.path.basename(expected_path(r)) for r in recordings()}
    kept = {n for n in os.listdir(os.path.dirname(expected_path(recordings()[0]))) if n.endswith(".json")}
    assert kept == names


@pytest.mark.parametrize("recording", recordings(), ids=os.path.basename)
def test_folding_in_bulk_gives_the_store_folding_one_by_one_gives(recording: str) -> None:
    """apply_all takes step batches together (and a little later than the
    output around them); the store must be the one apply() builds event by event."""
    from ctmon.read.recording import read_recording
    from ctmon.report.build import build_report
    from ctmon.store import Session

    events = list(read_recording(recording))
    one_by_one = Session()
    for ev in events:
        one_by_one.apply(ev)
    assert build_report(Session().apply_all(events)) == build_report(one_by_one)
