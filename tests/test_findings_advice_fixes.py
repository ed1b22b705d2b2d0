"""A fix is data as well as prose: every finding's ``fixes`` (report --json)
holds its fix candidates -- a Dynamo/Inductor setting, a torch.compile
argument, a change at a named line -- and the settings and arguments can be
applied to the same script without editing it. Proven here by applying them:

* the config fixes of a real recording's report, set by a prelude this test
  writes (``config_prelude``) before the unchanged script runs: the findings
  they answer are gone or, where PyTorch still recompiles once, reduced, and
  no finding suggests a setting now on;
* a compile argument, given as ``ctmon bench --try`` gives it (the fix's
  ``try``, through the agent's CTMON_COMPILE_TRY): the finding is gone;
* a setting the job already has is never a fix.

CPU only, ``backend="eager"``.
"""

from __future__ import annotations

import importlib
import os
from functools import reduce
from typing import Any

import pytest
from golden import recordings, report_of
from helpers import WORKLOADS
from test_findings import Recorded, record_all

from ctmon.agent.bench_mode import COMPILE_ARGS, TRY_ENV, parse_try
from ctmon.findings.model import CODE, COMPILE_ARG, CONFIG, FIX_KINDS, code_fix, compile_arg_fix, config_fix
from ctmon.findings.pytorch_hints import CAPTURE_SCALARS, TRACE_AUTOGRAD, setting_fixes

ADVICE = os.path.join(WORKLOADS, "advice")
OLDER = os.path.join(ADVICE, "older_templates.py")
LAST = os.path.join(ADVICE, "last_batch.py")
SCALARS = os.path.join(ADVICE, "scalar_setting_on.py")


def config_fixes(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's config fixes, once each (two findings may name one setting)."""
    out: list[dict[str, Any]] = []
    for f in report["findings"]:
        for x in f["fixes"]:
            if x["kind"] == CONFIG and all((x["module"], x["name"]) != (o["module"], o["name"]) for o in out):
                out.append(x)
    return out


def config_prelude(fixes: list[dict[str, Any]], script: str) -> str:
    """A Python file that makes ``fixes``' settings, then runs ``script``
    unchanged as __main__ with the same arguments."""
    lines = ["import functools, importlib, runpy, sys"]
    for x in fixes:
        owner, _, attr = x["name"].rpartition(".")
        path = owner.split(".") if owner else []
        lines.append(
            f"setattr(functools.reduce(getattr, {path!r}, importlib.import_module({x['module']!r})), "
            f"{attr!r}, {x['value']!r})"
        )
    lines += [f"sys.argv = [{script!r}, *sys.argv[1:]]", f"runpy.run_path({script!r}, run_name='__main__')"]
    return "\n".join(lines) + "\n"


def setting_exists(fix: dict[str, Any]) -> bool:
    owner, _, attr = fix["name"].rpartition(".")
    module = importlib.import_module(fix["module"])
    holder = reduce(getattr, owner.split("."), module) if owner else module
    return hasattr(holder, attr)


# ------------------------------------------------------------------ the data


def test_a_fix_says_its_kind_its_code_and_what_bench_tries() -> None:
    setting = config_fix("torch._inductor.config", "triton.cudagraph_skip_dynamic_graphs", True)
    assert setting.as_dict() == {
        "kind": "config",
        "module": "torch._inductor.config",
        "name": "triton.cudagraph_skip_dynamic_graphs",
        "value": True,
        "file": None,
        "line": None,
        "code": "torch._inductor.config.triton.cudagraph_skip_dynamic_graphs = True",
        "try": "torch._inductor.config.triton.cudagraph_skip_dynamic_graphs=True",
    }
    arg = compile_arg_fix("dynamic", True)
    assert (arg.code, arg.try_arg) == ("torch.compile(..., dynamic=True)", "dynamic=True")
    change = code_fix("torch._dynamo.mark_dynamic(x, 1)", "/w/train.py", 12)
    assert change.as_dict()["try"] is None and (change.file, change.line) == ("/w/train.py", 12)
    for fix in (setting, arg):  # what bench --try takes, as it parses it
        assert parse_try(fix.try_arg or "") == (fix.setting or fix.name, fix.value)


def test_a_setting_already_on_is_never_a_fix() -> None:
    assert setting_fixes([CAPTURE_SCALARS], {"capture_scalar_outputs": True}) == []
    assert setting_fixes([CAPTURE_SCALARS], {"capture_scalar_outputs": False}) == [CAPTURE_SCALARS.fix]
    assert setting_fixes([CAPTURE_SCALARS, CAPTURE_SCALARS, TRACE_AUTOGRAD], {}) == [
        CAPTURE_SCALARS.fix,
        TRACE_AUTOGRAD.fix,
    ]


@pytest.mark.parametrize("recording", recordings(), ids=os.path.basename)
def test_every_fix_in_the_fixture_reports_can_be_applied(recording: str) -> None:
    """Each config fix names a setting this torch has (so a prelude or bench
    --try can set it), each compile argument is one torch.compile takes, and
    each code fix says its change."""
    for f in report_of(recording)["findings"]:
        for x in f["fixes"]:
            assert x["kind"] in FIX_KINDS
            if x["kind"] == CONFIG:
                assert setting_exists(x), x
                assert parse_try(x["try"]) == (f"{x['module']}.{x['name']}", x["value"])
            elif x["kind"] == COMPILE_ARG:
                assert x["name"] in COMPILE_ARGS and parse_try(x["try"])[0] == x["name"]
            else:
                assert x["kind"] == CODE and x["code"] and x["try"] is None


# ------------------------------------------------------------ applied, for real


@pytest.fixture(scope="module")
def applied(tmp_path_factory: Any) -> dict[str, Recorded]:
    """older_templates.py broken; then the same script with its report's
    config fixes set by a prelude, and with the scalar finding's compile
    argument given as bench --try gives it; last_batch.py broken and with
    its shape finding's compile argument; scalar_setting_on.py (the setting
    already on)."""
    base = tmp_path_factory.mktemp("fixes")
    first = record_all(base, {"broken": {"target": [OLDER]}, "last": {"target": [LAST]}, "on": {"target": [SCALARS]}})
    prelude = base / "prelude.py"
    prelude.write_text(config_prelude(config_fixes(first["broken"].rep), OLDER))
    scalar = next(f for f in first["broken"].findings if f["id"].endswith(":k"))
    shape = next(f for f in first["last"].findings if f["rule"] == "shape-recompiles")
    tries = {
        name: {"target": target, "env": {"CTMON_COMPILE_MODE": "default", TRY_ENV: arg}}
        for name, target, arg in (
            ("scalar-try", [OLDER], _compile_arg(scalar)),
            ("last-try", [LAST], _compile_arg(shape)),
        )
    }
    return {**first, **record_all(base, {"settings": {"target": [str(prelude)]}, **tries})}


def _compile_arg(finding: dict[str, Any]) -> str:
    (arg,) = [x["try"] for x in finding["fixes"] if x["kind"] == COMPILE_ARG]
    return str(arg)


def _ids(r: Recorded, prefix: str) -> list[dict[str, Any]]:
    return [f for f in r.findings if f["id"].startswith(prefix)]


@pytest.mark.slow
def test_the_reports_config_fixes_applied_remove_what_they_answer(applied: dict[str, Recorded]) -> None:
    broken, fixed = applied["broken"], applied["settings"]
    names = {x["name"] for x in config_fixes(broken.rep)}
    assert names == {"capture_scalar_outputs", "allow_unspec_int_on_nn_module"}
    # the settings reached every compile of the unchanged script
    configs = [ev.get("dynamo_config") or {} for ev in fixed.run.events() if ev["kind"] == "compile_start"]
    assert configs and all(c.get(n) is True for c in configs for n in names)
    # .item() no longer breaks the graph
    assert _ids(broken, "graph-breaks:scalar-output") and not _ids(fixed, "graph-breaks:scalar-output")
    assert fixed.rep["compile"]["graph_breaks"] == broken.rep["compile"]["graph_breaks"] - 1
    # the int attribute: one recompile is left (automatic dynamic), and the advice says so
    (before,) = [f for f in broken.findings if "module_attribute" in f["id"]]
    (after,) = [f for f in fixed.findings if "module_attribute" in f["id"]]
    assert (before["severity"], after["severity"]) == ("warning", "info")
    assert "recompiled 4×" in before["title"] and "recompiled 1×" in after["title"]
    assert "allow_unspec_int_on_nn_module is already True in this job: its first change recompiles once" in after["fix"]
    assert fixed.rep["compile"]["recompiles"] < broken.rep["compile"]["recompiles"]
    # no finding suggests a setting that is now on
    assert config_fixes(fixed.rep) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("broken", "tried", "rule", "name"),
    [("broken", "scalar-try", "scalar-recompiles", "k"), ("last", "last-try", "shape-recompiles", "batch[0]")],
)
def test_a_compile_argument_applied_as_bench_tries_it_removes_the_finding(
    applied: dict[str, Recorded], broken: str, tried: str, rule: str, name: str
) -> None:
    def found(r: Recorded) -> list[str]:
        return [f["id"] for f in r.rule(rule) if f["id"].split(":")[2] == name]

    assert found(applied[broken])
    assert found(applied[tried]) == [], [f["id"] for f in applied[tried].findings]
    assert applied[tried].rep["compile"]["recompiles"] < applied[broken].rep["compile"]["recompiles"]
    notes = [n["message"] for n in applied[tried].rep.get("notes", [])]
    assert any("tried: torch.compile(..., dynamic=True)" in m for m in notes), notes


@pytest.mark.slow
def test_a_setting_the_job_has_is_not_a_fix_in_its_report(applied: dict[str, Recorded]) -> None:
    r = applied["on"]  # capture_scalar_outputs = True in the script; a float .tolist() breaks
    (f,) = _ids(r, "graph-breaks:scalar-output")
    assert "capture_scalar_outputs is already True" in f["fix"]
    assert all(x["kind"] != CONFIG for g in r.findings for x in g["fixes"]), [g["fixes"] for g in r.findings]
    assert any(x["kind"] == CODE for x in f["fixes"])
