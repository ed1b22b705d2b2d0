"""Graph-break advice that works: PyTorch's own words first, ctmon's only
where it knows more, and never a setting the job already has.

Each workload in tests/workloads/advice/ is recorded broken, then with the
advice applied (a flag of the workload), under real ``ctmon record`` and
``ctmon report --json``: the finding is gone and the counts are better.

* backward_in_step.py: ``loss.backward()`` inside the compiled step. PyTorch's
  hint (GB0123) names ``torch._dynamo.trace_autograd_ops``, which does not
  exist: the finding quotes it and gives the real name. Applied
  (--trace-autograd), the next break is GB4927 with its own hint
  (``loss.detach()``); both applied (--fix): one graph, the same gradient.
* scalar_setting_on.py: capture_scalar_outputs already True, a float
  ``.tolist()`` break that it does not cover: the advice says so instead of
  suggesting it. With the setting off and ``.item()`` (--item), the setting is
  the advice, and applying it (--capture-scalars) removes the break.
"""

from __future__ import annotations

import glob
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from helpers import WORKLOADS, Run, marker_lines, record

from ctmon.agent.config_reads import CONFIG_KEYS, read_config_in_force
from ctmon.agent.trace_convert import TraceConverter
from ctmon.findings import analyze
from ctmon.findings import breaks as B
from ctmon.findings.model import Finding
from ctmon.findings.pytorch_hints import ALIASES, Setting, hint_settings, quote, suggest
from ctmon.store import Session
from ctmon.wire import events_compile as EC
from ctmon.wire.decode import from_dict

ADVICE = os.path.join(WORKLOADS, "advice")
BACKWARD = os.path.join(ADVICE, "backward_in_step.py")
SCALARS = os.path.join(ADVICE, "scalar_setting_on.py")
PARALLEL = max(1, min(2, os.cpu_count() or 1))
GB0123_HINT = "Set torch._dynamo.trace_autograd_ops=True"
ALIASES_GB0123 = "torch._dynamo.trace_autograd_ops"
_GRAD = re.compile(r"grad norm compiled=(?P<compiled>[\d.]+) eager=(?P<eager>[\d.]+)")


class Recorded:
    def __init__(self, run: Run) -> None:
        assert run.returncode == 0, (run.proc.stdout[-2000:], run.proc.stderr[-4000:])
        self.run = run
        self.rep = run.report()
        self.findings: list[dict[str, Any]] = self.rep["findings"]
        self.counts: dict[str, Any] = self.rep["compile"]

    def breaks(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["rule"] == "graph-breaks"]

    def by_id(self) -> dict[str, dict[str, Any]]:
        return {f["id"]: f for f in self.findings}

    def loud(self) -> list[str]:
        return [f["id"] for f in self.findings if f["severity"] in ("warning", "critical")]

    def configs(self) -> list[dict[str, Any]]:
        """The settings each compile_start of the recording carries."""
        return [ev.get("dynamo_config") or {} for ev in self.run.events() if ev["kind"] == "compile_start"]

    def grad(self) -> tuple[float, float]:
        m = _GRAD.search(self.run.proc.stdout)
        assert m, self.run.proc.stdout[-2000:]
        return float(m.group("compiled")), float(m.group("eager"))


def record_all(base: Any, jobs: dict[str, list[str]]) -> dict[str, Recorded]:
    def one(name: str, target: list[str]) -> Recorded:
        return Recorded(record(base / name, target, torch_trace=False))

    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {name: pool.submit(one, name, target) for name, target in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


# ------------------------------------------------- loss.backward() in the step


@pytest.fixture(scope="module")
def backward(tmp_path_factory):
    return record_all(
        tmp_path_factory.mktemp("backward"),
        {
            "broken": [BACKWARD],
            "setting": [BACKWARD, "--trace-autograd"],
            "fixed": [BACKWARD, "--fix"],
        },
    )


@pytest.mark.slow
def test_backward_break_quotes_pytorchs_hint_first_with_the_real_setting_name(backward):
    r = backward["broken"]
    (f,) = r.breaks()
    assert f["id"] == "graph-breaks:autograd" and f["severity"] == "warning"
    assert (f["file"], f["line"]) == (BACKWARD, marker_lines(BACKWARD)["backward"])
    fix = f["fix"]
    assert fix.startswith("PyTorch (GB0123): "), fix  # PyTorch's explanation and hint, first and verbatim
    assert GB0123_HINT in fix and "gb/gb0123.html" in fix
    assert "torch._dynamo.config.trace_autograd_ops = True" in fix  # the name that exists
    assert "custom_op" not in fix and "allow_in_graph" not in fix
    assert fix.index(GB0123_HINT) < fix.index("ctmon: ") < fix.index("loss.detach()")
    assert {c.get("trace_autograd_ops") for c in r.configs()} == {False}


@pytest.mark.slow
def test_applying_pytorchs_hint_moves_the_break_to_its_next_hint(backward):
    r = backward["setting"]
    assert {c.get("trace_autograd_ops") for c in r.configs()} == {True}  # the setting reached the compiles
    assert all("gb0123" not in (b.get("url") or "") for b in r.rep["graph_breaks"])
    (f,) = r.breaks()
    assert f["fix"].startswith("PyTorch (GB4927): ") and "`loss.detach()`" in f["fix"]
    assert "GB0123" not in f["fix"] and "custom_op" not in f["fix"]
    assert r.counts["graph_breaks"] <= backward["broken"].counts["graph_breaks"]


@pytest.mark.slow
def test_both_hints_applied_give_one_graph_and_the_same_gradient(backward):
    r = backward["fixed"]
    assert r.counts["graph_breaks"] == 0 and r.counts["compiles"] == 1 and r.counts["recompiles"] == 0
    assert r.breaks() == [] and r.loud() == []
    compiled, eager = r.grad()
    assert compiled == eager == backward["broken"].grad()[0]


# --------------------------------------------- a setting already on in the job


@pytest.fixture(scope="module")
def scalars(tmp_path_factory):
    return record_all(
        tmp_path_factory.mktemp("scalars"),
        {
            "on": [SCALARS],
            "on_fixed": [SCALARS, "--fix"],
            "item": [SCALARS, "--item"],
            "item_setting": [SCALARS, "--item", "--capture-scalars"],
        },
    )


def _suggests_capture_scalars(fix: str) -> bool:
    return bool(re.search(r"capture_scalar_outputs`?\s*=\s*`?True", fix))


@pytest.mark.slow
def test_a_setting_already_on_is_not_suggested_and_the_advice_says_so(scalars):
    r = scalars["on"]
    assert {c.get("capture_scalar_outputs") for c in r.configs()} == {True}
    f = r.by_id()["graph-breaks:scalar-output"]
    assert (f["file"], f["line"]) == (SCALARS, marker_lines(SCALARS)["tolist"])
    assert f["fix"].startswith("PyTorch (GB0109): ") and "is an integer type" in f["fix"]
    already = "capture_scalar_outputs is already True in this job; it does not cover .tolist() of a float tensor"
    assert already in f["fix"]
    # no finding, on the break or on the value it returns, suggests the setting the job has
    assert [x["id"] for x in r.findings if _suggests_capture_scalars(x["fix"])] == []
    item = [x for x in r.findings if x["rule"] == "scalar-recompiles"]
    assert all("capture_scalar_outputs is already True in this job" in x["fix"] for x in item), item


@pytest.mark.slow
def test_returning_the_tensor_removes_the_break(scalars):
    r = scalars["on_fixed"]
    assert r.counts["graph_breaks"] == 0 and r.counts["recompiles"] == 0
    assert r.breaks() == [] and r.loud() == []


@pytest.mark.slow
def test_the_setting_is_suggested_while_off_and_applying_it_removes_the_break(scalars):
    r = scalars["item"]
    assert {c.get("capture_scalar_outputs") for c in r.configs()} == {False}
    f = r.by_id()["graph-breaks:scalar-output"]
    assert (f["file"], f["line"]) == (SCALARS, marker_lines(SCALARS)["item"])
    assert f["fix"].startswith("PyTorch (GB0124): ") and _suggests_capture_scalars(f["fix"])
    assert "already" not in f["fix"]
    fixed = scalars["item_setting"]
    assert fixed.counts["graph_breaks"] == 0 and fixed.counts["recompiles"] == 0
    assert fixed.breaks() == [] and fixed.loud() == []
    assert fixed.counts["compiles"] < r.counts["compiles"]


# ------------------------------------------------------- PyTorch's own hints


def _registry() -> dict[str, list[dict[str, Any]]]:
    import torch

    (path,) = glob.glob(os.path.join(os.path.dirname(torch.__file__), "_dynamo", "graph_break_registry.json"))
    with open(path) as f:
        return json.load(f)


def _is_config_key(module: str, key: str) -> bool:
    """A key of one of torch's config modules (read without getattr, which
    warns for a deprecated key)."""
    import importlib

    return key in importlib.import_module(module)._config


def test_every_setting_read_from_pytorchs_hints_is_a_real_config_key():
    registry = _registry()
    found: set[str] = set()
    for entries in registry.values():
        for entry in entries:
            # the registry splits a hint over several strings where the source did
            for s in hint_settings([" ".join(entry["Hints"]), *entry["Hints"]]):
                assert _is_config_key(s.module, s.key), (s, entry["Hints"])
                found.add(s.name)
    assert "torch._dynamo.config.trace_autograd_ops" in found and "torch._dynamo.config.capture_scalar_outputs" in found


def test_aliases_correct_a_name_that_does_not_exist_to_one_that_does():
    import torch._dynamo

    for written, real in ALIASES.items():
        assert not hasattr(torch._dynamo, written.rsplit(".", 1)[1]), written  # the misspelling is no name
        assert _is_config_key(*real.rsplit(".", 1)), real
    (s,) = hint_settings([GB0123_HINT])
    assert (s.name, s.value, s.written) == ("torch._dynamo.config.trace_autograd_ops", True, ALIASES_GB0123)
    # a function PyTorch names (or misspells) is no setting
    assert hint_settings(["Use torch._dynamo.allow_c_hash(Foo) to register it", "torch._dynamo.nope=True"]) == []


def test_the_autograd_break_ids_are_pytorchs():
    registry = {k.lower() for k in _registry()}
    assert set(B._AUTOGRAD_IDS) <= registry


def test_hint_forms_pytorch_writes():
    hints = [
        "Set `torch._dynamo.config.capture_scalar_outputs = True` or `export TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1`",
        "Change `torch._dynamo.config.trace_numpy` to `True`.",
        "Set torch._dynamo.config.allow_rnn=True to enable experimental support",
        "increasing torch._dynamo.config.recompile_limit to an appropriate value.",  # no value: no setting
        "you can try adding it to `torch._dynamo.config.reorderable_logging_functions`.",
    ]
    assert [(s.key, s.value) for s in hint_settings(hints)] == [
        ("capture_scalar_outputs", True),
        ("trace_numpy", True),
        ("allow_rnn", True),
    ]


def test_quote_keeps_pytorchs_words_and_says_a_hinted_setting_is_on():
    hints = ["Set `torch._dynamo.config.capture_scalar_outputs = True`"]
    text = quote("gb0124", "https://x/gb0124.html", "Dynamo does not support it.", hints, {})
    assert text == (
        "PyTorch (GB0124): Dynamo does not support it. Hint: Set `torch._dynamo.config.capture_scalar_outputs = "
        "True`. See https://x/gb0124.html"
    )
    on = quote("gb0124", None, None, hints, {"capture_scalar_outputs": True})
    assert on.endswith("(capture_scalar_outputs is already True in this job.)")
    assert quote("gb0001", "https://x", None, [], {}) == ""  # no words: the page is in the evidence


def test_suggest_never_names_a_setting_at_its_value_already():
    s = Setting("capture_dynamic_output_shape_ops", True)
    assert suggest(s, {}) == "Set torch._dynamo.config.capture_dynamic_output_shape_ops = True."
    assert suggest(s, {"capture_dynamic_output_shape_ops": False}).startswith("Set ")
    assert suggest(s, {"capture_dynamic_output_shape_ops": True}, not_covering="this operator") == (
        "capture_dynamic_output_shape_ops is already True in this job; it does not cover this operator."
    )
    assert suggest(Setting("recompile_limit", 1), {"recompile_limit": True}).startswith("Set ")  # True is not 1


# -------------------------------------------- the settings in force, recorded


def test_the_agent_reads_the_settings_in_force_on_the_compiling_thread():
    import torch._dynamo.config as cfg

    plain = read_config_in_force()
    assert set(plain) <= set(CONFIG_KEYS) and "capture_scalar_outputs" in plain
    assert all(isinstance(v, (bool, int, float, str)) for v in plain.values())
    with cfg.patch(capture_scalar_outputs=True, recompile_limit=3):
        patched = read_config_in_force()
    assert patched["capture_scalar_outputs"] is True and patched["recompile_limit"] == 3
    assert len(json.dumps(patched)) < 1000


class _Entry:
    def __init__(self, deprecated: bool = False) -> None:
        self.deprecated = deprecated


class _OddConfig:
    """A config module as a future torch might have it: a deprecated key
    (reading it warns), a key whose read raises, values that are no scalars."""

    _config = {"specialize_float": _Entry(deprecated=True)}
    capture_scalar_outputs = True
    specialize_int = float("nan")
    automatic_dynamic_shapes = ["a"]
    recompile_limit = 1 << 70
    optimize_ddp = "python_reducer"

    def __getattr__(self, name: str) -> Any:
        if name == "specialize_float":
            import warnings

            warnings.warn("specialize_float is deprecated", FutureWarning, stacklevel=2)
            return False
        raise RuntimeError(name)


def test_reading_the_settings_never_raises_warns_or_sends_what_json_cannot_hold(monkeypatch):
    import sys
    import warnings

    monkeypatch.setitem(sys.modules, "torch._dynamo.config", _OddConfig())
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        got = read_config_in_force()
    assert warned == []  # a warning would be printed in the job's own output
    assert got == {"capture_scalar_outputs": True, "optimize_ddp": "python_reducer"}


def test_the_settings_travel_on_compile_start():
    start = {"dynamo_start": {"stack": [{"filename": "/w/train.py", "line": 3, "name": "f"}]}, "frame_id": 0}
    start.update(frame_compile_id=0, attempt=0)
    extra = {"attr": None, "cfg": {"recompile_limit": 8}, "config": {"capture_scalar_outputs": True}}
    (ev,) = TraceConverter().convert("dynamo_start", 1.0, start, extra)
    assert ev["dynamo_config"] == {"capture_scalar_outputs": True} and ev["recompile_limit"] == 8
    decoded = from_dict(ev)
    assert isinstance(decoded, EC.CompileStart) and decoded.dynamo_config == {"capture_scalar_outputs": True}
    (older,) = TraceConverter().convert("dynamo_start", 1.0, start, {"attr": None, "cfg": {}})
    assert "dynamo_config" not in older  # an agent without the reading sends what it always did


def _start(cid: str, config: Any) -> dict[str, Any]:
    fid = int(cid.split("/")[0])
    ev = {"kind": "compile_start", "t": 1.0, "compile_id": cid, "frame_id": fid, "name": "f", "file": "/w/a.py"}
    if config is not None:
        ev["dynamo_config"] = config
    return ev


def test_config_in_force_is_what_every_compile_behind_a_finding_had():
    s = Session()
    s.apply(_start("0/0", {"capture_scalar_outputs": True, "specialize_int": False, "optimize_ddp": "python"}))
    s.apply(_start("0/1", {"capture_scalar_outputs": True, "specialize_int": True, "optimize_ddp": "python"}))
    s.apply(_start("1/0", None))  # a compile that did not record its settings (an older agent)
    odd = {"capture_scalar_outputs": ["a"], "xxx": "y" * 5000, "suppress_errors": None, "ok": 1.5}
    s.apply(_start("2/0", odd))
    assert s.bad_events == 0
    s.apply(_start("3/0", {"capture_scalar_outputs": {"nested": [1]}}))  # not the protocol: a bad line, no more
    assert s.bad_events == 1 and s.compile.config_in_force(["3/0"]) == {}
    cs = s.compile
    assert cs.config_in_force(["0/0", "0/1", "1/0"]) == {"capture_scalar_outputs": True, "optimize_ddp": "python"}
    assert cs.config_in_force(["1/0", "9/9"]) == {}
    assert cs.config_in_force(["2/0"]) == {"ok": 1.5}  # scalars of a bounded size only
    assert cs.config_in_force([]) == {}


def test_one_config_tuple_is_kept_for_many_compiles_and_distinct_ones_are_bounded():
    s = Session()
    for k in range(300):
        s.apply(_start(f"0/{k}", {"capture_scalar_outputs": True}))
    for k in range(400):
        s.apply(_start(f"1/{k}", {"recompile_limit": k}))
    cs = s.compile
    assert len({id(c) for c in cs._config_by_compile.values() if c == (("capture_scalar_outputs", True),)}) == 1
    assert len(cs._configs) <= 256
    assert cs.config_in_force(["1/399"]) == {}  # past the bound: not recorded, so never claimed


# ----------------------------------------------------- advice from events alone


def _session(summary: str, gb: str | None, hints: list[str], config: dict[str, Any] | None) -> list[Finding]:
    s = Session()
    s.apply({"kind": "session", "t": 0.0, "v": 1, "id": "x", "command": ["python", "/w/a.py"]})
    s.apply(_start("0/0", config))
    brk = {"kind": "graph_break", "t": 1.0, "compile_id": "0/0", "frame_id": 0, "file": "/w/a.py", "line": 7}
    brk.update(summary=summary, explanation=f"{summary}: the explanation.", hints=hints, gb_id=gb)
    brk.update(url=f"https://meta-pytorch.github.io/compile-graph-break-site/gb/{gb}.html" if gb else None)
    s.apply({k: v for k, v in brk.items() if v is not None})
    s.apply({"kind": "compile", "t": 1.1, "compile_id": "0/0", "frame_id": 0, "co_name": "f"})
    return [f for f in analyze(s, strict=True) if f.rule == "graph-breaks"]


def test_dynamic_shape_setting_already_on_is_not_suggested_again():
    (off,) = _session("Dynamic shape operator (no meta kernel)", None, [], {})
    assert "Set torch._dynamo.config.capture_dynamic_output_shape_ops = True" in off.fix
    (on,) = _session("Dynamic shape operator (no meta kernel)", None, [], {"capture_dynamic_output_shape_ops": True})
    assert "capture_dynamic_output_shape_ops is already True in this job; it does not cover this operator" in on.fix
    assert "Set torch._dynamo.config.capture_dynamic_output_shape_ops" not in on.fix


def test_generic_call_advice_only_for_a_call_dynamo_skips():
    (skipped,) = _session("Attempted to call function marked as skipped: mylib.helper", None, [], {})
    assert "custom_op" in skipped.fix and "allow_in_graph" in skipped.fix
    (other,) = _session("Unsupported method call: _rebuild_buckets", None, ["Report an issue."], {})
    assert other.id.startswith("graph-breaks:unsupported-call") and "custom_op" not in other.fix
    assert other.fix.startswith("PyTorch: Unsupported method call") and "Hint: Report an issue." in other.fix


def test_autograd_with_the_setting_already_on_says_so():
    hints = [GB0123_HINT]
    (f,) = _session("Unsupported Tensor.backward() call", "gb0123", hints, {"trace_autograd_ops": True})
    assert f.id.startswith("graph-breaks:autograd")
    assert f.fix.count("trace_autograd_ops is already True in this job") == 1 and "custom_op" not in f.fix
    assert "loss.detach()" not in f.fix  # advice for after the setting is made, and it was: GB0123 has another cause
