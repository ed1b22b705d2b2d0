"""The older advice templates, proven by applying them.

tests/workloads/advice/older_templates.py shows one problem per template in
one compiled function each (print, a data-dependent branch, np.digitize,
torch._dynamo.graph_break(), time.time(), .item(), an int module attribute,
a Python int argument under dynamic=False, a global float); ``--fix`` makes
the change each finding names, in the code. Recorded broken and fixed under
real ``ctmon record``: each finding is there broken, at the marked line, with
its fix as data (a code change at that line); fixed, every one is gone and
the job compiles 9 graphs once, with no break and no recompile.

The settings two of these findings name (capture_scalar_outputs,
allow_unspec_int_on_nn_module) are applied from the report's ``fixes`` in
tests/test_findings_advice_fixes.py. CPU only, ``backend="eager"``.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from helpers import WORKLOADS
from test_findings import Recorded, record_all

OLDER = os.path.join(WORKLOADS, "advice", "older_templates.py")

# template -> (finding id, marker of the line it points at, words of its fix, its code fix)
TEMPLATES = {
    "log": ("graph-breaks:logging", "BREAK:log", "Move the print/log call out", "move the print/log call out"),
    "branch": ("graph-breaks:data-dependent-branch", "BREAK:branch", "torch.where(cond, a, b)", "torch.where"),
    "numpy": (
        "graph-breaks:numpy",
        "BREAK:numpy",
        "For np.digitize use torch.bucketize(x, boundaries, right=True)",
        "torch.bucketize",
    ),
    "explicit": ("graph-breaks:explicit", "BREAK:explicit", "Remove the torch._dynamo.graph_break()", "remove"),
    "clock": (
        "graph-breaks:unsupported-call",
        "BREAK:clock",
        "`time.time()` only has side effects or reads the host: call it outside",
        "outside the compiled function",
    ),
    "item": ("graph-breaks:scalar-output", "BREAK:item", "Keep the value a tensor", "keep the value a tensor"),
    "attr": (
        "guard-recompiles:*:module_attribute:self.step",
        "GUARD:attr",
        "self.register_buffer('step'",
        "register_buffer",
    ),
    "scalar": (
        "scalar-recompiles:*:k",
        "GUARD:scalar",
        "Pass 'k' as a 0-d tensor (torch.tensor(k))",
        "torch.tensor(k)",
    ),
    "glob": ("guard-recompiles:*:global:SCALE", "GUARD:glob", "pass it as an argument instead", "as an argument"),
}


def marker(name: str) -> int:
    with open(OLDER, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip().endswith(f"# {name}"))


def matching(r: Recorded, pattern: str) -> list[dict[str, Any]]:
    rx = re.compile("^" + re.escape(pattern).replace(r"\*", r"[\d+]+") + "$")
    return [f for f in r.findings if rx.match(f["id"])]


@pytest.fixture(scope="module")
def older(tmp_path_factory: Any) -> dict[str, Recorded]:
    return record_all(
        tmp_path_factory.mktemp("older"),
        {"broken": {"target": [OLDER]}, "fixed": {"target": [OLDER, "--fix"]}},
    )


@pytest.mark.slow
@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_the_finding_names_the_line_and_its_fix_as_words_and_data(older: dict[str, Recorded], template: str) -> None:
    pattern, mark, words, code = TEMPLATES[template]
    (f,) = matching(older["broken"], pattern)
    assert (f["file"], f["line"]) == (OLDER, marker(mark)), f
    assert words in f["fix"], f["fix"]
    code_fixes = [x for x in f["fixes"] if x["kind"] == "code"]
    assert any(code.lower() in x["code"].lower() for x in code_fixes), f["fixes"]
    if template != "scalar":  # the scalar's change is at the calling line, the others' where the finding points
        assert any((x["file"], x["line"]) == (OLDER, marker(mark)) for x in code_fixes), f["fixes"]


@pytest.mark.slow
@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_the_fix_applied_removes_the_finding(older: dict[str, Recorded], template: str) -> None:
    pattern = TEMPLATES[template][0]
    assert matching(older["broken"], pattern)
    assert not matching(older["fixed"], pattern), [f["id"] for f in older["fixed"].findings]


@pytest.mark.slow
def test_with_every_fix_applied_each_function_compiles_once(older: dict[str, Recorded]) -> None:
    broken, fixed = older["broken"].rep["compile"], older["fixed"].rep["compile"]
    assert broken["graph_breaks"] >= 6 and broken["recompiles"] >= 10
    assert (fixed["graph_breaks"], fixed["recompiles"]) == (0, 0)
    assert fixed["compiles"] == 9 < broken["compiles"]  # nine compiled functions, one graph each
    # the one finding left is the compile time's, which names no fix to apply
    assert [f["id"] for f in older["fixed"].findings if f["severity"] != "info"] == []
    assert all(not f["fixes"] for f in older["fixed"].findings)


@pytest.mark.slow
def test_a_number_from_an_untraceable_call_is_not_advised_as_a_setting(older: dict[str, Recorded]) -> None:
    """.item() and time.time() both resume a frame with a new number at the
    same moments: the one finding for both names time.time() as what to move
    out (capture_scalar_outputs does not capture it: tests/test_findings_advice_fixes.py
    applies the setting and the clock's frame still recompiles)."""
    (f,) = [x for x in older["broken"].findings if x["id"].startswith("scalar-recompiles:") and "___stack" in x["id"]]
    assert "time.time() returned, which Dynamo cannot trace and no setting captures" in f["fix"]
    assert any(x["code"] == "call time.time() outside the compiled function" for x in f["fixes"])
