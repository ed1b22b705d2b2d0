"""The advice for jobs that ran eager, failed, or were not seen, proven by
applying it -- or, where no fix is known to work, saying what is known.

tests/workloads/advice/silent_cases.py compiles a model two ways that
compile nothing: ``torch.compile(model).encode(x)`` (never-compiled) and a
forward that hands its work to a ``torch.compiler.disable`` function
(empty-graphs); ``--fix`` makes the change each finding names, and the same
fixed job under TORCHDYNAMO_DISABLE=1 is never-compiled:disabled, whose fix
(unset it) is the fixed run. tests/workloads/advice/no_torch.py run as
``python -I`` reports nothing to ctmon (no-process-reported); given to ctmon
itself, it does. CPU only, ``backend="eager"``.

A failed job, a failed rank and ranks whose caches differ get what is known:
no fix claimed, PyTorch's page linked, ``fixes`` empty.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
from helpers import WORKLOADS
from test_findings import Recorded, record_all
from test_findings_unit import F, Run, only

from ctmon.findings.current import findings_of
from ctmon.findings.pages import CACHING_PAGE, TROUBLESHOOTING_PAGE
from ctmon.store.session import Session

SILENT = os.path.join(WORKLOADS, "advice", "silent_cases.py")
NO_TORCH = os.path.join(WORKLOADS, "advice", "no_torch.py")


def marker(name: str) -> int:
    with open(SILENT, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip().endswith(f"# {name}"))


@pytest.fixture(scope="module")
def silent(tmp_path_factory: Any) -> dict[str, Recorded]:
    return record_all(
        tmp_path_factory.mktemp("silent"),
        {
            "never": {"target": [SILENT, "--case", "never"]},
            "empty": {"target": [SILENT, "--case", "empty"]},
            "fixed": {"target": [SILENT, "--fix"]},
            "disabled": {"target": [SILENT, "--fix"], "env": {"TORCHDYNAMO_DISABLE": "1"}},
            "isolated": {"target": ["--", sys.executable, "-I", NO_TORCH]},
            "given": {"target": [NO_TORCH]},
        },
    )


def ids(r: Recorded) -> list[str]:
    return [f["id"] for f in r.findings]


@pytest.mark.slow
def test_a_method_through_the_compiled_wrapper_is_never_compiled_and_compiling_it_works(
    silent: dict[str, Recorded],
) -> None:
    r = silent["never"]
    (f,) = r.rule("never-compiled")
    assert f["id"] == "never-compiled" and (f["file"], f["line"]) == (SILENT, marker("NEVER"))
    assert "`model.encode = torch.compile(model.encode)` for a method `encode`" in f["fix"]
    assert r.rep["compile"]["compiles"] == 0
    fixed = silent["fixed"]
    assert not fixed.rule("never-compiled") and fixed.rep["compile"]["compiles"] >= 1
    assert any(c["target"] == "Encoder.encode" for c in fixed.rep["compile_calls"])


@pytest.mark.slow
def test_work_in_a_disabled_function_is_an_empty_graph_and_moving_it_in_captures_it(
    silent: dict[str, Recorded],
) -> None:
    (f,) = silent["empty"].rule("empty-graphs")
    assert f["id"] == "empty-graphs" and "not in a function marked torch.compiler.disable" in f["fix"]
    fixed = silent["fixed"]
    assert not fixed.rule("empty-graphs") and not fixed.rule("graph-breaks")
    assert fixed.loud() == []


@pytest.mark.slow
def test_torchdynamo_disable_is_said_as_such_and_unsetting_it_compiles(silent: dict[str, Recorded]) -> None:
    """TORCHDYNAMO_DISABLE=1 is read by torch.compile from the environment,
    not from torch._dynamo.config.disable: the call's record says both."""
    r = silent["disabled"]
    assert r.rep["compile"]["compiles"] == 0
    (f,) = r.rule("never-compiled")
    assert f["id"] == "never-compiled:disabled", ids(r)
    assert "Unset TORCHDYNAMO_DISABLE and TORCH_COMPILE_DISABLE" in f["fix"]
    assert silent["fixed"].rep["compile"]["compiles"] >= 1  # the same job, unset


@pytest.mark.slow
def test_an_isolated_python_reports_nothing_and_given_to_ctmon_itself_it_does(silent: dict[str, Recorded]) -> None:
    (f,) = silent["isolated"].rule("no-process-reported")
    assert "ctmon record train.py" in f["fix"] and "python -I" in f["detail"]
    assert not silent["given"].rule("no-process-reported"), ids(silent["given"])


COMPILER_TRACEBACK = (
    f'Traceback (most recent call last):\n  File "{F}", line 9, in <module>\n    f(x)\n'
    "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nRuntimeError: boom\n"
)
CLAIMS = ("lower the batch size", "free memory", "smaller batch", "activation checkpointing", "makes the failing")


@pytest.mark.parametrize(
    "code,signal,tail",
    [(1, None, COMPILER_TRACEBACK), (None, "SIGKILL", ""), (None, "SIGSEGV", "")],
    ids=["compiler-error", "SIGKILL", "SIGSEGV"],
)
def test_a_failed_job_says_what_is_known_and_claims_no_fix(code: int | None, signal: str | None, tail: str) -> None:
    r = Run().steps(1).steps(3)
    if tail:
        r.stderr(tail)
    f = only(r.exits(code, signal).findings(), "job-failed")
    assert f.fixes == []
    for claim in CLAIMS:
        assert claim not in f.fix, (claim, f.fix)
    if tail:
        assert TROUBLESHOOTING_PAGE in f.fix
    else:
        assert f"ctmon cannot tell who sent {signal}" in f.fix and "dmesg" in f.fix


def _two_ranks() -> Session:
    s = Session()
    for rank, pid in ((0, 11), (1, 12)):
        s.apply({"kind": "process", "t": 1.0, "pid": pid, "rank": rank, "local_rank": rank, "world_size": 2})
    return s


def test_ranks_whose_caches_differ_are_told_what_is_known() -> None:
    s = _two_ranks()
    for rank, result in ((0, "hit"), (1, "miss")):
        s.apply({"kind": "cache", "t": 2.0, "cache": "fx_graph", "result": result, "rank": rank, "key": "k"})
    (f,) = [f for f in findings_of(s) if f.id == "rank-divergence:cache:fx_graph"]
    assert CACHING_PAGE in f.fix and "TORCHINDUCTOR_CACHE_DIR" in f.fix and f.fixes == []
    assert "drop_last" not in f.fix and "mark_dynamic" not in f.fix  # the shapes' advice is not the cache's


SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_13:37:33
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 12)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 12
============================================================"""


def test_a_killed_rank_says_what_is_known_and_claims_no_fix() -> None:
    s = _two_ranks()
    for text in SUMMARY.splitlines():
        s.apply({"kind": "output", "t": 5.0, "stream": "stderr", "data": text + "\n"})
    s.apply({"kind": "exit", "t": 6.0, "code": 1})
    (f,) = [f for f in findings_of(s) if f.rule == "rank-failed"]
    assert f.title.startswith("Rank 1 was killed by SIGKILL")
    assert "dmesg" in f.fix and f.fixes == []
    for claim in CLAIMS:
        assert claim not in f.fix, (claim, f.fix)
