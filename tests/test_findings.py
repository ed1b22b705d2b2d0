"""Findings on real torch.compile workloads, and the CI gate.

Each workload in tests/workloads/findings/ shows one kind of problem and has a
``--fix`` flag that applies exactly what the finding's fix recommends; every
rule is checked on the broken run (the finding is there, names the place and
the API) and on the fixed run (it is gone). Workloads are recorded once per
module, two at a time (the CI machines have two cores), and shared by the
tests that read them. ``backend="eager"``/``"aot_eager"`` except for the
cache rules, whose workload keeps Inductor cheap (extern matmuls only).
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from helpers import ROOT, WORKLOADS, Run, ctmon, marker_lines, record, workload

FINDINGS = os.path.join(WORKLOADS, "findings")
FAKES = os.path.join(ROOT, "tests", "fakes")
PARALLEL = max(1, min(2, os.cpu_count() or 1))

pytestmark = pytest.mark.slow  # every test reads recordings of real jobs, made once per module


def wl(name: str) -> str:
    return os.path.join(FINDINGS, name)


def source(name: str) -> str:
    with open(wl(name)) as f:
        return f.read()


def def_line(path: str, name: str) -> int:
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if re.match(rf"\s*def {name}\(", line):
                return i
    raise AssertionError(name)


class Recorded:
    """A finished recording and its report."""

    def __init__(self, run: Run, expect_rc: int = 0) -> None:
        self.run = run
        assert run.returncode == expect_rc, (run.returncode, run.proc.stdout[-2000:], run.proc.stderr[-4000:])
        self.rep = run.report()
        self.findings: list[dict[str, Any]] = self.rep["findings"]

    @property
    def path(self) -> str:
        return self.run.recording

    def by_id(self) -> dict[str, dict[str, Any]]:
        return {f["id"]: f for f in self.findings}

    def rule(self, rule: str) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["rule"] == rule]

    def one(self, rule: str, **match: Any) -> dict[str, Any]:
        got = [f for f in self.rule(rule) if all(f.get(k) == v for k, v in match.items())]
        assert len(got) == 1, [(f["id"], f["title"]) for f in self.findings]
        return got[0]

    def loud(self) -> list[tuple[str, str, str]]:
        return [(f["severity"], f["id"], f["title"]) for f in self.findings if f["severity"] in ("warning", "critical")]


def record_all(base: Any, jobs: dict[str, dict[str, Any]]) -> dict[str, Recorded]:
    """Record several workloads, PARALLEL at a time; each job: target, env, options, rc."""

    def one(name: str, job: dict[str, Any]) -> Recorded:
        run = record(
            base / name, job["target"], torch_trace=False, extra_env=job.get("env"), options=job.get("options")
        )
        return Recorded(run, job.get("rc", 0))

    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {name: pool.submit(one, name, job) for name, job in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


GATE = ["--fail-on", "recompiles>1", "--fail-on", "limit_hits>0"]


# --------------------------------------------------- 1 + 2: limit and shapes


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    path = wl("shape_storm.py")
    return record_all(
        tmp_path_factory.mktemp("shapes"),
        {
            "broken": {"target": [path], "options": GATE, "rc": 3},
            "fixed": {"target": [path, "--fix"], "options": GATE},
        },
    )


def test_recompile_limit_is_critical_and_names_the_users_function(shapes):
    path = wl("shape_storm.py")
    r = shapes["broken"]
    f = r.one("recompile-limit")
    assert f["severity"] == "critical"
    assert f["title"] == "encode hit the recompile limit (4) and now runs eager"
    assert (f["file"], f["line"]) == (path, def_line(path, "encode"))
    assert r.findings[0] == f  # the worst finding comes first
    # PyTorch's record of the refused compile has no code name: the finding
    # follows its compile id (frame) back to encode()
    refused = [e for e in r.run.events() if e["kind"] == "compile" and e.get("fail_type")]
    assert len(refused) == 1 and "co_name" not in refused[0]
    assert f["evidence"][-1] == f"refused compile(s): {refused[0]['compile_id']}"
    assert "4× dim 1 of tensor 'tokens' changed (16 → 24 → 32 → 40 → 48)" in f["evidence"][0]
    assert "torch._dynamo.mark_dynamic(tokens, 1)" in f["fix"]


def test_shape_recompiles_name_the_tensor_and_dimension(shapes):
    path = wl("shape_storm.py")
    f = shapes["broken"].one("shape-recompiles")
    assert f["severity"] == "warning"
    assert f["title"] == "encode recompiled 4× because dim 1 of tensor 'tokens' changed (sizes 16, 24, 32, 40, 48)"
    assert (f["file"], f["line"]) == (path, def_line(path, "encode"))
    assert "torch._dynamo.mark_dynamic(tokens, 1)" in f["fix"] and "dynamic=True" in f["fix"]
    assert "bucket" in f["fix"]
    # the workload's --fix is exactly that call
    assert "torch._dynamo.mark_dynamic(tokens, 1)" in source("shape_storm.py")


def test_marking_the_dim_dynamic_removes_both_findings(shapes):
    r = shapes["fixed"]
    assert not r.rule("recompile-limit") and not r.rule("shape-recompiles")
    assert r.rep["compile"]["compiles"] == 1 and r.loud() == []


def test_record_gate_exits_3_with_a_line_per_broken_budget(shapes):
    err = shapes["broken"].run.proc.stderr
    assert "ctmon: budget broken: recompiles = 4 (fails when recompiles > 1)" in err
    assert "ctmon: budget broken: limit_hits = 1 (fails when limit_hits > 0)" in err
    assert "budget broken" not in shapes["fixed"].run.proc.stderr


# ---------------------------------------------------- 3: Python scalars


@pytest.fixture(scope="module")
def scalars(tmp_path_factory):
    path = wl("scalar_recompiles.py")
    return record_all(
        tmp_path_factory.mktemp("scalars"),
        {
            "broken": {"target": [path]},
            "fixed": {"target": [path, "--fix"]},
        },
    )


def test_item_value_after_a_graph_break(scalars):
    path = wl("scalar_recompiles.py")
    item_line = marker_lines(path)["item"]
    f = scalars["broken"].one("scalar-recompiles", line=item_line)
    assert f["severity"] == "warning" and f["file"] == path
    assert f["title"] == (
        f"normalize (resumed at line {item_line}) recompiles for every new value of the number "
        f"produced at line {item_line} (`scale = total.item()`)"
    )
    assert "`return x / scale`" in f["detail"] and "bakes that number in as a constant" in f["detail"]
    assert f["fix"].startswith("Keep the value a tensor")
    assert any(e.startswith("values seen: ") for e in f["evidence"])
    assert "return x / total" in source("scalar_recompiles.py")  # the --fix: divide by the tensor


def test_python_float_argument_every_call(scalars):
    path = wl("scalar_recompiles.py")
    f = scalars["broken"].one("scalar-recompiles", title="sample recompiled 5× on the Python number 'temperature'")
    assert f["severity"] == "warning"
    assert (f["file"], f["line"]) == (path, def_line(path, "sample") + 1)  # where the guarded value is used
    assert "torch.tensor(temperature)" in f["fix"]
    assert "values seen: 1.0, 0.9, 0.8, 0.7, 0.6" in f["evidence"]
    assert "torch.tensor(temperature)" in source("scalar_recompiles.py")


def test_keeping_scalars_tensors_removes_the_findings(scalars):
    r = scalars["fixed"]
    assert not r.rule("scalar-recompiles") and not r.rule("graph-breaks")
    assert r.rep["compile"]["recompiles"] == 0 and r.loud() == []


# ------------------------------------------------------ 4: other guards


@pytest.fixture(scope="module")
def guards(tmp_path_factory):
    path = wl("guard_recompiles.py")
    return record_all(
        tmp_path_factory.mktemp("guards"),
        {
            "broken": {"target": [path]},
            "fixed": {"target": [path, "--fix"]},
        },
    )


@pytest.mark.parametrize(
    "frame,kind,name,severity,what,fix_words",
    [
        # featurize(x) is called as featurize_c(raw): the fix names the caller's tensor
        ("featurize", "dtype", "x", "warning", "a tensor's dtype changed", ["raw.to(torch.float32)"]),
        (
            "Net.forward",
            "module_attribute",
            "self.step",
            "warning",
            "a module attribute changed",
            ["register_buffer('step', torch.zeros((), dtype=torch.long))", "self.step.fill_(value)"],
        ),
        ("jitter", "global", "NOISE_STEP", "warning", "a global variable changed", ["torch.tensor(NOISE_STEP)"]),
        (
            "Head.forward",
            "training",
            "self.drop.training",
            "info",
            "module.training changed (train() / eval())",
            ["uncompiled module"],
        ),
        ("smooth", "requires_grad", "h", "info", "a tensor's requires_grad changed", ["h.detach()"]),
    ],
)
def test_other_guard_kinds_are_named(guards, frame, kind, name, severity, what, fix_words):
    r = guards["broken"]
    (f,) = [f for f in r.rule("guard-recompiles") if f["id"].endswith(f":{kind}:{name}")]
    assert f["severity"] == severity
    assert re.fullmatch(
        rf"{re.escape(frame)} recompiled \d+× because {re.escape(what)}: {re.escape(name)}", f["title"]
    ), f["title"]
    assert f"Guard kind: {kind}." in f["detail"]
    assert f["file"] == wl("guard_recompiles.py")
    for w in fix_words:
        assert w in f["fix"], (w, f["fix"])


def test_other_guard_fixes_are_what_the_workload_applies(guards):
    src = source("guard_recompiles.py")
    for practice in (
        'register_buffer("step", torch.zeros((), dtype=torch.long))',
        "net.step.fill_(step)",
        "torch.tensor(step)",
        "raw.to(torch.float32)",
        "h.detach()",
        "(head if args.fix else head_c)",
    ):
        assert practice in src
    (attr,) = [f for f in guards["broken"].rule("guard-recompiles") if f["id"].endswith(":module_attribute:self.step")]
    assert "Dynamo's hint: torch.compile considers integer attributes" in attr["detail"]
    assert "allow_unspec_int_on_nn_module" in attr["fix"]


def test_applying_the_guard_fixes_removes_the_findings(guards):
    r = guards["fixed"]
    assert not r.rule("guard-recompiles") and not r.rule("recompile-limit")
    assert r.rep["compile"]["recompiles"] == 0 and r.loud() == []


# ------------------------------------------------------ 5: graph breaks


@pytest.fixture(scope="module")
def breaks(tmp_path_factory):
    path = wl("graph_break_zoo.py")
    options = ["--fail-on", "recompiles>1", "--fail-on", "graph_breaks>0"]
    return record_all(
        tmp_path_factory.mktemp("breaks"),
        {
            "broken": {"target": [path], "options": options, "rc": 3},
            "fixed": {"target": [path, "--fix"], "options": options},
        },
    )


@pytest.mark.parametrize(
    "marker,cat,fix_words",
    [
        ("print", "logging", ["torch._dynamo.config.reorderable_logging_functions"]),
        ("item", "scalar-output", ["capture_scalar_outputs", "Keep the value a tensor"]),
        ("branch", "data-dependent-branch", ["torch.where", "torch.cond"]),
        ("numpy", "numpy", ["For np.digitize use torch.bucketize(x, boundaries, right=True)."]),
        (
            "call",
            "unsupported-call",
            ["`time.time()`", "outside the compiled function", "torch.library.custom_op", "allow_in_graph"],
        ),
    ],
)
def test_graph_breaks_by_cause_at_the_users_line(breaks, marker, cat, fix_words):
    path = wl("graph_break_zoo.py")
    line = marker_lines(path)[marker]
    f = breaks["broken"].by_id()[f"graph-breaks:{cat}"]
    assert f["severity"] == "warning" and (f["file"], f["line"]) == (path, line)
    assert "in the step loop: 1 site" in f["title"]
    assert re.match(rf"{re.escape(path)}:{line} ×\d+ \(in the step loop\): ", f["evidence"][0]), f["evidence"]
    for w in fix_words:
        assert w in f["fix"], (w, f["fix"])


def test_one_off_break_ranks_below_the_loop_breaks(breaks):
    path = wl("graph_break_zoo.py")
    r = breaks["broken"]
    once = r.by_id()["graph-breaks:scalar-output:outside-loop"]
    assert once["severity"] == "info" and (once["file"], once["line"]) == (path, marker_lines(path)["once"])
    assert "outside the step loop" in once["title"]
    ids = [f["id"] for f in r.findings]
    looped = [i for i, f in enumerate(r.findings) if f["rule"] == "graph-breaks" and f["severity"] == "warning"]
    assert len(looped) == 5 and max(looped) < ids.index(once["id"])


def test_removing_the_breaks_removes_the_findings(breaks):
    src = source("graph_break_zoo.py")
    for practice in (
        "reorderable_logging_functions.add(print)",
        "torch.where(",
        "torch.bucketize(",
        "model.last_forward_t = time.time()",
        "summary.tolist()",
    ):
        assert practice in src
    r = breaks["fixed"]
    assert r.rep["compile"]["graph_breaks"] == 0 and not r.rule("graph-breaks") and r.loud() == []


def test_gate_on_breaks_and_recompiles(breaks):
    err = breaks["broken"].run.proc.stderr
    lines = [ln for ln in err.splitlines() if "budget broken" in ln]
    assert len(lines) == 2, err[-3000:]
    assert lines[0].startswith("ctmon: budget broken: recompiles = ") and "(fails when recompiles > 1)" in lines[0]
    assert lines[1].startswith("ctmon: budget broken: graph_breaks = ")
    assert breaks["fixed"].run.returncode == 0 and "budget broken" not in breaks["fixed"].run.proc.stderr


# -------------------------------------------------------------- 6: caches


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    base = tmp_path_factory.mktemp("caches")
    path = wl("cache_runs.py")
    warm_dir, bypass_dir, fixed_dir = (str(base / d) for d in ("warm-dir", "bypass-dir", "fixed-dir"))

    def env(d: str, **kw: str) -> dict[str, str]:
        return {"TORCHINDUCTOR_CACHE_DIR": d, **kw}

    first = record_all(
        base,
        {
            "warm": {"target": [path], "env": env(warm_dir)},
            "bypass": {"target": [path, "--allow-in-graph"], "env": env(bypass_dir)},
            "bypass-fixed": {"target": [path, "--allow-in-graph", "--fix"], "env": env(fixed_dir)},
        },
    )
    # the second start in the warm directory: with the caches disabled it
    # compiles from scratch; with the variable unset (same-config) it hits
    again = record_all(
        base,
        {
            "disabled": {"target": [path], "env": env(warm_dir, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")},
            "changed-config": {"target": [path, "--tuned"], "env": env(warm_dir)},
            "same-config": {"target": [path], "env": env(warm_dir)},
        },
    )
    return {**first, **again}


def test_a_cold_private_cache_is_not_a_problem(caches):
    r = caches["warm"]
    assert r.rep["cache"]["entries_at_start"] == {"fx_graph": 0, "aot_autograd": 0}
    assert r.rep["cache"]["fx_graph"]["miss"] >= 2 and not r.rule("caches") and r.loud() == []


def test_misses_where_hits_were_expected(caches):
    r = caches["changed-config"]
    f = r.one("caches")
    # the same full misses as new code's first run in a shared directory: said, not warned
    assert f["id"] == "cache:expected-hits" and f["severity"] == "info"
    d = caches["warm"].rep["cache"]["cache_dir"]
    assert re.fullmatch(
        rf"FX graph cache missed \d+×: none of the \d+ entries already in {re.escape(d)} matched "
        "this run's graphs",
        f["title"],
    )
    assert (f["file"], f["line"]) == (wl("cache_runs.py"), def_line(wl("cache_runs.py"), "forward"))
    assert "same config" in f["fix"] and "TORCHINDUCTOR_CACHE_DIR" in f["fix"]


def test_same_config_hits_the_cache(caches):
    r = caches["same-config"]
    assert r.rep["cache"]["fx_graph"]["hit"] >= 2 and r.rep["cache"]["fx_graph"]["miss"] == 0
    assert r.rep["cache"]["aot_autograd"]["hit"] == 1
    assert not r.rule("caches") and r.loud() == []


def test_bypass_reason_is_surfaced(caches):
    f = caches["bypass"].one("caches")
    assert f["id"] == "cache:bypass:aot_autograd:Unsupported call_function target <function project>"
    assert f["severity"] == "warning"
    assert f["title"] == "AOTAutograd cache bypassed 1×: Unsupported call_function target <function project>"
    assert "`project` (from __main__)" in f["fix"] and "remove allow_in_graph" in f["fix"]
    assert "0x" not in f["title"] + f["id"]


def test_tracing_the_helper_caches_the_graph(caches):
    r = caches["bypass-fixed"]
    assert r.rep["cache"]["aot_autograd"]["bypass"] == 0 and not r.rule("caches") and r.loud() == []


def test_disabled_caches(caches):
    f = caches["disabled"].one("caches")
    assert f["id"] == "cache:disabled" and f["severity"] == "warning"
    assert f["evidence"] == ["TORCHINDUCTOR_FORCE_DISABLE_CACHES=1"]
    assert "Unset TORCHINDUCTOR_FORCE_DISABLE_CACHES" in f["fix"]


def test_unsetting_the_disable_variable_gets_the_hits(caches):
    """cache:disabled's fix applied: the same second start in the same warm
    directory, the variable unset, hits where the disabled one compiled all."""
    off, on = caches["disabled"], caches["same-config"]
    assert off.rep["cache"]["cache_dir"] == on.rep["cache"]["cache_dir"]
    assert off.rep["cache"]["entries_at_start"]["fx_graph"] >= 2  # the entries were there to hit
    assert off.rep["cache"]["fx_graph"]["hit"] == 0 and off.by_id()["cache:disabled"]["fixes"] == []
    assert on.rep["cache"]["fx_graph"]["hit"] >= 2 and on.rep["cache"]["aot_autograd"]["hit"] == 1
    assert "cache:disabled" not in on.by_id() and on.loud() == []


def test_removing_allow_in_graph_as_the_bypass_fix_says_caches_the_graph(caches):
    """cache:bypass's fix (the allow_in_graph form) applied: the same job
    with the helper traced has no bypass and no caches finding, and nothing
    else is claimed as a fix."""
    f = caches["bypass"].one("caches")
    assert "Let Dynamo trace `project` (remove allow_in_graph)" in f["fix"] and f["fixes"] == []
    assert "custom_op" not in f["fix"]
    fixed = caches["bypass-fixed"]
    assert fixed.rep["cache"]["aot_autograd"] == {"hit": 0, "miss": 1, "bypass": 0}
    assert not fixed.rule("caches")


def test_a_persistent_cache_dir_as_cold_tmp_says_hits_on_the_next_start(caches):
    """cache:cold-tmp's fix applied: TORCHINDUCTOR_CACHE_DIR set to a directory
    that persists; the cold first start there is no finding, and the next
    start hits (the finding itself on a /tmp default: test_findings_advice_proven_caches)."""
    first, second = caches["warm"], caches["same-config"]
    assert first.rep["cache"]["fx_graph"]["hit"] == 0 and not first.rule("caches")
    assert second.rep["cache"]["fx_graph"]["hit"] >= 2 and second.rep["cache"]["fx_graph"]["miss"] == 0


# ------------------------------------- 7 + 8: compile cost, late compiles, spikes


@pytest.fixture(scope="module")
def late(tmp_path_factory):
    path = wl("late_shape.py")
    return record_all(
        tmp_path_factory.mktemp("late"),
        {
            "broken": {"target": [path]},
            "fixed": {"target": [path, "--fix"]},
        },
    )


def test_compile_cost_with_per_frame_evidence(late):
    r = late["broken"]
    f = r.one("compile-cost")
    assert f["severity"] == "info" and re.match(r"Compilation took \d+\.\d s \(\d+% of the \d+\.\d s run\)", f["title"])
    assert re.match(
        rf"Sequential at {re.escape(wl('late_shape.py'))}:\d+: \d+\.\d\d s in 2 compile\(s\)", f["evidence"][0]
    ), f["evidence"]
    assert any(e.startswith("recompiles alone: ") for e in f["evidence"])


def test_late_compile_in_steady_state(late):
    f = late["broken"].one("late-compiles")
    assert f["severity"] == "warning"
    # steps numbered as the optimizer counts them (1-based): the late batch is the 46th step
    assert f["title"] == "1 compile in steady state (after step 13 of 60), the first at step 46 (Sequential)"
    assert "size mismatch at index 0. expected 32, actual 20" in f["evidence"][0]
    assert "Warm up every input shape" in f["fix"]
    assert f["file"] == wl("late_shape.py")


def test_step_spike_explained_by_the_compile(late):
    f = late["broken"].one("step-spikes", id="spikes:compile")
    assert f["severity"] == "warning" and f["evidence"][0].startswith("step 46: ")
    assert "Sequential" in f["evidence"][0] and f["file"] == wl("late_shape.py")


def test_warming_up_removes_late_compiles_and_spikes(late):
    r = late["fixed"]
    assert not r.rule("late-compiles")
    assert all(f["severity"] == "info" for f in r.rule("step-spikes"))
    assert r.loud() == []


def test_late_compiles_advice_is_the_warm_up_it_applies_and_points_at_the_cause(late):
    """late-compiles' fix: warming up (applied by --fix, above: the finding
    gone) or the recompile finding's own change, which that finding names."""
    broken = late["broken"]
    f = broken.one("late-compiles")
    assert f["fix"].startswith("Warm up every input shape") and f["fixes"] == []
    assert "the recompile findings for these compiles" in f["fix"]
    assert "bucket" not in f["fix"] and "mark_dynamic" not in f["fix"]  # the shape finding's own, proven there
    assert broken.rule("shape-recompiles")


def test_warming_up_as_spikes_compile_says_leaves_only_warm_up_steps(late):
    """spikes:compile's fix (warm every input shape up before the loop)
    applied: no step after warm-up pays for a compile."""
    assert late["broken"].one("step-spikes", id="spikes:compile")["severity"] == "warning"
    fixed = [f for f in late["fixed"].rule("step-spikes") if f["id"] == "spikes:compile"]
    assert all(f["severity"] == "info" and "warm-up" in f["detail"] for f in fixed)
    assert late["fixed"].rep["steps"]["compile_steps"] < late["broken"].rep["steps"]["compile_steps"]


def test_cudagraph_skips_in_a_recording(late, tmp_path):
    # Only a GPU run can skip CUDA graphs. Until a GPU recording fixture exists,
    # take this real recording and give its compile the cudagraph_skip_reason
    # that PyTorch writes into compilation_metrics (Inductor, reduce-overhead).
    reason = (
        "skipping cudagraphs due to cpu device (arange). Found from : \n   File "
        f'"{wl("late_shape.py")}", line 28, in train_step\n    loss = cmodel(x).pow(2).mean()\n'
    )
    out = tmp_path / "cudagraphs.jsonl"
    with open(late["broken"].path) as src, open(out, "w") as dst:
        for line in src:
            ev = json.loads(line)
            if ev["kind"] == "compile" and not ev.get("recompile_reason"):
                ev["cudagraph_skip_reason"] = reason
            dst.write(json.dumps(ev) + "\n")
    proc = ctmon("report", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    (f,) = [f for f in json.loads(proc.stdout)["findings"] if f["rule"] == "cudagraphs"]
    assert f["severity"] == "warning" and f["title"] == "CUDA graphs skipped 1×: cpu device (arange)"
    assert (f["file"], f["line"]) == (wl("late_shape.py"), 28) and "device=x.device" in f["fix"]


# ------------------------------------------- 8: GPU idle (fake NVML) + a clean run


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    env_path = os.pathsep.join([FAKES, ROOT, os.environ.get("PYTHONPATH", "")])
    # ~7 s of steps, each waiting 0.12 s as on its data: enough 1 Hz samples away from the compile
    target = [workload("train_loop.py"), "60", "0.12"]
    return record_all(
        tmp_path_factory.mktemp("gpu"),
        {
            "idle": {"target": target, "env": {"PYTHONPATH": env_path, "CTMON_FAKE_NVML_UTIL": "5"}},
            "busy": {"target": target, "env": {"PYTHONPATH": env_path, "CTMON_FAKE_NVML_UTIL": "95"}},
        },
    )


def test_idle_gpu_while_steps_run(gpu):
    r = gpu["idle"]
    samples = [e for e in r.run.events() if e["kind"] == "sample" and e.get("gpus")]
    assert samples and samples[0]["gpus"][0]["util"] == 5 and samples[0]["gpus"][0]["proc_mem"] > 0
    f = r.one("gpu-idle")
    assert f["severity"] == "warning"
    assert f["title"] == "The GPU was mostly idle while steps ran (utilisation 5% on average)"
    assert "num_workers" in f["fix"] and "pin_memory=True" in f["fix"]


def test_clean_run_on_a_busy_gpu_has_no_warning(gpu):
    r = gpu["busy"]
    assert r.rep["steps"]["count"] == 60 and r.rep["compile"]["recompiles"] == 0
    assert not r.rule("gpu-idle")
    assert r.loud() == []
    assert [f["rule"] for f in r.findings if f["rule"] != "step-spikes"] == ["compile-cost"]


# ------------------------------------------------------------------ the gate


def test_a_failing_jobs_exit_code_wins_over_budgets(tmp_path):
    run = record(
        tmp_path,
        [workload("crash.py"), "sysexit"],
        torch_trace=False,
        options=["--fail-on", "compiles>0", "--fail-on", "compile_time_s>0"],
    )
    assert run.returncode == 4, run.proc.stderr[-2000:]
    assert "ctmon: budget broken: compiles = 1 (fails when compiles > 0)" in run.proc.stderr
    assert "ctmon: budget broken: compile_time_s = " in run.proc.stderr


def test_report_gate(shapes, breaks, late):
    def gate(rec: Recorded, *exprs: str):
        args = [a for e in exprs for a in ("--fail-on", e)]
        return ctmon("report", rec.path, "--json", *args)

    p = gate(breaks["broken"], "recompiles>1", "graph_breaks>0")
    assert p.returncode == 3 and json.loads(p.stdout)["compile"]["graph_breaks"] > 0
    assert [ln.split(" = ")[0] for ln in p.stderr.splitlines()] == [
        "ctmon: budget broken: recompiles",
        "ctmon: budget broken: graph_breaks",
    ]
    p = gate(breaks["fixed"], "recompiles>1", "graph_breaks>0")
    assert (p.returncode, p.stderr) == (0, "")
    p = gate(shapes["broken"], "limit_hits>0")
    assert p.returncode == 3 and p.stderr == "ctmon: budget broken: limit_hits = 1 (fails when limit_hits > 0)\n"
    assert gate(shapes["fixed"], "limit_hits>0").returncode == 0
    t = late["broken"].rep["compile"]["total_time_s"]
    p = gate(late["broken"], f"compile_time_s>{t / 2:.3f}")
    assert p.returncode == 3 and p.stderr.startswith(f"ctmon: budget broken: compile_time_s = {t:g}")
    assert gate(late["broken"], "compile_time_s>1000").returncode == 0
    p = ctmon("report", breaks["broken"].path, "--fail-on=graph_breaks>=1")
    assert p.returncode == 3 and "budget broken: graph_breaks" in p.stderr


@pytest.mark.parametrize(
    "expr,words",
    [
        ("recompiles>>1", "expected METRIC OP NUMBER"),
        ("recompiles", "expected METRIC OP NUMBER"),
        ("speed>1", "unknown metric 'speed'"),
        ("recompiles>one", "expected METRIC OP NUMBER"),
    ],
)
def test_bad_budget_expressions(shapes, tmp_path, expr, words):
    p = ctmon("report", shapes["fixed"].path, "--fail-on", expr)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("ctmon: ") and words in p.stderr, p.stderr
    # record refuses before starting the job
    rec = tmp_path / "never.jsonl"
    p = ctmon("record", "-o", str(rec), "--fail-on", expr, wl("shape_storm.py"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and words in p.stderr, p.stderr
    assert not rec.exists()


def test_report_fail_on_needs_an_expression(shapes):
    p = ctmon("report", shapes["fixed"].path, "--fail-on")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--fail-on needs an expression" in p.stderr
