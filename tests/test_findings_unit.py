"""The findings engine on synthetic events: every guard text shape, and each
rule's edge cases. Guard and graph-break texts are copied from real torch 2.13
recordings (tests/workloads/findings/*.py and small probes); events carry the
fields ``ctmon record`` writes, trimmed to what the rules read.
"""

from __future__ import annotations

import re

import pytest

from ctmon.findings import analyze
from ctmon.findings import guards as G
from ctmon.findings.breaks import category
from ctmon.findings.model import SEVERITY_RANK, Finding
from ctmon.store import Session

T0 = 1795348000.0
F = "/work/job/train.py"
W = "/work/main/tests/workloads/findings/guard_recompiles.py"


# ------------------------------------------------------------------ guards


def _ut(file: str, line: int, fn: str, code: str) -> str:
    return f'\nUser stack trace:\n  File "{file}", line {line}, in {fn}\n    {code}'


GUARD_CASES = [
    # (reason, kind, name, dim, expected, actual)
    ("0/0: tensor 'x' size mismatch at index 1. expected 8, actual 12", G.SHAPE, "x", 1, "8", "12"),
    ("0/0: tensor 'args[0]' size mismatch at index 0. expected 32, actual 20", G.SHAPE, "args[0]", 0, "32", "20"),
    ("0/1: tensor 'L['x']' size mismatch at index 0. expected 4, actual 5", G.SHAPE, "x", 0, "4", "5"),
    ("0/0: tensor 'x' stride mismatch at index 0. expected 8, actual 1", G.STRIDE, "x", 0, "8", "1"),
    ("0/0: tensor 'x' rank mismatch. expected 2, actual 3", G.RANK, "x", None, "2", "3"),
    ("3/0: tensor 'x' dtype mismatch. expected Float, actual Double", G.DTYPE, "x", None, "Float", "Double"),
    ("4/0: tensor 'x' requires_grad mismatch. expected requires_grad=1", G.REQUIRES_GRAD, "x", None, "1", "0"),
    (
        "0/0: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, "
        "AutogradCPU), actual DispatchKeySet(CUDA, BackendSelect, ADInplaceOrView, AutogradCUDA)",
        G.DEVICE,
        "x",
        None,
        "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, AutogradCPU)",
        "DispatchKeySet(CUDA, BackendSelect, ADInplaceOrView, AutogradCUDA)",
    ),
    (
        "0/0: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, "
        "AutogradCPU), actual DispatchKeySet(CPU, BackendSelect, ADInplaceOrView)",
        G.DISPATCH,
        "x",
        None,
        "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, AutogradCPU)",
        "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView)",
    ),
    (
        "3/0: expected type of 'x' to be a tensor type, ' but found <class 'torch.nn.parameter.Parameter'>",
        G.TYPE,
        "x",
        None,
        "tensor type",
        "torch.nn.parameter.Parameter",
    ),
    (
        "0/1: 2 <= x.size()[0]  # return x * 2  # mp/exp/t.py:23 in f (user code shown is first use of this "
        "value--the guard itself is not due user code but due to 0/1 specialization in the framework; to avoid "
        "specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim))",
        G.SHAPE,
        "x",
        0,
        "2 <= size",
        None,
    ),
    (
        "0/0: 2 <= t.size()[0] <= 16  # y = t * 2  # mp/exp/t.py:50 in <lambda> (user code shown is first use of "
        "this value--the guard itself is not due user code but due to 0/1 specialization in the framework; to avoid "
        "specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim))",
        G.SHAPE,
        "t",
        0,
        "2 <= size <= 16",
        None,
    ),
    (
        "2/0: temperature == 1.0                                       # return torch.softmax(logits / temperature, "
        "dim=-1)  # tests/workloads/findings/scalar_recompiles.py:33 in sample",
        G.SCALAR,
        "temperature",
        None,
        "1.0",
        None,
    ),
    (
        "0/0: s == -1                                                  # return x * s  # mp/exp/t.py:54 in <lambda>",
        G.SCALAR,
        "s",
        None,
        "-1",
        None,
    ),
    (
        "1/0: ___stack0 == 104.261474609375                            # return x / scale  # tests/workloads/findings/"
        "scalar_recompiles.py:29 in torch_dynamo_resume_in_normalize_at_28",
        G.ITEM,
        "___stack0",
        None,
        "104.261474609375",
        None,
    ),
    (
        "7/0: ___stack1 == 3054.378642421                              # return x + time.perf_counter()  # mp/exp/t.py:11"
        " in torch_dynamo_resume_in_k_at_11",
        G.ITEM,
        "___stack1",
        None,
        "3054.378642421",
        None,
    ),
    (
        "2/0: self.step == 0                                           # ramp = (self.step + 1) / WARMUP  # tests/"
        "workloads/findings/guard_recompiles.py:41 in forward (HINT: torch.compile considers integer attributes of the "
        "nn.Module to be static. If you are observing recompilation, you might want to make this integer dynamic using "
        "torch._dynamo.config.allow_unspec_int_on_nn_module = True, or convert this integer into a tensor.)",
        G.MODULE_ATTR,
        "self.step",
        None,
        "0",
        None,
    ),
    (
        "0/0: self.scale == 1.0                                        # return self.lin(x) * self.scale  # mp/exp/g.py:11"
        " in forward",
        G.MODULE_ATTR,
        "self.scale",
        None,
        "1.0",
        None,
    ),
    (
        "0/1: self._modules['drop'].training == True                   # return F.dropout(input, self.p, self.training, "
        "self.inplace)  # nn/modules/dropout.py:73 in forward",
        G.TRAINING,
        "self.drop.training",
        None,
        "True",
        None,
    ),
    (
        "0/1: L['self'].training == False  # x = self.fc(x)  # t.py:9 in forward",
        G.TRAINING,
        "self.training",
        None,
        "False",
        None,
    ),
    (
        "1/0: G['NOISE_STEP'] == 0                                          # return x + 0.01 * step  # tests/workloads/"
        "findings/guard_recompiles.py:62 in jitter",
        G.GLOBAL,
        "NOISE_STEP",
        None,
        "0",
        None,
    ),
    ("1/0: G['LR'] == 0.1   # return x * LR  # mp/exp/g.py:27 in upd", G.GLOBAL, "LR", None, "0.1", None),
    ("0/0: len(xs) == 2   # return sum(xs)  # t.py:17 in <lambda>", G.LENGTH, "xs", None, "2", None),
    ("0/0: len(L['batch']) == 3  # for t in batch:  # t.py:5 in f", G.LENGTH, "batch", None, "3", None),
    ("0/0: cfg['a'] == 1   # return x * cfg['a']  # t.py:18 in <lambda>", G.CONTAINER, "cfg['a']", None, "1", None),
    ("0/0: s[0] == 1   # return x * s[0]  # t.py:52 in <lambda>", G.CONTAINER, "s[0]", None, "1", None),
    ("0/0: b == True   # return x + 1 if b else x - 1  # t.py:19 in <lambda>", G.FLAG, "b", None, "True", None),
    ("0/0: m == 'sum'  # return x.sum() if m == 'sum' else x  # t.py:20 in f", G.FLAG, "m", None, "'sum'", None),
    ("0/0: L['mode'] == None  # if mode is None:  # t.py:3 in f", G.FLAG, "mode", None, "None", None),
    (
        "0/0: ___check_obj_id(f.__code__, 140287083186048), type=<class 'code'>  # return f(x)  # t.py:12 in <lambda>",
        G.IDENTITY,
        "f",
        None,
        "code",
        None,
    ),
    (
        "0/0: ___check_obj_id(L['self']._modules['act'], 139990012)  # x = self.act(x)  # t.py:9 in forward",
        G.IDENTITY,
        "self.act",
        None,
        None,
        None,
    ),
    ("0/0: ___check_type_id(L['x'], 94066711)  # return x + 1  # t.py:3 in f", G.TYPE, "x", None, None, None),
    ("5/0: GLOBAL_STATE changed: grad_mode ", G.GRAD_MODE, "grad_mode", None, None, None),
    ("0/0: GLOBAL_STATE changed: autocast(cpu)_enabled ", G.GLOBAL_STATE, "autocast(cpu)_enabled", None, None, None),
    ("0/0: GLOBAL_STATE changed: default_dtype ", G.GLOBAL_STATE, "default_dtype", None, None, None),
    (
        "0/0: GLOBAL_STATE changed: deterministic_algorithms ",
        G.GLOBAL_STATE,
        "deterministic_algorithms",
        None,
        None,
        None,
    ),
    (
        "5/0: Cache line invalidated because L['___stack0'] got deallocated",
        G.INVALIDATED,
        "___stack0",
        None,
        None,
        None,
    ),
    ("!0/1/0: tensor 'x' size mismatch at index 0. expected 2, actual 3", G.SHAPE, "x", 0, "2", "3"),
    ("0/0: some_new_guard_kind(x)", G.OTHER, "some_new_guard_kind(x)", None, None, None),
    (
        "0/0: obj.mode == SomeEnum.A  # if obj.mode is SomeEnum.A:  # t.py:3 in f",
        G.MODULE_ATTR,
        "obj.mode",
        None,
        "SomeEnum.A",
        None,
    ),
    ("", G.OTHER, "", None, None, None),
]


@pytest.mark.parametrize("reason,kind,name,dim,expected,actual", GUARD_CASES)
def test_classify_every_guard_shape(reason, kind, name, dim, expected, actual):
    g = G.classify(reason)
    assert (g.kind, g.name, g.dim, g.expected, g.actual) == (kind, name, dim, expected, actual), g
    assert "#" not in g.text  # the source comment is not part of the guard
    assert kind in G.DESCRIPTIONS


def test_classify_reads_the_user_stack_trace_and_dynamo_hint():
    reason = (
        "2/0: self.step == 0                                           # ramp = (self.step + 1) / WARMUP  # tests/"
        "workloads/findings/guard_recompiles.py:41 in forward (HINT: torch.compile considers integer attributes of "
        "the nn.Module to be static. If you are observing recompilation, you might want to make this integer dynamic "
        "using torch._dynamo.config.allow_unspec_int_on_nn_module = True, or convert this integer into a tensor.)"
        + _ut(W, 41, "forward", "ramp = (self.step + 1) / WARMUP")
    )
    g = G.classify(reason)
    assert (g.file, g.line, g.code) == (W, 41, "ramp = (self.step + 1) / WARMUP")
    assert g.hint and g.hint.startswith("torch.compile considers integer attributes")
    assert g.hint.endswith("into a tensor.")
    assert g.text == "self.step == 0"


def test_classify_source_comment_without_a_stack_trace():
    g = G.classify("3/1: t == 1.0      # cs2 = torch.compile(lambda l, t: l / t)  # BREAK:x  # mp/t.py:18 in <lambda>")
    assert g.code == "cs2 = torch.compile(lambda l, t: l / t)" and g.file is None and g.hint is None
    # a location without a hint: no parenthesised text is taken for one
    g = G.classify("0/0: k == 2   # return f(x, (k + 1))  # t.py:3 in f")
    assert g.hint is None and g.code == "return f(x, (k + 1))"


def test_classify_uses_the_first_reason_line_only():
    reason = (
        "0/1: tensor 'x' dtype mismatch. expected Double, actual BFloat16\n0/0: tensor 'x' dtype mismatch. "
        "expected Float, actual BFloat16"
    )
    assert G.classify(reason).expected == "Double"


def test_clean_name():
    assert G.clean_name("L['self']._modules['fc']._parameters['weight']") == "self.fc.weight"
    assert G.clean_name("G['cfg'].lr") == "cfg.lr"
    assert G.clean_name("L['self']._buffers['step']") == "self.step"
    assert G.clean_name("___stack0") == "___stack0"


# ------------------------------------------------------------ event builder


class Run:
    """Builds a session from events shaped like ctmon's recordings."""

    def __init__(self, t0: float = T0) -> None:
        self.t = t0
        self.events: list[dict] = [{"kind": "session", "t": t0, "v": 1, "id": "x", "command": ["python", F]}]
        self._next_frame = 0
        self._n: dict[int, int] = {}
        self._exit: dict = {"code": 0}

    def exits(self, code: int | None = 1, signal: str | None = None) -> Run:
        self._exit = {"code": code, "signal": signal}
        return self

    def stderr(self, text: str) -> Run:
        self.events.append({"kind": "output", "t": self.t, "stream": "stderr", "data": text})
        return self

    def at(self, t: float) -> Run:
        self.t = t
        return self

    def torch(
        self, cache_dir: str = "/tmp/torchinductor_root", entries: dict | None = None, env: dict | None = None
    ) -> Run:
        self.events.append(
            {
                "kind": "torch",
                "t": self.t,
                "torch": "2.13.0",
                "cache_dir": cache_dir,
                "cache_entries": entries or {"fx_graph": 0, "aot_autograd": 0},
                "env": env or {},
            }
        )
        return self

    def compile(
        self,
        fid: int,
        name: str = "f",
        *,
        line: int = 3,
        file: str = F,
        reason: str | None = None,
        dur: float = 0.1,
        limit: int = 8,
        fail: str | None = None,
        co_name: bool = True,
        **kw,
    ) -> Run:
        k = self._n.get(fid, 0)
        self._n[fid] = k + 1
        cid = f"{fid}/{k}"
        if fail is None:
            self.events.append(
                {
                    "kind": "compile_start",
                    "t": self.t,
                    "compile_id": cid,
                    "frame_id": fid,
                    "name": name,
                    "file": file,
                    "line": line,
                    "user_code": True,
                    "user": {"file": file, "line": line, "name": name},
                    "recompile_limit": limit,
                }
            )
        ev = {
            "kind": "compile",
            "t": self.t + dur,
            "compile_id": cid,
            "frame_id": fid,
            "start_time": self.t,
            "entire_frame_compile_time_s": dur,
            "cache_size": k,
            "recompile_limit": limit,
            "has_guarded_code": fail is None,
        }
        if co_name:
            ev.update(co_name=name, co_filename=file, co_firstlineno=line)
        if reason:
            ev["recompile_reason"] = reason
        if fail:
            ev.update(fail_type="RecompileLimitExceeded", fail_reason=fail)
        ev.update(kw)
        self.events.append(ev)
        self.t += dur
        return self

    def steps(self, n: int, ms: float = 10.0, src: str = "optimizer", slow: dict | None = None) -> Run:
        """n boundaries, ``ms`` apart (``slow``: {index: ms} for chosen intervals), from the current time."""
        i0 = sum(len(e["ns"]) for e in self.events if e["kind"] == "steps")
        ns = []
        for k in range(n):
            gap = (slow or {}).get(i0 + k, ms)
            ns.append(0 if i0 + k == 0 else int(gap * 1e6))
        first = self.t if i0 == 0 else self.t + ns[0] / 1e9
        self.events.append({"kind": "steps", "t": first, "src": src, "i0": i0, "ns": ns})
        self.t = first + sum(ns[1:]) / 1e9
        return self

    def graph_break(
        self,
        fid: int,
        line: int,
        summary: str,
        *,
        explanation: str = "",
        hints: list | None = None,
        code: str = "",
        file: str = F,
        reason: str | None = None,
    ) -> Run:
        self.events.append(
            {
                "kind": "graph_break",
                "t": self.t,
                "compile_id": f"{fid}/0",
                "frame_id": fid,
                "file": file,
                "line": line,
                "summary": summary,
                "reason": reason or f"{summary}\n  Explanation: {explanation}",
                "explanation": explanation or None,
                "hints": hints or [],
                "user_stack": [{"file": file, "line": line, "name": "forward", "code": code}],
                "url": "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0001.html",
            }
        )
        return self

    def cache(self, cache: str, result: str, **kw) -> Run:
        self.events.append(
            {"kind": "cache", "t": self.t, "compile_id": "0/0", "frame_id": 0, "cache": cache, "result": result, **kw}
        )
        return self

    def sample(self, util: float | None, proc_mem: int | None = 1 << 30, t: float | None = None) -> Run:
        gpu = {"index": 0, "name": "GPU", "util": util, "proc_mem": proc_mem}
        self.events.append({"kind": "sample", "t": self.t if t is None else t, "gpus": [gpu]})
        return self

    def add(self, ev: dict) -> Run:
        self.events.append({"t": self.t, **ev})
        return self

    def session(self) -> Session:
        s = Session()
        for ev in self.events:
            s.apply(ev)
        s.apply({"kind": "exit", "t": self.t + 0.5, **self._exit})
        assert s.bad_events == 0
        return s

    def findings(self) -> list[Finding]:
        return analyze(self.session(), strict=True)  # a rule that raises fails the test


def by_id(findings: list[Finding]) -> dict[str, Finding]:
    return {f.id: f for f in findings}


def only(findings: list[Finding], rule: str) -> Finding:
    got = [f for f in findings if f.rule == rule]
    assert len(got) == 1, [(f.id, f.title) for f in findings]
    return got[0]


def assert_clean(findings: list[Finding]) -> None:
    bad = [(f.severity, f.id, f.title) for f in findings if f.severity in ("warning", "critical")]
    assert not bad, bad


def size_reason(k: int, name: str = "x", dim: int = 0, a: int = 8, b: int = 12) -> str:
    return f"0/{k}: tensor '{name}' size mismatch at index {dim}. expected {a}, actual {b}"


# -------------------------------------------------------- recompile limit


LIMIT_REASON = (
    "Dynamo recompile limit exceeded\n  Explanation: Dynamo attempted to recompile the code object too "
    "many times, exceeding the recompile_limit cache size limit (currently set to 4)."
)


def storm(n: int, limit: int = 4, refused: bool = True) -> Run:
    r = Run().steps(1)
    r.compile(0, "encode", line=21)
    sizes = [16 + 8 * i for i in range(n + 1)]
    for k in range(n):
        r.compile(0, "encode", line=21, limit=limit, reason=size_reason(k, "tokens", 1, sizes[k], sizes[k + 1]))
    if refused:
        # PyTorch's record of the refused compile has no code name and no start event
        r.compile(
            0,
            "encode",
            reason=size_reason(n, "tokens", 1, sizes[n], sizes[n] + 8),
            limit=limit,
            fail=LIMIT_REASON,
            co_name=False,
        )
    return r.steps(3)


def test_recompile_limit_is_critical_and_attributed_by_frame_id():
    fs = storm(3).findings()
    lim = by_id(fs)["recompile-limit:0"]
    assert lim.severity == "critical" and lim.rule == "recompile-limit"
    assert lim.title == "encode hit the recompile limit (4) and now runs eager"
    assert (lim.file, lim.line) == (F, 21)
    assert "4× dim 1 of tensor 'tokens' changed (16 → 24 → 32 → 40 → 48)" in lim.evidence[0]
    assert lim.evidence[-1] == "refused compile(s): 0/4"
    assert "torch._dynamo.mark_dynamic(tokens, 1)" in lim.fix and "recompile_limit only postpones" in lim.fix
    assert fs[0] is lim  # critical first
    shape = by_id(fs)["shape-recompiles:0:tokens:1"]
    assert shape.severity == "warning" and "hit its recompile limit (4)" in shape.detail
    assert "recompile-budget:0" not in by_id(fs)


def test_no_limit_finding_below_the_limit():
    fs = storm(2, refused=False).findings()
    assert not [f for f in fs if f.rule == "recompile-limit"]
    assert by_id(fs)["shape-recompiles:0:tokens:1"].severity == "warning"


def test_budget_warning_only_for_mixed_single_causes():
    r = Run().steps(1).compile(0, "step_fn", limit=4)
    r.compile(0, "step_fn", limit=4, reason="0/0: tensor 'x' dtype mismatch. expected Float, actual Double")
    r.compile(0, "step_fn", limit=4, reason="0/1: GLOBAL_STATE changed: grad_mode ")
    fs = r.steps(3).findings()
    budget = by_id(fs)["recompile-budget:0"]
    assert budget.severity == "warning" and budget.title == "step_fn has used 3 of its 4 recompiles"
    assert "recompile_limit above 5" in budget.fix
    # the single causes themselves are info
    assert {f.severity for f in fs if f.rule == "guard-recompiles"} == {"info"}


def test_budget_is_folded_into_a_repeated_cause():
    r = Run().steps(1).compile(0, "step_fn", limit=4)
    for k in range(2):
        r.compile(0, "step_fn", limit=4, reason=f"0/{k}: k == {k}  # return x * k  # t.py:4 in step_fn")
    fs = r.steps(3).findings()
    assert "recompile-budget:0" not in by_id(fs)
    scalar = by_id(fs)["scalar-recompiles:0:k"]
    assert "used 3 of its 4 recompiles" in scalar.detail


# ----------------------------------------------------------------- shapes


def test_single_shape_recompile_is_info():
    r = Run().steps(1).compile(0).compile(0, reason=size_reason(0))
    f = by_id(r.steps(2).findings())["shape-recompiles:0:x:0"]
    assert f.severity == "info" and "usually makes the dim dynamic" in f.detail


def test_sizes_compiled_only_in_a_warm_up_are_info():
    # bucketed inputs compiled one by one before the first step: the practice, not a storm
    r = Run().compile(0, "forward")
    for k, (a, b) in enumerate([(1, 2), (2, 4), (4, 8)]):
        r.compile(0, "forward", reason=f"0/{k}: tensor 'idx' size mismatch at index 0. expected {a}, actual {b}")
    f = by_id(r.steps(5).findings())["shape-recompiles:0:idx:0"]
    assert f.severity == "info" and "compiled 4 sizes" in f.title and "in its warm-up" in f.title
    assert "(sizes 1, 2, 4, 8)" in f.title and "torch._dynamo.mark_dynamic(idx, 0)" in f.fix
    # a new size once the steps run is a recompile in the loop again
    r.compile(0, "forward", reason="0/3: tensor 'idx' size mismatch at index 0. expected 8, actual 16")
    f = by_id(r.steps(2).findings())["shape-recompiles:0:idx:0"]
    assert f.severity == "warning" and "recompiled 4×" in f.title


def test_shape_fix_for_a_positional_argument_of_a_module():
    r = Run().steps(1).compile(0, "Sequential")
    r.compile(0, "Sequential", reason="0/0: tensor 'args[0]' size mismatch at index 0. expected 32, actual 20")
    r.compile(0, "Sequential", reason="0/1: tensor 'args[0]' size mismatch at index 0. expected 20, actual 24")
    f = by_id(r.steps(2).findings())["shape-recompiles:0:args[0]:0"]
    assert f.title == "Sequential recompiled 2× because dim 0 of tensor 'args[0]' changed (sizes 32, 20, 24)"
    assert "the tensor passed as `args[0]`" in f.fix and "torch._dynamo.mark_dynamic(x, 0) (`x` stands for it" in f.fix


def test_shape_outside_a_marked_range():
    reason = "0/0: 2 <= t.size()[0] <= 16  # y = t * 2  # t.py:50 in f (user code shown is first use of this value)"
    r = Run().steps(1).compile(0).compile(0, reason=reason)
    f = by_id(r.steps(2).findings())["shape-recompiles:0:t:0"]
    assert "2 <= size <= 16" in f.detail and "min=..., max=..." in f.fix


# ---------------------------------------------------------------- scalars


def test_python_scalar_every_call():
    r = Run().steps(1).compile(2, "sample", line=32)
    for k, v in enumerate(["1.0", "0.9", "0.8"]):
        r.compile(
            2,
            "sample",
            line=32,
            reason=f"2/{k}: temperature == {v}   # return logits / temperature  # t.py:33 in sample"
            + _ut(F, 33, "sample", "return logits / temperature"),
        )
    f = by_id(r.steps(3).findings())["scalar-recompiles:2:temperature"]
    assert f.severity == "warning" and f.title == "sample recompiled 3× on the Python number 'temperature'"
    assert (f.file, f.line) == (F, 33)
    assert "torch.tensor(temperature)" in f.fix and "values seen: 1.0, 0.9, 0.8" in f.evidence


def item_run(n: int) -> Run:
    r = Run().steps(1).compile(0, "normalize", line=24)
    r.graph_break(
        0,
        28,
        "Unsupported Tensor.item() call with capture_scalar_outputs=False",
        explanation="Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False.",
        code="scale = total.item()  # the batch norm",
    )
    resume = "torch_dynamo_resume_in_normalize_at_28"
    r.compile(1, resume, line=28)
    for k in range(n):
        r.compile(
            1,
            resume,
            line=28,
            reason=f"1/{k}: ___stack0 == {100 + k}.5   # return x / scale  # t.py:29 in "
            f"{resume}" + _ut(F, 29, resume, "return x / scale"),
        )
    return r.steps(3)


def test_item_value_after_a_graph_break_points_at_the_item_call():
    fs = item_run(3).findings()
    f = by_id(fs)["scalar-recompiles:1:___stack0"]
    assert f.severity == "warning"
    assert f.title == (
        "normalize (resumed at line 28) recompiles for every new value of the number produced at "
        "line 28 (`scale = total.item()`)"
    )
    assert (f.file, f.line) == (F, 28)  # where the number is produced, not where it is used
    assert "`return x / scale` (line 29)" in f.detail and "keep the value a tensor" in f.fix.lower()
    assert "capture_scalar_outputs" in f.fix


def test_item_value_absorbed_after_one_recompile_is_info():
    f = by_id(item_run(1).findings())["scalar-recompiles:1:___stack0"]
    assert f.severity == "info" and "recompiled once on the number produced at line 28" in f.title


def test_item_value_without_a_recorded_break():
    r = Run().steps(1).compile(3, "torch_dynamo_resume_in_f_at_9", line=9)
    for k in range(2):
        r.compile(
            3, "torch_dynamo_resume_in_f_at_9", line=9, reason=f"3/{k}: ___stack0 == {k}.5  # y = x + v  # t.py:10 in f"
        )
    f = by_id(r.steps(2).findings())["scalar-recompiles:3:___stack0"]
    assert f.line == 9 and "line 9" in f.title


def test_number_from_an_untraceable_call_after_a_break():
    r = Run().steps(1).compile(4, "forward", line=36)
    r.graph_break(4, 54, TIME[0], explanation=TIME[1], hints=TIME[2], code="self.t = time.time()  # BREAK:call")
    resume = "torch_dynamo_resume_in_forward_at_54"
    r.compile(5, resume, line=54)
    for k in range(2):
        r.compile(
            5,
            resume,
            line=54,
            reason=f"5/{k}: ___stack0 == 17953.{k}  # self.t = time.time()  # t.py:54 in "
            f"{resume}" + _ut(F, 54, resume, "self.t = time.time()  # BREAK:call"),
        )
    f = by_id(r.steps(3).findings())["scalar-recompiles:5:___stack0"]
    assert f.title.endswith("the number produced at line 54 (`self.t = time.time()`)")
    assert "the rest of line 54 runs in the next graph" in f.detail
    assert f.fix.startswith("The number comes from time.time(), which Dynamo cannot trace: call it outside")


# ---------------------------------------------------------- other guards


OTHER_CASES = [
    # (reasons, kind, name, severity, words in the fix)
    (
        [
            "0/0: tensor 'x' dtype mismatch. expected Float, actual Double",
            "0/1: tensor 'x' dtype mismatch. expected Double, actual BFloat16",
        ],
        G.DTYPE,
        "x",
        "warning",
        ["x.to(torch.float32)"],
    ),
    (
        [
            "0/0: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, AutogradCPU), actual "
            "DispatchKeySet(CUDA, AutogradCUDA)"
        ],
        G.DEVICE,
        "x",
        "info",
        ["another device", "torch.compiler_troubleshooting.html"],
    ),
    (
        [
            "0/0: tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, AutogradCPU), actual "
            "DispatchKeySet(CPU)"
        ],
        G.DISPATCH,
        "x",
        "info",
        ["inference_mode"],
    ),
    (
        ["4/0: tensor 'h' requires_grad mismatch. expected requires_grad=0"],
        G.REQUIRES_GRAD,
        "h",
        "info",
        ["h.detach()"],
    ),
    (["0/0: tensor 'x' stride mismatch at index 0. expected 8, actual 1"], G.STRIDE, "x", "info", ["x.contiguous()"]),
    (["0/0: tensor 'x' rank mismatch. expected 2, actual 3"], G.RANK, "x", "info", ["number of dimensions"]),
    (["5/0: GLOBAL_STATE changed: grad_mode "], G.GRAD_MODE, "grad_mode", "info", ["torch.no_grad()", "uncompiled"]),
    (
        ["0/0: GLOBAL_STATE changed: autocast(cpu)_enabled "],
        G.GLOBAL_STATE,
        "autocast(cpu)_enabled",
        "info",
        ["torch.autocast"],
    ),
    (
        ["0/1: self._modules['drop'].training == True   # return F.dropout(x)  # nn/modules/dropout.py:73 in forward"],
        G.TRAINING,
        "self.drop.training",
        "info",
        ["both graphs stay cached", "uncompiled module", "_orig_mod"],
    ),
    (
        [
            f"2/{k}: self.step == {k}   # ramp = (self.step + 1) / WARMUP  # t.py:41 in forward (HINT: torch.compile "
            "considers integer attributes of the nn.Module to be static.)"
            for k in range(3)
        ],
        G.MODULE_ATTR,
        "self.step",
        "warning",
        [
            "self.register_buffer('step', torch.zeros((), dtype=torch.long))",
            "self.step.fill_(value)",
            "allow_unspec_int_on_nn_module",
        ],
    ),
    (
        [f"1/{k}: G['NOISE_STEP'] == {k}   # return x + 0.01 * step  # t.py:62 in jitter" for k in range(4)],
        G.GLOBAL,
        "NOISE_STEP",
        "warning",
        ["argument", "torch.tensor(NOISE_STEP)"],
    ),
    (
        ["0/0: len(xs) == 2  # return sum(xs)  # t.py:17 in f", "0/1: len(xs) == 3  # return sum(xs)  # t.py:17 in f"],
        G.LENGTH,
        "xs",
        "warning",
        ["torch.stack"],
    ),
    (["0/0: cfg['a'] == 1  # x * cfg['a']  # t.py:18 in f"], G.CONTAINER, "cfg['a']", "info", ["tensors"]),
    (["0/0: b == True  # x + 1 if b else x  # t.py:19 in f"], G.FLAG, "b", "info", ["branch"]),
    (
        ["0/0: ___check_obj_id(f.__code__, 1402870), type=<class 'code'>  # return f(x)  # t.py:12 in g"] * 2,
        G.IDENTITY,
        "f",
        "warning",
        ["pass one function and give it what differs as an argument"],
    ),
    (
        ["3/0: expected type of 'x' to be a tensor type, ' but found <class 'torch.nn.parameter.Parameter'>"],
        G.TYPE,
        "x",
        "info",
        ["x.detach()"],
    ),
    (
        ["5/0: Cache line invalidated because L['___stack0'] got deallocated"],
        G.INVALIDATED,
        "___stack0",
        "info",
        ["was freed", "torch.compiler_troubleshooting.html"],
    ),
]


@pytest.mark.parametrize("reasons,kind,name,severity,words", OTHER_CASES)
def test_other_guard_kinds_say_which(reasons, kind, name, severity, words):
    r = Run().steps(1).compile(0, "fn")
    for reason in reasons:
        r.compile(0, "fn", reason=reason)
    fs = r.steps(2).findings()
    f = by_id(fs)[f"guard-recompiles:0:{kind}:{name}"]
    assert f.rule == "guard-recompiles" and f.severity == severity
    assert f.title == f"fn recompiled {len(reasons)}× because {G.DESCRIPTIONS[kind]}: {name}"
    assert f"Guard kind: {kind}." in f.detail
    for w in words:
        assert w in f.fix, (w, f.fix)


def test_dtype_fix_lists_every_dtype_seen():
    r = Run().steps(1).compile(0, "featurize")
    r.compile(0, "featurize", reason="0/0: tensor 'x' dtype mismatch. expected Float, actual Double")
    r.compile(0, "featurize", reason="0/0: tensor 'x' dtype mismatch. expected Float, actual BFloat16")
    f = only(r.steps(2).findings(), "guard-recompiles")
    assert "(it arrived as Float, Double and BFloat16)" in f.fix and "Values seen: Float, Double, BFloat16." in f.detail


def test_dynamo_hint_is_passed_on():
    reason = (
        "2/0: self.step == 0   # ramp = self.step  # t.py:41 in forward (HINT: torch.compile considers integer "
        "attributes of the nn.Module to be static. Use allow_unspec_int_on_nn_module.)"
    )
    r = Run().steps(1).compile(0, "forward").compile(0, "forward", reason=reason)
    f = only(r.steps(2).findings(), "guard-recompiles")
    assert "Dynamo's hint: torch.compile considers integer attributes" in f.detail


def test_compile_failure():
    r = (
        Run()
        .steps(1)
        .compile(0, "f")
        .add(
            {
                "kind": "compile",
                "compile_id": "0/1",
                "frame_id": 0,
                "fail_type": "Unsupported",
                "fail_reason": "call to foo\nmore",
            }
        )
    )
    f = only(r.steps(2).findings(), "compile-failures")
    assert f.severity == "warning" and "(Unsupported)" in f.title and f.evidence == ["0/1: call to foo"]


def test_a_failed_wrapper_whose_calls_compiled_is_not_said_to_run_eager():
    """A library's hook wrapper Dynamo gives up on, while the forward it calls
    compiles as a frame of its own: the model's work is compiled."""
    failed = {"fail_type": "Unsupported", "fail_reason": "call to a hook\nmore", "has_guarded_code": False}
    r = Run().compile(0, "wrapper", **failed).compile(1, "forward", graph_op_count=12).steps(3)
    f = only(r.findings(), "compile-failures")
    assert f.severity == "info"
    assert f.title == "Compiling wrapper failed (Unsupported); the code it calls still compiled (forward)"
    # nothing compiled inside it before the next step: it does run eager
    r2 = Run().compile(0, "wrapper", **failed).steps(2).compile(1, "forward", graph_op_count=12).steps(2)
    f2 = only(r2.findings(), "compile-failures")
    assert f2.severity == "warning" and f2.title.endswith("; it runs eager")


# ------------------------------------------------------------ graph breaks


PRINT = (
    "Failed to trace builtin operator: print",
    "Dynamo does not know how to trace builtin operator `print` with argument types ['str', 'Tensor']",
    [
        "If you are attempting to call a logging function (e.g. `print`), you can try adding it to "
        "`torch._dynamo.config.reorderable_logging_functions`."
    ],
)
ITEM = (
    "Unsupported Tensor.item() call with capture_scalar_outputs=False",
    "Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False.",
    [],
)
BRANCH = (
    "Data-dependent branching",
    "Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`). Dynamo does not support tracing "
    "dynamic control flow.",
    ["Use `torch.cond` to express dynamic control flow."],
)
NUMPY = (
    "attempted to trace numpy function unsupported by PyTorch",
    "Can't find numpy numpy function <function digitize at 0x7fb3885442c0> in torch._numpy.",
    [],
)
TIME = (
    "Attempted to call function marked as skipped: time.time.",
    "Dynamo does not know how to trace the builtin `time.time.` This function is either a Python builtin (e.g. "
    "_warnings.warn) or a third-party C/C++ Python extension (perhaps created with pybind).",
    [
        "If it is a third-party C/C++ Python extension, please either wrap it into a PyTorch-understood custom "
        "operator or, if it is traceable, use `torch.compiler.allow_in_graph`."
    ],
)

BREAK_CASES = [
    (*PRINT, "logging"),
    (
        "logging.Logger method not supported for non-export cases",
        "logging.Logger methods are not supported for non-export cases.",
        ["Add the logging method to `torch._dynamo.config.ignore_logging_functions`."],
        "logging",
    ),
    (
        "Attempted to call function marked as skipped: _warnings.warn",
        "Dynamo does not know how to trace the Python builtin `_warnings.warn`.",
        [
            "If you are attempting to call a logging function (e.g. `_warnings.warn`), you can try adding it to "
            "`torch._dynamo.config.reorderable_logging_functions`."
        ],
        "logging",
    ),
    ("attempted to reorder a debugging function that can't actually be reordered: print", "", [], "logging"),
    (*ITEM, "scalar-output"),
    (
        "Tensor.tolist() with non-integer tensor",
        "Dynamo currently does not support tracing `tolist()` on non-integer tensors.",
        [],
        "scalar-output",
    ),
    (
        "Data dependent operator",
        "Operator `aten._local_scalar_dense.default` has a non-Tensor output whose value "
        "is dependent on the data of Tensor inputs.",
        [],
        "scalar-output",
    ),
    (*BRANCH, "data-dependent-branch"),
    ("Data-dependent branching: if my_tensor.sum() > 0:", BRANCH[1], BRANCH[2], "data-dependent-branch"),
    (
        "Dynamic shape operator: aten.nonzero.default",
        "Operator `aten.nonzero.default`'s output shape depends on input Tensor data.",
        [
            "Enable tracing of dynamic shape operators with `torch._dynamo.config.capture_dynamic_output_shape_ops = "
            "True`"
        ],
        "dynamic-shape-op",
    ),
    (*NUMPY, "numpy"),
    (*TIME, "unsupported-call"),
    (
        "Attempted to call function marked as skipped: zlib.crc32.",
        "Dynamo does not know how to trace the builtin `zlib.crc32.`",
        [],
        "unsupported-call",
    ),
    (
        "Call to `torch._dynamo.graph_break()`",
        "User-inserted graph break. Message: None",
        ["Remove the `torch._dynamo.graph_break()` call."],
        "explicit",
    ),
    ("Something new in torch 2.14", "", [], "other"),
]


@pytest.mark.parametrize("summary,explanation,hints,cat", BREAK_CASES)
def test_graph_break_categories(summary, explanation, hints, cat):
    r = Run().steps(1).compile(0, "forward").graph_break(0, 38, summary, explanation=explanation, hints=hints)
    s = r.steps(3).session()
    (site,) = s.compile.breaks.values()
    assert category(site) == cat
    (f,) = [f for f in analyze(s, strict=True) if f.rule == "graph-breaks"]
    assert f.id == f"graph-breaks:{cat}" and f.severity == "warning" and (f.file, f.line) == (F, 38)


def zoo() -> Run:
    """The graph-break workload's shape: five causes in the loop, one .tolist() after it."""
    r = Run().steps(1).compile(0, "forward", line=36)
    for line, (summary, expl, hints), code in (
        (38, PRINT, 'print("activation mean", h.mean())'),
        (42, ITEM, "peak = h.abs().max().item()"),
        (46, BRANCH, "elif h.mean() > 0:"),
        (51, NUMPY, "bins = np.digitize(x, EDGES)"),
        (54, TIME, "self.last_forward_t = time.time()"),
    ):
        r.graph_break(0, line, summary, explanation=expl, hints=hints, code=code)
    r.steps(5)
    r.at(r.t + 0.2).compile(6, "summarize", line=58)
    r.graph_break(6, 62, "Tensor.tolist() with non-integer tensor", code="return probs.tolist()")
    return r


def test_breaks_in_the_loop_rank_above_one_offs():
    fs = zoo().findings()
    breaks = [f for f in fs if f.rule == "graph-breaks"]
    looped = [f for f in breaks if f.severity == "warning"]
    assert {f.id for f in looped} == {
        "graph-breaks:logging",
        "graph-breaks:scalar-output",
        "graph-breaks:data-dependent-branch",
        "graph-breaks:numpy",
        "graph-breaks:unsupported-call",
    }
    once = by_id(fs)["graph-breaks:scalar-output:outside-loop"]
    assert once.severity == "info" and (once.file, once.line) == (F, 62)
    assert "outside the step loop" in once.title and "costs once" in once.detail
    assert max(fs.index(f) for f in looped) < fs.index(once)
    # the in-loop .item() site is not merged with the one-off .tolist()
    assert by_id(fs)["graph-breaks:scalar-output"].line == 42
    assert "in the step loop" in by_id(fs)["graph-breaks:scalar-output"].title


def test_graph_break_fixes_name_the_call():
    fs = by_id(zoo().findings())
    assert "reorderable_logging_functions" in fs["graph-breaks:logging"].fix
    assert "capture_scalar_outputs" in fs["graph-breaks:scalar-output"].fix
    assert "torch.where" in fs["graph-breaks:data-dependent-branch"].fix
    assert "torch.cond" in fs["graph-breaks:data-dependent-branch"].fix
    # PyTorch's own explanation and hints first, then ctmon's advice naming the call
    numpy = fs["graph-breaks:numpy"].fix
    assert numpy.startswith("PyTorch: Can't find numpy numpy function <function digitize")
    assert "ctmon: For np.digitize use torch.bucketize(x, boundaries, right=True)." in numpy
    call = fs["graph-breaks:unsupported-call"].fix
    assert call.startswith("PyTorch: Dynamo does not know how to trace the builtin `time.time.`")
    assert "ctmon: `time.time()` only has side effects" in call and "outside the compiled function" in call
    assert "custom_op" in call and "allow_in_graph" in call
    ev = fs["graph-breaks:numpy"].evidence[0]
    assert ev.startswith(f"{F}:51 ×1 (in the step loop): attempted to trace numpy") and "`bins = np.digitize" in ev


def test_logger_break_fix():
    r = Run().steps(1).compile(0).graph_break(0, 4, "logging.Logger method not supported for non-export cases")
    f = only(r.steps(3).findings(), "graph-breaks")
    assert f.fix.startswith("This is a logging.Logger call: torch._dynamo.config.ignore_logging_functions")


def test_graph_breaks_without_steps_are_info():
    r = Run().compile(0).graph_break(0, 38, *PRINT[:1])
    assert only(r.findings(), "graph-breaks").severity == "info"


def test_sites_of_one_cause_are_grouped_with_counts():
    r = Run().steps(1).compile(0)
    for line in (10, 10, 10, 20):
        r.graph_break(0, line, *PRINT[:1])
    f = only(r.steps(3).findings(), "graph-breaks")
    assert f.title == "Graph breaks on logging / print in the step loop: 2 sites, 4 breaks"
    assert f.line == 10 and f.evidence[0].startswith(f"{F}:10 ×3")


# ------------------------------------------------------------------- caches


def test_expected_hits_in_a_chosen_cache_dir():
    r = Run().torch("/work/cache", {"fx_graph": 2, "aot_autograd": 1}, {"TORCHINDUCTOR_CACHE_DIR": "/work/cache"})
    r.steps(1).compile(0, "forward", inductor_compile_time_s=0.5, inductor_fx_local_cache_miss_count=1)
    r.cache("aot_autograd", "miss").cache("fx_graph", "miss").cache("fx_graph", "miss")
    f = by_id(r.steps(3).findings())["cache:expected-hits"]
    assert f.severity == "info" and (f.file, f.line) == (F, 3)  # a chosen directory is often a shared one
    # the entries are the directory's: the finding does not claim they were this job's
    assert f.title == "FX graph cache missed 2×: none of the 2 entries already in /work/cache matched this run's graphs"
    assert "other models'" in f.detail and "a TORCHINDUCTOR_CACHE_DIR of its own" in f.fix
    assert "TORCHINDUCTOR_CACHE_DIR" in f.fix and "save_cache_artifacts" in f.fix


def test_expected_hits_in_the_shared_default_dir_is_info():
    r = Run().torch("/tmp/torchinductor_root", {"fx_graph": 5})
    r.steps(1).compile(0, inductor_compile_time_s=0.5).cache("fx_graph", "miss")
    assert by_id(r.steps(3).findings())["cache:expected-hits"].severity == "info"


def test_hits_or_an_empty_dir_give_no_miss_finding():
    r = Run().torch("/work/cache", {"fx_graph": 2}, {"TORCHINDUCTOR_CACHE_DIR": "/work/cache"})
    r.steps(1).compile(0, inductor_compile_time_s=0.5).cache("fx_graph", "hit").cache("fx_graph", "hit")
    assert_clean(r.steps(3).findings())
    r = Run().torch("/work/cache", {"fx_graph": 0}, {"TORCHINDUCTOR_CACHE_DIR": "/work/cache"})
    r.steps(1).compile(0, inductor_compile_time_s=0.5).cache("fx_graph", "miss")
    fs = r.steps(3).findings()
    assert_clean(fs) and "cache:cold-tmp" not in by_id(fs)


def test_cold_start_in_tmp_is_a_note():
    r = Run().torch("/tmp/torchinductor_root").steps(1).compile(0, inductor_compile_time_s=0.5)
    f = by_id(r.cache("fx_graph", "miss").steps(3).findings())["cache:cold-tmp"]
    assert f.severity == "info" and "TORCHINDUCTOR_CACHE_DIR" in f.fix


AOT_BYPASS = (
    "Unsupported call_function target <function project at 0x7f4564dfc220>. \n Function module: "
    "__main__, \nFunction name: project"
)


def test_bypass_reason_is_surfaced_with_a_stable_id():
    ids = set()
    for addr in ("0x7f4564dfc220", "0x7f00deadbeef"):
        r = Run().torch().steps(1).compile(0, "forward", inductor_compile_time_s=0.5)
        r.cache("aot_autograd", "bypass", reason=AOT_BYPASS.replace("0x7f4564dfc220", addr))
        f = only(r.steps(3).findings(), "caches")
        ids.add(f.id)
        assert f.severity == "warning"
        assert f.title == "AOTAutograd cache bypassed 1×: Unsupported call_function target <function project>"
        assert "`project` (from __main__)" in f.fix and "remove allow_in_graph" in f.fix
        assert "0x" not in f.title + f.id + " ".join(f.evidence)
    assert ids == {"cache:bypass:aot_autograd:Unsupported call_function target <function project>"}


@pytest.mark.parametrize(
    "reason,word",
    [
        ("Cannot cache a graph with freezing enabled", "freezing"),
        ("Can't cache HigherOrderOperator: flex_attention", "higher-order op"),
        ("Cannot produce stable cache key for unpicklable type Foo", "pickled"),
        ("FX graph cache is not enabled", "Enable the caches"),
        ("Can't cache torchbind objects", "TorchScript"),
    ],
)
def test_bypass_fixes(reason, word):
    r = Run().torch().steps(1).compile(0, inductor_compile_time_s=0.5).cache("fx_graph", "bypass", reason=reason)
    assert word in only(r.steps(3).findings(), "caches").fix


def test_disabled_caches_only_matter_when_inductor_compiled():
    env = {"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    r = Run().torch(env=env).steps(1).compile(0, "forward", inductor_compile_time_s=0.2)
    f = by_id(r.steps(3).findings())["cache:disabled"]
    assert f.severity == "warning" and "Unset TORCHINDUCTOR_FORCE_DISABLE_CACHES" in f.fix and f.line == 3
    # backend="eager"/"aot_eager": Inductor never ran, its caches are irrelevant
    r = Run().torch(env=env).steps(1).compile(0, "forward", backend_compile_time_s=0.2)
    assert_clean(r.steps(3).findings())
    r = Run().torch(env={"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "0"}).steps(1).compile(0, inductor_compile_time_s=1)
    assert "cache:disabled" not in by_id(r.steps(3).findings())


def test_guard_misses():
    r = Run().torch().steps(1).compile(0, inductor_compile_time_s=0.2)
    r.cache("fx_graph", "miss", detail="guard_miss").cache("fx_graph", "miss", detail="guard_miss")
    f = by_id(r.steps(3).findings())["cache:guard-miss:fx_graph"]
    assert "missed 2×" in f.title and "mark_dynamic" in f.fix


# --------------------------------------------------------------- perf rules


def late_run(late_at: int | None = 45, steps: int = 60) -> Run:
    r = Run().compile(0, "Sequential", line=28, dur=1.0).steps(1, 1.0)
    for i in range(1, steps):
        if i == late_at:
            r.at(r.t + 0.001).compile(
                0,
                "Sequential",
                line=28,
                dur=0.29,
                reason="0/0: tensor 'args[0]' size mismatch at index 0. expected 32, actual 20",
            )
            r.steps(1, 292.0)
        else:
            r.steps(1, 1.0)
    return r


def test_late_compile_and_its_spike():
    fs = by_id(late_run().findings())
    late = fs["late-compiles"]
    assert late.severity == "warning" and late.title == (
        "1 compile in steady state (after step 13 of 60), the first at step 46 (Sequential)"
    )
    assert (late.file, late.line) == (F, 28)
    assert "0/1 Sequential near step 46, 0.29 s: 0/0: tensor 'args[0]' size mismatch" in late.evidence[0]
    assert "Warm up every input shape" in late.fix and "the recompile findings for these compiles" in late.fix
    spike = fs["spikes:compile"]
    assert spike.severity == "warning" and spike.line == 28
    assert spike.evidence[0].startswith("step 46: 29") and "(compile: 0/1 Sequential 0.29 s)" in spike.evidence[0]


def test_warmup_compiles_are_not_late():
    fs = by_id(late_run(late_at=None).findings())
    assert "late-compiles" not in fs and "spikes:compile" not in fs
    # a recompile at step 2 is warm-up: a slow step, but only a note
    fs = by_id(late_run(late_at=2).findings())
    assert "late-compiles" not in fs and fs["spikes:compile"].severity == "info"


def test_short_runs_have_no_steady_state():
    assert "late-compiles" not in by_id(late_run(late_at=15, steps=19).findings())


def test_the_step_that_begins_a_generate_call_is_its_prompt_not_a_stall():
    """Steps counted at compiled decode calls: the step running into each
    generate() call's first decode call spans that call's eager prefill
    (H200: 14-16 ms against 2.2 ms tokens). Said as such, not as a stall."""
    r = Run().compile(0, dur=0.5).steps(1, src="compiled_call")
    slow = {k: 15.0 for k in (23, 46)} | {30: 40.0}  # two calls' first tokens, and one real stall
    r.steps(68, 2.0, src="compiled_call", slow=slow)
    for i0, i1 in ((0, 22), (23, 45), (46, 68)):
        r.events.append(
            {
                "kind": "generation",
                "t": r.t,
                "src": "compiled_call",
                "prefill_calls": 0,
                "decode_calls": i1 - i0 + 1,
                "i0": i0,
                "i1": i1,
            }
        )
    fs = by_id(r.findings())
    prompt = fs["spikes:generate-prompt"]
    assert prompt.severity == "info" and prompt.title.startswith("2 slow step(s) began a generate() call")
    # a compiled call's step is numbered by the call it starts from (the last token of the call before)
    assert sorted(prompt.evidence) == ["step 23: 15.0 ms", "step 46: 15.0 ms"]
    assert fs["spikes:other"].evidence == ["step 30: 40.0 ms"]  # a stall inside a call is still one


def test_spikes_not_explained_by_compiles():
    r = Run().compile(0, dur=0.5).steps(1).steps(30, 10.0, slow={20: 200.0})
    f = by_id(r.findings())["spikes:other"]
    assert f.severity == "info" and f.evidence == [
        "step 21: 200.0 ms"
    ]  # the interval at boundary 20 ends the user's step 21


CPU_SKIP = (
    'skipping cudagraphs due to cpu device (arange). Found from : \n   File "/work/job/model.py", line 57, '
    "in forward\n    pos = torch.arange(x.shape[1])\n"
)
MUTATION_SKIP = (
    'skipping cudagraphs due to mutated inputs (1 instances). Found from : \n   File "/work/job/model.py", '
    "line 80, in forward\n    self.cache.copy_(k)\n"
)


def test_cudagraph_skips_from_the_compile_record():
    # On CPU torch never skips cudagraphs; these events are shaped exactly like
    # PyTorch's compilation_metrics (cudagraph_skip_reason) as ctmon records them.
    r = Run().steps(1).compile(0, "forward", inductor_compile_time_s=0.5, cudagraph_skip_reason=CPU_SKIP)
    r.add(
        {
            "kind": "bwd_compile",
            "compile_id": "0/0",
            "frame_id": 0,
            "duration_us": 1000,
            "cudagraph_skip_reason": CPU_SKIP,
        }
    )
    r.compile(1, "step", inductor_compile_time_s=0.5, cudagraph_skip_reason=MUTATION_SKIP)
    fs = r.steps(3).findings()
    cpu = by_id(fs)["cudagraphs-skipped:cpu device (arange)"]
    assert cpu.severity == "warning" and cpu.title == "CUDA graphs skipped 2×: cpu device (arange)"
    assert (cpu.file, cpu.line) == ("/work/job/model.py", 57)
    assert "device=x.device" in cpu.fix
    mut = by_id(fs)["cudagraphs-skipped:mutated inputs (1 instances)"]
    assert mut.line == 80 and "in place" in mut.fix


@pytest.mark.parametrize(
    "reason,word",
    [
        (
            "skipping cudagraphs due to multiple devices: device(type='cuda', index=0), device(type='cuda', index=1)",
            "one GPU",
        ),
        (
            "skipping cudagraphs due to graph with symbolic shapes inputs and config.triton.cudagraph_skip_dynamic_graphs="
            "True.\n",
            "static",
        ),
        (
            "skipping cudagraphs due to disabling cudagraphs due to incompatible op aten._local_scalar_dense.default",
            ".item()",
        ),
        ("skipping cudagraphs due to ['non-Tensor inputs']", "tensors"),
        ("skipping cudagraphs due to something new", "PyTorch's reason"),
    ],
)
def test_cudagraph_fixes(reason, word):
    r = Run().steps(1).add({"kind": "cudagraph", "reason": reason})
    f = only(r.steps(2).findings(), "cudagraphs")
    assert word in f.fix and "skipping cudagraphs due to" not in f.title


def gpu_run(util: float | list, proc_mem: int | None = 1 << 30, seconds: int = 6, compile_at: float | None = None):
    r = Run().compile(0, "forward", dur=0.5).steps(1)
    start = r.t
    r.steps(200, seconds * 1000 / 200)
    utils = util if isinstance(util, list) else [util] * (seconds + 1)
    for i, u in enumerate(utils):
        r.sample(u, proc_mem, t=start + 0.5 + i)
    if compile_at is not None:
        r.at(start + compile_at).compile(0, "forward", dur=0.6, reason=size_reason(0))
    return r


def test_idle_gpu():
    f = by_id(gpu_run(5).findings())["gpu-idle"]
    assert f.severity == "warning" and f.title == "The GPU was mostly idle while steps ran (utilisation 5% on average)"
    assert "num_workers" in f.fix and "pin_memory=True" in f.fix


def test_busy_gpu_or_no_evidence_gives_no_idle_finding():
    assert "gpu-idle" not in by_id(gpu_run(95).findings())
    assert "gpu-idle" not in by_id(gpu_run(5, proc_mem=0).findings())  # the job never used the GPU
    assert "gpu-idle" not in by_id(gpu_run(5, seconds=2).findings())  # too few samples
    assert "gpu-idle" not in by_id(gpu_run([5, 5, None, None, None, None, None]).findings())


def test_samples_during_a_compile_are_left_out():
    # busy except while a (late) compile stalls the loop
    f = gpu_run([90, 90, 90, 2, 90, 90, 90], compile_at=2.7).findings()
    assert "gpu-idle" not in by_id(f)
    f = by_id(gpu_run([5, 5, 5, 90, 5, 5, 5], compile_at=2.7).findings())["gpu-idle"]
    # the sample right after the first compile, and the one overlapping the late compile
    assert f.evidence[0] == (
        "4 samples during the step loop; utilisation min 5%, max 5% (2 samples during compiles left out)"
    )


def test_idle_gpu_with_few_long_steps():
    r = Run().compile(0, "forward", dur=0.5).steps(1)
    start = r.t
    r.steps(14, 500.0)  # 15 boundaries, half a second apart
    for i in range(7):
        r.sample(3, t=start + 0.75 + i)
    assert by_id(r.findings())["gpu-idle"].severity == "warning"


def test_compile_cost_is_info_with_per_frame_evidence():
    r = Run().steps(1).compile(0, "forward", line=10, dur=2.0).compile(1, "loss_fn", line=30, dur=0.5)
    r.compile(0, "forward", line=10, dur=1.0, reason=size_reason(0))
    f = by_id(r.steps(3).findings())["compile-cost"]
    assert f.severity == "info" and f.title.startswith("Compilation took 3.5 s")
    assert f.evidence[0] == f"forward at {F}:10: 3.00 s in 2 compile(s)"
    assert f.evidence[1] == f"loss_fn at {F}:30: 0.50 s in 1 compile(s)"
    assert "recompiles alone: 1.00 s" in f.evidence


# ------------------------------------------------------------- the engine


def test_clean_run_has_no_warning():
    r = Run().torch().compile(0, "forward", dur=1.2).steps(1).steps(100, 6.0)
    fs = r.findings()
    assert_clean(fs)
    assert [f.id for f in fs] == ["compile-cost"]


def test_order_severity_then_cost():
    r = storm(4).compile(5, "fn")
    for k in range(3):
        r.compile(5, "fn", reason=f"5/{k}: G['STEP'] == {k}  # x + STEP  # t.py:4 in fn")
    r.graph_break(5, 40, *PRINT[:1])
    r.torch("/work/cache", {"fx_graph": 3}, {"TORCHINDUCTOR_CACHE_DIR": "/work/cache"})
    r.compile(6, "g", inductor_compile_time_s=0.3).cache("fx_graph", "miss")
    fs = r.steps(3).findings()
    sev = [SEVERITY_RANK[f.severity] for f in fs]
    assert sev == sorted(sev, reverse=True)
    warnings = [f.rule for f in fs if f.severity == "warning"]
    assert warnings.index("guard-recompiles") < warnings.index("graph-breaks")
    # a miss in a cache dir holding other graphs' entries is told, not warned: after every warning
    assert [f.severity for f in fs if f.rule == "caches"] == ["info"]


def test_ids_are_stable_and_dicts_complete():
    a = [f.as_dict() for f in zoo().findings()]
    b = [f.as_dict() for f in zoo().findings()]
    assert [f["id"] for f in a] == [f["id"] for f in b]
    for f in a:
        assert set(f) == {
            "id",
            "rule",
            "severity",
            "title",
            "file",
            "line",
            "detail",
            "evidence",
            "fix",
            "fixes",
            "called_from",
        }
        assert f["fix"] and f["title"] and f["severity"] in ("info", "warning", "critical")
        assert re.match(r"^[a-z-]+(:|$)", f["id"])


def test_malformed_events_do_not_hide_other_findings():
    r = storm(2)
    r.add({"kind": "compile", "compile_id": "9/0", "frame_id": 9, "recompile_reason": 12})
    r.add({"kind": "graph_break", "compile_id": "9/0", "frame_id": 9, "file": None, "line": "x", "summary": None})
    r.add({"kind": "sample", "gpus": [None, {"util": "high"}]})
    r.add({"kind": "cache", "cache": "fx_graph", "result": "bypass", "reason": None})
    s = Session()
    for ev in r.events:
        s.apply(ev)
    fs = analyze(s)
    assert by_id(fs)["shape-recompiles:0:tokens:1"].severity == "warning"


# ------------------------------------------------------------- the fake NVML


@pytest.fixture
def fake_nvml(monkeypatch):
    """tests/fakes/pynvml.py behind the real sampler (as tests put it first on a ctmon process's PYTHONPATH)."""
    import importlib.util
    import os
    import sys

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakes", "pynvml.py")
    spec = importlib.util.spec_from_file_location("pynvml", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    spec.loader.exec_module(mod)
    for var in [v for v in os.environ if v.startswith("CTMON_FAKE_NVML_")]:
        monkeypatch.delenv(var)
    return monkeypatch


def test_fake_nvml_behind_the_gpu_sampler(fake_nvml):
    import subprocess
    import sys

    from ctmon.samplers.gpu import GpuSampler

    fake_nvml.setenv("CTMON_FAKE_NVML_COUNT", "2")
    fake_nvml.setenv("CTMON_FAKE_NVML_UTIL", "95,5")
    fake_nvml.setenv("CTMON_FAKE_NVML_UNSUPPORTED", "power")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        g = GpuSampler()
        assert g.available and g.error is None and g.names == ["NVIDIA H100 80GB HBM3 (fake)"] * 2
        a, b = g.sample([child.pid])
        assert (a["util"], b["util"]) == (95, 5)
        assert a["proc_mem"] == 1 << 30 and a["mem_total"] == 80 << 30 and a["temp_c"] == 55
        assert a["pid_mem"] == {child.pid: 1 << 30}  # each process of the job: a rank's own memory
        assert a["power_w"] is None and a["power_limit_w"] == 700.0 and a["sm_clock_mhz"] == 1755
        assert g.sample([12345678])[0]["proc_mem"] is None  # GPU processes none of which is ours: unknown
        g.close()
    finally:
        child.kill()
        child.wait()


def test_fake_nvml_without_a_driver_or_gpus(fake_nvml):
    from ctmon.samplers.gpu import GpuSampler

    fake_nvml.setenv("CTMON_FAKE_NVML_FAIL", "init")
    g = GpuSampler()
    assert not g.available and g.error == "no NVIDIA driver (NVML not found)"
    fake_nvml.delenv("CTMON_FAKE_NVML_FAIL")
    fake_nvml.setenv("CTMON_FAKE_NVML_COUNT", "0")
    g = GpuSampler()
    assert not g.available and g.error == "no NVIDIA GPU"


# ------------------------------------------- one finding per cause (issue 12)


def test_a_rule_that_raises_is_seen_in_strict_mode(monkeypatch):
    from ctmon import findings as engine

    def broken(s):
        raise KeyError("boom")

    monkeypatch.setattr(engine, "_RULES", (broken, *engine._RULES))
    s = storm(2).session()
    assert any(f.rule == "shape-recompiles" for f in analyze(s))  # a live view keeps the other findings
    with pytest.raises(KeyError):
        analyze(s, strict=True)


def _reasons(fid: int, k: int, reasons: list[str]) -> dict:
    return {"kind": "recompile_reasons", "compile_id": f"{fid}/{k}", "frame_id": fid, "reasons": reasons}


# generate() with a static cache (torch 2.13 texts): the newest version fails on
# the number of keyword arguments, the others name the prompt length
STATIC_CACHE_REASONS = [
    "0/1: len(kwargs) == 9  # return func(*args, **kwargs)  # transformers/utils/generic.py:940 in wrapper",
    "0/0: tensor 'kwargs['input_ids']' size mismatch at index 1. expected 7, actual 11",
]


def test_the_cause_is_read_from_every_failed_guard():
    assert G.cause(STATIC_CACHE_REASONS).kind == G.SHAPE
    assert G.cause(STATIC_CACHE_REASONS).name == "kwargs['input_ids']"
    # the first failure wins when it already names a concrete change
    assert G.cause([size_reason(1, "x"), "0/0: len(xs) == 2  # f(xs)  # t.py:3 in f"]).kind == G.SHAPE
    assert G.cause(["0/0: len(xs) == 2  # f(xs)  # t.py:3 in f"]).kind == G.LENGTH
    assert [g.kind for g in G.failed(STATIC_CACHE_REASONS + STATIC_CACHE_REASONS[:1])] == [G.LENGTH, G.SHAPE]
    r = Run().steps(1).compile(0, "wrapper").compile(0, "wrapper", line=3)
    r.add(_reasons(0, 2, STATIC_CACHE_REASONS))
    r.compile(0, "wrapper", reason=STATIC_CACHE_REASONS[0])
    f = only(r.steps(3).findings(), "shape-recompiles")
    assert "dim 1 of tensor 'kwargs['input_ids']' changed" in f.title and "sizes 7, 11" in f.title
    assert "also failed: len(kwargs) == 9" in f.evidence[0]
    assert not [x for x in r.findings() if x.rule == "guard-recompiles"]  # no "length of kwargs" finding


def seq_change(frames: list[tuple[str, str]], changes: int = 1, gap: float = 0.01) -> Run:
    """A step loop where each new sequence length recompiles ``frames`` (name, guarded tensor) one after another,
    as a Hugging Face model's wrapper, forward, loss and output do."""
    r = Run().steps(1)
    for fid, (name, _) in enumerate(frames):
        r.compile(fid, name, line=10 * (fid + 1))
    r.steps(3)
    sizes = [16 + 8 * i for i in range(changes + 1)]
    for k in range(changes):
        r.steps(1)
        for fid, (name, tensor) in enumerate(frames):
            r.at(r.t + gap).compile(
                fid,
                name,
                line=10 * (fid + 1),
                dur=0.5,
                reason=f"{fid}/{k}: tensor '{tensor}' size mismatch at index 1. "
                f"expected {sizes[k]}, actual {sizes[k + 1]}",
            )
        r.steps(3)
    return r


GPT2_FRAMES = [
    ("wrapper", "kwargs['input_ids']"),
    ("forward", "input_ids"),
    ("ForCausalLMLoss", "labels"),
    ("__init__", "logits"),
]


def test_one_input_change_recompiling_several_frames_is_one_finding():
    fs = seq_change(GPT2_FRAMES).findings()
    (f,) = [f for f in fs if f.rule in ("shape-recompiles", "scalar-recompiles", "guard-recompiles")]
    assert f.id == "shape-recompiles:0+1+2+3:input_ids:1"
    assert f.severity == "info"  # one change: Dynamo generalises after it
    assert f.title == "One change recompiled 4 frames: dim 1 of tensor 'input_ids' changed (16 → 24)"
    assert "wrapper, forward, ForCausalLMLoss, __init__" in f.detail and "4 recompiles, 2.00 s" in f.detail
    assert [e.split(":")[0] for e in f.evidence[:4]] == ["wrapper", "forward", "ForCausalLMLoss", "__init__"]
    assert "tensor 'labels' size mismatch at index 1" in f.evidence[2]
    assert f.evidence[-1] == "in all: 4 recompiles of 4 frames, 2.00 s"
    assert "torch._dynamo.mark_dynamic(input_ids, 1)" in f.fix
    assert (f.file, f.line) == (F, 10)


def test_a_recurring_cause_across_frames_is_one_warning():
    fs = seq_change(GPT2_FRAMES[:2], changes=3).findings()
    (f,) = [f for f in fs if f.rule == "shape-recompiles"]
    assert f.severity == "warning"
    assert (
        f.title
        == "2 frames recompile together on every change: dim 1 of tensor 'input_ids' changed (16 → 24 → 32 → 40)"
    )
    assert "6 recompiles" in f.detail


def test_the_same_kind_at_other_moments_stays_apart():
    # frame 0 recompiles on a size at one step, frame 1 on another size many steps later: two causes
    r = Run().steps(1).compile(0, "encode").compile(1, "decode", line=20).steps(3)
    r.compile(0, "encode", reason=size_reason(0, "src")).steps(5)
    r.compile(1, "decode", line=20, reason=size_reason(0, "tgt")).steps(3)
    ids = sorted(f.id for f in r.findings() if f.rule == "shape-recompiles")
    assert ids == ["shape-recompiles:0:src:0", "shape-recompiles:1:tgt:0"]
    # other guard kinds at the same moment stay separate causes too
    r = Run().steps(1).compile(0, "encode").compile(1, "decode", line=20).steps(3)
    r.compile(0, "encode", reason=size_reason(0, "src"))
    r.compile(1, "decode", line=20, reason="1/0: self._modules['drop'].training == True  # x  # t.py:9 in forward")
    ids = sorted(f.id for f in r.steps(3).findings() if f.rule.endswith("recompiles"))
    assert ids == ["guard-recompiles:1:training:self.drop.training", "shape-recompiles:0:src:0"]


# ----------------------------------------- silent cases: failures, empty graphs


SITE = "/usr/lib/python3.11/site-packages"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    f'  File "{F}", line 40, in <module>\n'
    "    out = model(input_ids=ids, labels=ids)\n"
    "          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    f'  File "{SITE}/torch/nn/modules/module.py", line 1779, in _call_impl\n'
    "    return forward_call(*args, **kwargs)\n"
    f'  File "{SITE}/transformers/models/gpt2/modeling_gpt2.py", line 700, in forward\n'
    "    raise ValueError(msg)\n"
    "ValueError: Cannot handle batch sizes > 1 if no padding token is defined.\n"
)


def test_a_failed_job_names_the_exception_and_the_users_line():
    r = Run().steps(1).compile(0, "forward", graph_op_count=12).graph_break(0, 44, *PRINT[:1])
    r.stderr("warming up\n").stderr(TRACEBACK[:90]).stderr(TRACEBACK[90:]).exits(1)
    fs = r.findings()
    f = only(fs, "job-failed")
    assert fs[0] is f and f.severity == "critical" and f.id == "job-failed:exception"
    assert f.title == "The job failed: ValueError: Cannot handle batch sizes > 1 if no padding token is defined."
    assert (f.file, f.line) == (F, 40)  # the user's line, not transformers'
    assert f"raised at {SITE}/transformers/models/gpt2/modeling_gpt2.py:700 in forward, called from {F}:40" in f.detail
    assert "before any step completed" in f.detail
    assert f.evidence[0] == f"{F}:40 in <module>: `out = model(input_ids=ids, labels=ids)`"
    assert f.evidence[-1].startswith("ValueError: Cannot handle")
    # its breaks are not "outside the step loop": no step completed because of the failure
    b = only(fs, "graph-breaks")
    assert b.id == "graph-breaks:logging:before-failure" and b.severity == "warning"
    assert "before the job failed" in b.title


def test_the_last_of_chained_tracebacks_is_the_one_that_stopped_the_job():
    chained = (
        "Traceback (most recent call last):\n"
        f'  File "{F}", line 5, in load\n    open(p)\nFileNotFoundError: [Errno 2] x\n\n'
        "During handling of the above exception, another exception occurred:\n\n" + TRACEBACK
    )
    r = Run().steps(1).steps(5).stderr(chained).exits(1)
    f = only(r.findings(), "job-failed")
    assert f.title.startswith("The job failed: ValueError") and "after 5 steps" in f.detail


def test_compiler_errors_point_at_suppress_errors():
    tb = (
        f'Traceback (most recent call last):\n  File "{F}", line 9, in <module>\n    f(x)\n'
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nRuntimeError: boom\n"
    )
    f = only(Run().stderr(tb).exits(1).findings(), "job-failed")
    assert f.title == "The job failed: torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:"
    assert "suppress_errors" in f.fix


@pytest.mark.parametrize(
    "code,signal,tail,fid,severity,words",
    [
        (None, "SIGKILL", "", "job-failed:SIGKILL", "critical", "out-of-memory"),
        (None, "SIGSEGV", "", "job-failed:SIGSEGV", "critical", "native code"),
        (2, None, "usage: train.py [-h]\n", "job-failed:exit-code", "warning", "exited with code 2"),
        (None, "SIGINT", "", "job-failed:interrupted", "info", "interrupted"),
        (
            1,
            None,
            'Traceback (most recent call last):\n  File "t.py", line 3, in <module>\nKeyboardInterrupt\n',
            "job-failed:interrupted",
            "info",
            "interrupted",
        ),
    ],
)
def test_other_ways_a_job_ends_badly(code, signal, tail, fid, severity, words):
    r = Run().steps(1).steps(3)
    if tail:
        r.stderr(tail)
    f = only(r.exits(code, signal).findings(), "job-failed")
    assert (f.id, f.severity) == (fid, severity)
    assert words in f.title + f.detail
    if tail.startswith("usage"):
        assert f.evidence == ["last line on stderr: usage: train.py [-h]"]


def test_a_clean_exit_has_no_failure_finding_and_breaks_stay_one_offs():
    r = Run().steps(1).compile(0, "forward", graph_op_count=3).graph_break(0, 44, *PRINT[:1]).stderr(TRACEBACK)
    fs = r.findings()  # exit code 0: a traceback the job caught and printed is not a failure
    assert not [f for f in fs if f.rule == "job-failed"]
    assert only(fs, "graph-breaks").id == "graph-breaks:logging:outside-loop"


def test_graphs_that_captured_nothing_say_the_code_runs_eager():
    r = Run().steps(1).graph_break(0, 28, "Skip calling `torch.compiler.disable()`d function")  # before its compile
    r.compile(
        0,
        "step",
        line=27,
        graph_op_count=0,
        restart_reasons=["Skip calling `torch.compiler.disable()`d function\n  more"],
    )
    fs = r.steps(5).findings()
    f = only(fs, "empty-graphs")
    assert f.severity == "warning" and f.title == "step compiled to an empty graph: it runs eager"
    assert (f.file, f.line) == (F, 27)
    assert "1 graph break(s)" in f.detail and "torch.compiler.disable" in f.fix
    assert f.evidence == [
        f"step at {F}:27: 1 compile(s), 0 ops (restarted after: Skip calling `torch.compiler.disable()`d function)"
    ]
    assert "compile-cost" not in by_id(fs)  # not "[info] Compilation took 0.1 s"
    r = Run().steps(1).compile(0, "wrapper", graph_op_count=0).compile(1, "__init__", graph_op_count=0)
    assert only(r.steps(3).findings(), "empty-graphs").title == (
        "torch.compile captured no operation in 2 frames: the code runs eager"
    )


def test_empty_wrapper_frames_beside_real_graphs_are_normal():
    r = Run().steps(1).compile(0, "wrapper", graph_op_count=0).compile(1, "forward", graph_op_count=105)
    fs = r.compile(2, "__init__", graph_op_count=0).steps(3).findings()
    assert "empty-graphs" not in by_id(fs) and "compile-cost" in by_id(fs)
    # older recordings without op counts say nothing either
    assert "empty-graphs" not in by_id(Run().steps(1).compile(0, "f").steps(3).findings())


def test_sizes_of_one_are_explained_without_blaming_dynamic_false():
    # generate(): prefill of 5 tokens, decode steps of 1, a new prompt of 9
    r = Run().steps(1).compile(0, "wrapper").steps(2)
    r.compile(0, "wrapper", reason=size_reason(0, "input_ids", 1, 5, 1)).steps(2)
    r.compile(0, "wrapper", reason=size_reason(1, "input_ids", 1, 1, 9)).steps(2)
    f = only(r.findings(), "shape-recompiles")
    assert "Sizes 0 and 1 are always specialised" in f.detail and "dynamic=False" not in f.detail
    f = only(storm(2, refused=False).findings(), "shape-recompiles")
    assert "either torch.compile(..., dynamic=False) was passed, the dim was marked static" in f.detail


def test_a_kv_cache_length_recompile_gets_the_librarys_fix_not_one_the_user_cannot_write():
    """transformers' static cache is sized prompt + max_new_tokens: a new total
    recompiles the forward. The guarded tensor is a cache layer inside
    generate(): mark_dynamic on it is not something a user can write."""
    name = "kwargs['past_key_values'].layers[0].keys"
    r = Run().steps(1).compile(0, "wrapper")
    r.compile(0, "wrapper", reason=f"0/0: tensor '{name}' size mismatch at index 2. expected 95, actual 111")
    f = by_id(r.steps(2).findings())[f"shape-recompiles:0:{name}:2"]
    # what is known, not a fix no CPU test can apply: the cache's length, and the pages that say how it is sized
    assert "Dim 2 of the key/value cache is its length" in f.fix and "huggingface.co/docs/transformers" in f.fix
    assert "mark_dynamic" not in f.fix and "StaticCache(" not in f.fix and not f.fixes


def test_a_tensor_inside_an_object_is_not_given_mark_dynamic():
    name = "self.state.rows"
    r = Run().steps(1).compile(0, "step")
    r.compile(0, "step", reason=f"0/0: tensor '{name}' size mismatch at index 0. expected 4, actual 5")
    r.compile(0, "step", reason=f"0/1: tensor '{name}' size mismatch at index 0. expected 5, actual 6")
    (f,) = [x for x in r.steps(2).findings() if x.rule == "shape-recompiles"]
    assert "mark_dynamic" not in f.fix and "dynamic=True" in f.fix and "inside an object" in f.fix


# ------------------------------------------- breaks inside libraries


VENV_SITE = "/venv/lib/python3.11/site-packages"
CALLED = {"file": F, "line": 49, "name": "<module>", "code": "opt_step()"}


def library_break(r: Run, file: str, line: int, summary: str, code: str = "") -> Run:
    return r.add(
        {
            "kind": "graph_break",
            "compile_id": "0/0",
            "frame_id": 0,
            "file": file,
            "line": line,
            "summary": summary,
            "reason": summary,
            "user_stack": [{"file": file, "line": line, "name": "f", "code": code}],
            "called_from": CALLED,
        }
    )


def test_pytorchs_own_optimizer_split_is_by_design_not_a_fix_to_make():
    r = Run().steps(1).compile(0, "step")
    library_break(r, f"{VENV_SITE}/torch/optim/optimizer.py", 79, "Call to `torch._dynamo.graph_break()`")
    f = only(r.steps(4).findings(), "graph-breaks")
    assert f.id == "graph-breaks:by-design:optimizer-step" and f.severity == "info"
    assert "on purpose" in f.title and "Nothing to change" in f.fix
    assert "Remove the torch._dynamo.graph_break()" not in f.fix
    assert f.called_from is not None and f.called_from.line == 49


def test_ddp_bookkeeping_is_by_design_wherever_its_site_is():
    r = Run().steps(1).compile(0, "DistributedDataParallel")
    library_break(
        r,
        "/usr/lib/python3.11/contextlib.py",
        105,
        "Attempted to call function marked as skipped: DistributedDataParallel._inside_ddp_forward",
    )
    library_break(r, f"{VENV_SITE}/torch/nn/parallel/distributed.py", 1775, "Unsupported method call: _rebuild_buckets")
    f = only(r.steps(4).findings(), "graph-breaks")
    assert f.id == "graph-breaks:by-design:ddp" and f.severity == "info"
    assert "2 sites, 2 breaks" in f.title and "custom_op" not in f.fix


def test_other_library_breaks_keep_their_cause_with_advice_the_user_can_take():
    r = Run().steps(1).compile(0, "forward")
    library_break(
        r,
        f"{VENV_SITE}/transformers/utils/generic.py",
        933,
        "Attempted to call function marked as skipped: _thread.RLock.__enter__",
    )
    r.graph_break(0, 38, "Attempted to call function marked as skipped: mylib.helper")  # the user's own
    fs = r.steps(4).findings()
    lib = by_id(fs)["graph-breaks:unsupported-call:library"]
    assert lib.severity == "warning" and "(inside a library)" in lib.title
    assert "inside transformers" in lib.fix and "custom_op" not in lib.fix and "newer transformers" in lib.fix
    own = by_id(fs)["graph-breaks:unsupported-call"]
    assert "custom_op" in own.fix and own.line == 38


def test_batch_dim_advice_names_buckets_and_the_batch_of_one():
    r = Run().steps(1).compile(0, "ViT")
    for k, (a, b) in enumerate([(32, 1), (1, 17)]):
        r.compile(0, "ViT", reason=f"0/{k}: tensor 'pixels' size mismatch at index 0. expected {a}, actual {b}")
    f = by_id(r.steps(2).findings())["shape-recompiles:0:pixels:0"]
    assert "bucket batch sizes" in f.fix and "drop_last=True" in f.fix and "A batch of one" in f.fix
    # another dim is not a batch
    r2 = (
        Run()
        .steps(1)
        .compile(0)
        .compile(0, reason=size_reason(0, dim=1))
        .compile(0, reason=size_reason(1, dim=1, a=12, b=16))
    )
    f2 = by_id(r2.steps(2).findings())["shape-recompiles:0:x:1"]
    assert "bucket batch sizes" not in f2.fix


def test_a_shape_fix_names_the_users_own_expression():
    from ctmon.findings.guard_names import name_users_tensor, user_expression

    line = "out = cmodel(pixel_values=images[:, :3], labels=labels)  # BATCH-CALL"
    assert user_expression("kwargs['pixel_values']", line) == "images[:, :3]"
    assert user_expression("args[1]", "y = f(a, batch.x)") == "batch.x"
    assert user_expression("args[0]", "y = f(*xs)") is None  # which one is not on the line
    assert user_expression("kwargs['x']", "y = f(x=a) + g(x=b)") is None  # two calls say it
    assert user_expression("kwargs['x']", "y = f(x=a,") is None  # a call written over several lines
    assert user_expression("input_ids", line) is None  # a parameter's own name needs no translation
    fix = "Make dim 0 of the tensor passed as kwargs['x'] dynamic: torch._dynamo.mark_dynamic(x, 0)."
    assert name_users_tensor(fix, "kwargs['x']", "out = m(x=batch)") == (
        "Make dim 0 of batch (what your line passes as kwargs['x']) dynamic: torch._dynamo.mark_dynamic(batch, 0)."
    )
    assert name_users_tensor(fix, "kwargs['x']", None) == fix


def test_a_range_guard_reads_the_size_it_refused_and_transformers_config_gets_its_setting():
    r = (
        Run()
        .steps(1)
        .compile(0, "wrapper")
        .compile(0, "wrapper", reason="self.config.problem_type is None")
        .steps(1)
        .compile(0, "wrapper", reason="tensor 'kwargs['pixel_values']' size mismatch at index 0. expected 4, actual 3")
        .steps(1)
        .add(
            _reasons(
                0,
                3,
                [
                    "2 <= kwargs['pixel_values'].size()[0]",
                    "tensor 'kwargs['pixel_values']' size mismatch at index 0. expected 4, actual 1",
                ],
            )
        )
        .compile(0, "wrapper", reason="2 <= kwargs['pixel_values'].size()[0]")
        .steps(2)
    )
    fs = by_id(r.findings())
    shape = fs["shape-recompiles:0:kwargs['pixel_values']:0"]
    assert shape.title.endswith("(sizes 4, 3, 1)"), shape.title
    assert "A batch of one" in shape.fix
    cfg = next(f for f in fs.values() if f.rule == "guard-recompiles")
    assert 'model.config.problem_type = "single_label_classification"' in cfg.fix
    # torch 2.11 writes the same guard through object.__getattribute__
    older = "object.__getattribute__(self.config, 'problem_type') is None"
    r2 = Run().steps(1).compile(0, "wrapper").compile(0, "wrapper", reason=older).steps(2)
    cfg2 = next(f for f in r2.findings() if f.rule == "guard-recompiles")
    assert 'model.config.problem_type = "single_label_classification"' in cfg2.fix


# ------------------------------------------- the hook that did not start in the job


HOOK_LINE = "ctmon: hook disabled (ModuleNotFoundError: No module named 'ctmon.agent.boot')"


def _unreported(*stderr: str) -> Run:
    r = Run()
    r.events[0]["mode"] = "record"
    for text in stderr:
        r.stderr(text)
    return r.exits(0)


def test_a_hook_that_did_not_start_is_named_by_the_jobs_own_line() -> None:
    f = only(_unreported(HOOK_LINE + "\n", "ok\n").findings(), "no-process-reported")
    assert f.title == "ctmon's hook did not start in the job: nothing it compiled could be seen"
    assert HOOK_LINE in f.detail and HOOK_LINE in f.fix and HOOK_LINE in " ".join(f.evidence)
    assert "python -I" not in f.detail + f.fix  # not blamed on an isolated Python
    assert not f.fixes


def test_no_process_and_no_hook_line_is_still_told_as_a_python_ctmon_could_not_reach() -> None:
    f = only(_unreported("ok\n").findings(), "no-process-reported")
    assert "python -I" in f.detail and "hook did not start" not in f.title
