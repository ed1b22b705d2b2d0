"""The guard-kind advice templates, proven by applying them.

tests/workloads/advice/guard_kinds.py recompiles one compiled function per
guard kind (a tensor's rank, strides, dispatch keys; grad mode, autocast,
deterministic algorithms, the default dtype; a list's length, a dict's value,
a str flag, a function passed in, a Parameter passed as a tensor; and, with
transformers installed, its ``config.problem_type``); ``--fix`` makes the
change each finding's advice names. Recorded broken and fixed under real
``ctmon record``: each finding is there broken, at its line, with its advice;
fixed, every one is gone and nothing recompiles.

Kinds no CPU workload here can show are advised as what is known (no fix
claimed, PyTorch's page linked): a tensor on another device, a cached graph
dropped because an object was freed, global state ctmon has no test for.
CPU only, ``backend="eager"``.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from helpers import WORKLOADS
from test_findings import Recorded, record_all

from ctmon.findings import guard_advice as A
from ctmon.findings import guards as G
from ctmon.findings.shape_advice import kv_cache_fix

KINDS = os.path.join(WORKLOADS, "advice", "guard_kinds.py")
PAGE = "https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html"

# template -> (finding id without its frame, marker of the line it points at, words of its advice)
TEMPLATES = {
    "rank": ("rank:x", "GUARD:rank", "reshape it consistently before the compiled call"),
    "stride": ("stride:x", "GUARD:stride", "x.contiguous()"),
    "dispatch": ("dispatch_keys:x", "GUARD:dispatch", "torch.no_grad() instead of torch.inference_mode()"),
    "grad_mode": ("grad_mode:grad_mode", "GUARD:grad_mode", "run them on the uncompiled function/module"),
    "autocast": ("global_state:autocast(cpu)_enabled", "GUARD:autocast", "under the same autocast context"),
    "determ": ("global_state:deterministic_algorithms", "GUARD:determ", "set it once at start-up"),
    "default_dtype": ("global_state:default_dtype", "GUARD:default_dtype", "set it once at start-up"),
    "length": ("length:xs", "GUARD:length", "pad it to the longest (e.g. zeros) and pass one stacked tensor"),
    "container": ("container_value:cfg['scale']", "GUARD:container", "pass values that change as tensors"),
    "flag": ("flag:how", "GUARD:flag", "move the branch out of the compiled function"),
    "identity": ("identity:fn", "GUARD:identity", "pass one function and give it what differs as an argument"),
    "type": ("type:b", "GUARD:type", "pass b.detach()"),
}


def marker(name: str) -> int:
    with open(KINDS, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip().endswith(f"# {name}"))


def finding(r: Recorded, suffix: str) -> list[dict[str, Any]]:
    return [
        f for f in r.rule("guard-recompiles") if re.fullmatch(r"guard-recompiles:\d+:" + re.escape(suffix), f["id"])
    ]


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: Any) -> dict[str, Recorded]:
    return record_all(
        tmp_path_factory.mktemp("guard_kinds"),
        {"broken": {"target": [KINDS]}, "fixed": {"target": [KINDS, "--fix"]}},
    )


@pytest.mark.slow
@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_each_kind_is_one_finding_at_its_line_with_its_advice(kinds: dict[str, Recorded], template: str) -> None:
    """One finding per kind, even where global state changes for every
    compiled function: two states that change at once are two causes."""
    suffix, mark, words = TEMPLATES[template]
    (f,) = finding(kinds["broken"], suffix)
    # the guarded line, or the function's def just above it where the guard names no source line (a
    # tensor's, global state's, a type's)
    assert f["file"] == KINDS and f["line"] in (marker(mark), marker(mark) - 1), f
    assert words in f["fix"], f["fix"]


@pytest.mark.slow
@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_the_advice_applied_removes_the_finding(kinds: dict[str, Recorded], template: str) -> None:
    suffix = TEMPLATES[template][0]
    assert finding(kinds["broken"], suffix)
    assert not finding(kinds["fixed"], suffix), [f["id"] for f in kinds["fixed"].findings]


@pytest.mark.slow
def test_the_problem_type_guard_is_gone_once_set_before_compiling(kinds: dict[str, Recorded]) -> None:
    pytest.importorskip("transformers")
    (f,) = [x for x in kinds["broken"].rule("guard-recompiles") if x["id"].endswith("problem_type is None")]
    assert 'model.config.problem_type = "single_label_classification"' in f["fix"]
    assert not [x for x in kinds["fixed"].findings if "problem_type" in x["id"]]


@pytest.mark.slow
def test_with_every_advice_applied_nothing_recompiles(kinds: dict[str, Recorded]) -> None:
    broken, fixed = kinds["broken"].rep["compile"], kinds["fixed"].rep["compile"]
    assert broken["recompiles"] >= len(TEMPLATES)
    assert fixed["recompiles"] == 0 and fixed["compiles"] < broken["compiles"]
    assert not kinds["fixed"].rule("guard-recompiles") and kinds["fixed"].loud() == []


def _reason(text: str) -> G.Guard:
    return G.classify(text)


@pytest.mark.parametrize(
    "reason",
    [
        # across devices (a GPU's, or two GPUs'): no CPU run shows the fix
        "0/0: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, AutogradCPU), "
        "actual DispatchKeySet(CUDA, AutogradCUDA)",
        "5/0: Cache line invalidated because L['___stack0'] got deallocated",
        "0/0: GLOBAL_STATE changed: torch_function_mode_stack",
        "0/0: ___check_type_id(L['x'], 94066711)  # return x + 1  # t.py:3 in f",  # a type other than a Parameter's
    ],
)
def test_kinds_no_test_applies_say_what_is_known(reason: str) -> None:
    g = _reason(reason)
    assert g.kind in (G.DEVICE, G.INVALIDATED, G.GLOBAL_STATE, G.TYPE)
    text = A.fix_for(g)
    assert PAGE in text
    for claim in ("move it", ".to(device)", "create models", "set it once", "pass the same type"):
        assert claim not in text, (claim, text)
    assert A.fixes_for(g) == []


def test_a_kv_cache_length_says_what_is_known() -> None:
    """Sizing transformers' cache once is a GPU fix (compiled generate() with
    a static cache): ctmon links the pages rather than claim it."""
    text = kv_cache_fix(2)
    assert "huggingface.co/docs/transformers/en/kv_cache" in text and PAGE in text
    assert "StaticCache(" not in text and "pad_to_multiple_of" not in text
