"""Every findings rule on arbitrary events, strictly: the live view swallows a
rule's exception so one bad rule cannot hide the others, which would also
hide a rule that breaks on odd but valid input. Here none may raise."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from test_wire_fuzz import event_lists

from ctmon.findings import analyze
from ctmon.store import Session

pytestmark = pytest.mark.slow  # hundreds of generated runs through every rule: seconds


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(event_lists)
def test_no_rule_raises_on_any_events(evs):
    s = Session()
    for ev in evs:
        s.apply(ev)
    analyze(s, strict=True)
