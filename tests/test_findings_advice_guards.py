"""Advice on recompiles that works: each template is applied to a workload
that shows its problem, and the problem is gone under ctmon.

A loop bound (``for _ in range(k)`` in compiled code, k changing): Dynamo
unrolls the loop, so each k is a graph. PyTorch's own record says a dynamic
k does not help (``range_refined_to_singleton``) and a tensor k breaks the
graph at ``range()`` (GB0059): the workload pins both (``--dynamic``,
``--tensor``), then applies each of ctmon's alternatives (``--fix``,
``--while-loop``, ``--limit``) and checks the counts. Recorded two at a time
(the CI machines have two cores), ``backend="eager"``.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from helpers import WORKLOADS, Run, record

from ctmon.findings import analyze
from ctmon.findings import guards as G
from ctmon.findings.breaks import category
from ctmon.store import Session

LOOP = os.path.join(WORKLOADS, "advice", "loop_bound.py")
VALUES = 6  # the workload's k takes 1 .. 6
PARALLEL = max(1, min(2, os.cpu_count() or 1))
# what PyTorch's own records show cannot work for a loop bound
NOT_FOR_A_LOOP = ("dynamic=True", "torch.tensor(k)", "capture_scalar_outputs", "only postpones")


def loop_line() -> int:
    with open(LOOP) as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip().endswith("# LOOP"))


class Recorded:
    def __init__(self, run: Run) -> None:
        assert run.returncode == 0, (run.proc.stdout[-2000:], run.proc.stderr[-4000:])
        self.rep = run.report()
        self.findings: list[dict[str, Any]] = self.rep["findings"]
        self.counts: dict[str, Any] = self.rep["compile"]

    def rule(self, rule: str) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["rule"] == rule]

    def loop_bound(self) -> dict[str, Any]:
        got = [f for f in self.rule("scalar-recompiles") if "guard kind: loop_bound" in f["detail"]]
        assert len(got) == 1, [(f["id"], f["title"]) for f in self.findings]
        return got[0]

    def loud(self) -> list[tuple[str, str]]:
        return [(f["id"], f["title"]) for f in self.findings if f["severity"] in ("warning", "critical")]


@pytest.fixture(scope="module")
def loop(tmp_path_factory: Any) -> dict[str, Recorded]:
    base = tmp_path_factory.mktemp("loop_bound")
    flags = {
        "broken": [],
        "dynamic": ["--dynamic"],
        "tensor": ["--tensor"],
        "fix": ["--fix"],
        "while": ["--while-loop"],
        "limit": ["--limit", str(VALUES)],
    }

    def one(name: str) -> Recorded:
        run = record(base / name, [LOOP, *flags[name]], torch_trace=False, options=["-q"], timeout=240)
        return Recorded(run)

    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {name: pool.submit(one, name) for name in flags}
        return {name: f.result() for name, f in futures.items()}


def _no_advice_that_cannot_work(fix: str) -> None:
    for words in NOT_FOR_A_LOOP:
        assert words not in fix, (words, fix)


def _advises_what_works(fix: str) -> None:
    assert "Compile the loop's body, not the loop" in fix and "torch.compile(body)" in fix
    assert "torch.while_loop" in fix and "torch.no_grad()" in fix


@pytest.mark.slow
def test_a_loop_bound_is_named_as_such_with_advice_that_works(loop):
    r = loop["broken"]
    assert r.counts["limit_hits"] >= 1
    f = r.loop_bound()
    assert f["severity"] == "warning" and (f["file"], f["line"]) == (LOOP, loop_line())
    assert f["title"] == "refine recompiled 4× on the bound of `for _ in range(k)`, a loop Dynamo unrolls"
    # why the two obvious changes fail, in PyTorch's words
    assert "range_refined_to_singleton" in f["detail"] and "GB0059" in f["detail"]
    assert any("reason range_refined_to_singleton" in e for e in f["evidence"])
    _advises_what_works(f["fix"])
    _no_advice_that_cannot_work(f["fix"])
    # a few values: a limit at least their count, said as a condition, with the count seen
    assert "If 'k' only ever takes a few values" in f["fix"] and "recompile_limit to at least" in f["fix"]


@pytest.mark.slow
def test_the_limit_finding_counts_the_values_instead_of_saying_raising_only_postpones(loop):
    (f,) = loop["broken"].rule("recompile-limit")
    assert f["severity"] == "critical"
    assert "the bound of the loop `for _ in range(k)` changed" in f["evidence"][0]
    _advises_what_works(f["fix"])
    _no_advice_that_cannot_work(f["fix"])
    # four values compiled, one refused: the count is a lower bound, never above the truth
    assert "('k' has taken at least 5 values so far)" in f["fix"]
    assert 5 <= VALUES


@pytest.mark.slow
def test_dynamic_true_still_recompiles_every_bound(loop):
    r = loop["dynamic"]
    assert r.counts["limit_hits"] >= 1 and r.counts["recompiles"] == loop["broken"].counts["recompiles"]
    _no_advice_that_cannot_work(r.loop_bound()["fix"])


@pytest.mark.slow
def test_a_tensor_bound_breaks_the_graph_and_is_not_advised_as_logging_or_item(loop):
    r = loop["tensor"]
    assert r.counts["graph_breaks"] >= 1
    breaks = r.rule("graph-breaks")
    assert breaks and all(not f["id"].startswith("graph-breaks:logging") for f in breaks), breaks
    assert all("GB0059" in f["fix"] for f in breaks)  # PyTorch's own explanation kept
    # the resumed frame guards the range itself (___stack0.stop): a loop bound, not an .item()
    f = r.loop_bound()
    assert "___stack0.stop" in f["evidence"][0]
    _advises_what_works(f["fix"])
    _no_advice_that_cannot_work(f["fix"])


@pytest.mark.parametrize("run", ["fix", "while"])
@pytest.mark.slow
def test_applying_the_advice_compiles_once(loop, run):
    r = loop[run]
    c = r.counts
    assert (c["compiles"], c["recompiles"], c["limit_hits"], c["graph_breaks"]) == (1, 0, 0, 0), c
    assert r.loud() == [] and not r.rule("scalar-recompiles")


@pytest.mark.slow
def test_a_limit_at_the_number_of_values_keeps_a_graph_for_each(loop):
    r = loop["limit"]
    c = r.counts
    assert (c["compiles"], c["limit_hits"], c["graph_breaks"]) == (VALUES, 0, 0), c
    assert not r.rule("recompile-limit")


# ---------------------------------------------------------- without torch


def _reason(guard: str, code: str, hint: str = "") -> str:
    return f"0/1: {guard}  # {code}  # t.py:11 in f{hint}"


@pytest.mark.parametrize(
    "guard,code,kind",
    [
        ("k == 2", "for _ in range(k):", "loop_bound"),
        ("k == 2", "for i in range(0, k, 2):", "loop_bound"),
        ("k == 2", "for i, _ in enumerate(range(k)):", "loop_bound"),
        ("k == 2", "return sum(torch.tanh(x @ w) for _ in range(k))", "loop_bound"),
        ("k == 2", "while i < k:", "loop_bound"),
        ("G['N'] == 2", "for _ in range(N):", "loop_bound"),
        ("c['n'] == 2", 'for _ in range(c["n"]):', "loop_bound"),
        ("self.n == 2", "for _ in range(self.n):", "loop_bound"),
        ("___stack0.stop == 2", "for _ in range(k):", "loop_bound"),
        ("___stack0 == 3", "for _ in range(int(t.item())):", "loop_bound"),
        # not a loop bound
        ("k == 2", "y = torch.arange(k)", "scalar"),
        ("k == 2", "for _ in range(n):", "scalar"),  # another value's loop (unless PyTorch pins k there)
        ("scale == 2", "for i in range(3): x = x * scale", "scalar"),
        ("temperature == 0.5", "for _ in range(temperature):", "scalar"),
        ("___stack0 == 3.5", "for _ in range(3): y = y / ___stack0", "item"),
    ],
)
def test_loop_bounds_from_the_guards_source_line(guard, code, kind):
    assert G.classify(_reason(guard, code)).kind == kind


def test_torchs_own_line_is_not_read_as_a_hint():
    g = G.classify(_reason("k == 2", "for _ in range(k):", " (_dynamo/variables/tensor.py:2606 in evaluate_expr)"))
    assert g.kind == "loop_bound" and g.hint is None


T0 = 1795348000.0
F = "/work/job/loop.py"


def _session(reasons: list[str], pins: list[dict[str, Any]], frames: int = 1) -> Session:
    """Frames 0 .. frames-1 compile, then recompile once per reason, side by side."""
    events: list[dict[str, Any]] = [{"kind": "session", "t": T0, "v": 1, "id": "x", "command": ["python", F]}]
    t = T0
    for k, reason in enumerate([None, *reasons]):
        for fid in range(frames):
            cid = f"{fid}/{k}"
            name = f"refine{fid or ''}"
            events.append({"kind": "compile_start", "t": t, "compile_id": cid, "frame_id": fid, "name": name})
            ev = {
                "kind": "compile",
                "t": t + 0.1,
                "compile_id": cid,
                "frame_id": fid,
                "start_time": t,
                "entire_frame_compile_time_s": 0.1,
                "co_name": name,
                "co_filename": F,
                "co_firstlineno": 10 + 10 * fid,
                "recompile_limit": 8,
            }
            if reason:
                ev["recompile_reason"] = reason
            events.append(ev)
            t += 0.1
        t += 3.0  # a moment of its own (causes.GAP_S)
    for p in pins:
        events.append({"kind": "specialization", "t": t, "frame_id": 0, **p})
    s = Session()
    for ev in events:
        s.apply(ev)
    assert s.bad_events == 0
    return s


def _pin(cid: str, value: int, code: str = "for _ in range(n):") -> dict[str, Any]:
    return {
        "compile_id": cid,
        "symbol": "s16",
        "value": str(value),
        "reason": "range_refined_to_singleton",
        "sources": ["L['k']"],
        "file": F,
        "line": 14,
        "code": code,
    }


# torch 2.13's guards for `n = k * 2; for _ in range(n)`: the first points at
# k's first use, the later ones at a loop whose bound is named n
DERIVED = [
    "0/0: k == 1                          # n = k * 2  # job/loop.py:13 in refine",
    "0/1: k == 2  # for _ in range(n):  # job/loop.py:14 in refine (_dynamo/variables/tensor.py:2606 in evaluate_expr)",
    "0/2: k == 3  # for _ in range(n):  # job/loop.py:14 in refine (_dynamo/variables/tensor.py:2606 in evaluate_expr)",
]


def test_a_bound_computed_from_an_argument_is_known_by_pytorchs_specialisation():
    s = _session(DERIVED, [_pin("0/1", 2), _pin("0/2", 3)])
    (f,) = [f for f in analyze(s, strict=True) if f.rule == "scalar-recompiles"]
    assert "guard kind: loop_bound" in f.detail and "`for _ in range(n)`" in f.title
    assert (f.file, f.line) == (F, 14)  # the loop, from PyTorch's record
    _no_advice_that_cannot_work(f.fix)
    assert "('k' has taken 4 values so far)" in f.fix


def test_the_same_pin_outside_a_loop_is_a_python_number():
    # `if k == 3:` pins k to one value too: not a loop
    s = _session(DERIVED[:2], [_pin("0/1", 2, code="if k == 2:")])
    (f,) = [f for f in analyze(s, strict=True) if f.rule == "scalar-recompiles"]
    assert "loop_bound" not in f.detail and f.title == "refine recompiled 2× on the Python number 'k'"


def test_one_bound_is_one_cause_even_where_its_first_guard_is_elsewhere():
    reasons = [
        "0/0: k == 1                      # y = x * k  # job/loop.py:12 in refine"
        f'\nUser stack trace:\n  File "{F}", line 12, in refine\n    y = x * k',
        "0/1: k == 2  # for _ in range(k):  # job/loop.py:14 in refine (_dynamo/variables/tensor.py:2606 in e)",
    ]
    found = [f for f in analyze(_session(reasons, []), strict=True) if f.rule == "scalar-recompiles"]
    assert len(found) == 1 and "guard kind: loop_bound" in found[0].detail
    assert found[0].line != 12  # k's first use is not the loop


def test_one_bound_recompiling_several_frames_is_one_finding_with_the_loop_advice():
    reasons = [_reason(f"k == {v}", "for _ in range(k):") for v in (1, 2, 3)]
    (f,) = [f for f in analyze(_session(reasons, [], frames=2), strict=True) if f.rule == "scalar-recompiles"]
    assert f.title.startswith("2 frames recompile together on every change: the bound of the loop `for _ in range(k)`")
    _advises_what_works(f.fix)
    _no_advice_that_cannot_work(f.fix)
    assert "('k' has taken 4 values so far)" in f.fix


def test_a_module_attribute_bound_keeps_dynamos_hint_and_says_it_does_not_help():
    hint = (
        " (HINT: torch.compile considers integer attributes of the nn.Module to be static. If you are observing "
        "recompilation, you might want to make this integer dynamic using "
        "torch._dynamo.config.allow_unspec_int_on_nn_module = True, or convert this integer into a tensor.)"
    )
    reasons = [_reason(f"self.n == {v}", "for _ in range(self.n):", hint) for v in (1, 2)]
    (f,) = [f for f in analyze(_session(reasons, []), strict=True) if f.rule == "scalar-recompiles"]
    assert "allow_unspec_int_on_nn_module" in f.detail and "For a loop bound neither helps" in f.detail
    assert "allow_unspec_int_on_nn_module" not in f.fix and "register_buffer" not in f.fix
    assert "If 'self.n' only ever takes a few values" in f.fix


@pytest.mark.parametrize(
    "builtin,cat",
    [("range", "unsupported-call"), ("print", "logging")],
)
def test_pytorchs_generic_logging_hint_does_not_make_a_builtin_a_logging_call(builtin, cat):
    # gb0059 carries the logging hint for every builtin Dynamo cannot trace
    hints = [
        f"Avoid calling builtin `{builtin}` with argument types ['Tensor']. Consider using an equivalent "
        f"alternative function/method to `{builtin}`.",
        "If you are attempting to call a logging function (e.g. `print`), you can try adding it to "
        "`torch._dynamo.config.reorderable_logging_functions`.",
        "Please report an issue to PyTorch.",
    ]
    s = _session([], [])
    s.apply(
        {
            "kind": "graph_break",
            "t": T0 + 0.05,
            "compile_id": "0/0",
            "frame_id": 0,
            "file": F,
            "line": 11,
            "summary": "Failed to trace builtin operator",
            "reason": "Failed to trace builtin operator",
            "explanation": f"Dynamo does not know how to trace builtin operator `{builtin}` with argument types "
            "['Tensor'] (has_kwargs False)",
            "hints": hints,
            "user_stack": [{"file": F, "line": 11, "name": "refine", "code": "for _ in range(k):"}],
        }
    )
    (site,) = s.compile.breaks.values()
    assert category(site) == cat
