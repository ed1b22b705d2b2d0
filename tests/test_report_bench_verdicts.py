"""``ctmon bench``'s verdicts: runs repeated and interleaved, intervals from
the runs, "no difference resolved" when the noise is larger than the
effect, and each mode's first run compiled on a fresh cache of its own.
Real benches of a real script (tests/workloads/bench_sleep.py), its steps
dominated by sleeps so the figures hold on a loaded machine."""

from __future__ import annotations

import json
import os
import re
import statistics

import pytest
from helpers import ctmon, one_line_containing, workload

from ctmon.report.bench_render import render_text

SLEEPY = workload("bench_sleep.py")


def _bench(tmp_path, name: str, *args: str) -> dict:  # type: ignore[no-untyped-def]
    out = ctmon("bench", "--steps", "25", "-o", str(tmp_path / name), "--json", *args, timeout=400)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.slow
def test_modes_that_take_the_same_time_are_not_called_different(tmp_path):
    """Every mode does the same per step: the interval holds 1.0, no winner,
    and the words say so with the noise."""
    doc = _bench(tmp_path, "same", "--modes", "default", "--runs", "3", SLEEPY, "same")
    eager, default = doc["modes"]  # eager is always run: the baseline and the noise
    assert (eager["mode"], default["mode"], default["runs"], eager["runs"]) == ("eager", "default", 3, 3)
    lo, hi = default["speedup_ci"]
    assert lo <= 1.0 <= hi and lo <= default["speedup"] <= hi, default
    assert default["resolved"] is False and doc["ended_by"] == "runs"
    rec = doc["recommendation"]
    assert rec["mode"] is None and rec["resolved"] is False
    assert re.search(r"no difference resolved at this noise \(±\d+ %\)", rec["reason"]), rec["reason"]
    assert rec["noise"]["eager_runs"] == 3 and rec["noise"]["spread_pct"] is not None
    text = render_text(doc)
    assert "no recommendation: no difference resolved at this noise (±" in text
    assert "machine noise (spread of eager runs): ±" in text


@pytest.mark.slow
def test_a_large_real_effect_is_resolved_from_runs_on_caches_of_their_own(tmp_path):
    """Eager runs the function's sleep that the compiled graph leaves out:
    about 2× faster compiled, resolved after the minimum of runs."""
    doc = _bench(tmp_path, "effect", "--modes", "default,eager", "--runs", "5", SLEEPY, "eager-slower")
    eager, default = doc["modes"]
    assert default["resolved"] is True and default["speedup_ci"][0] > 1.0, default
    assert doc["ended_by"] == "resolved" and len(doc["rounds"]) == 3 == default["runs"] == eager["runs"]
    assert doc["rounds"][0] == ["eager", "default"]  # the first round in the order given, eager first
    rec = doc["recommendation"]
    assert rec["mode"] == "default" and rec["resolved"] is True and "95 % interval" in rec["reason"]
    assert "cold compile" in rec["reason"]
    # the figures agree with one another
    for row in (eager, default):
        medians = row["run_p50_ms"]
        assert len(medians) == 3 and row["p50_ms"] == round(statistics.median(medians), 4)
        assert row["p50_ci_ms"][0] <= row["p50_ms"] <= row["p50_ci_ms"][1]
    lo, hi = default["speedup_ci"]
    assert lo <= default["speedup"] == round(eager["p50_ms"] / default["p50_ms"], 3) <= hi
    pe = eager["run_p50_ms"]
    spread = round(100 * (max(pe) - min(pe)) / 2 / statistics.median(pe), 2)
    assert rec["noise"] == {"eager_runs": 3, "spread_pct": spread}
    assert eager["speedup_ci"] is None and eager["speedup"] == 1.0
    # each mode ran on an Inductor cache of its own, fresh for its first run,
    # reused by its later runs; the bench's own caches are gone after it
    caches = doc["mode_caches"]
    assert caches["eager"] != caches["default"]
    runs = tmp_path / "effect"
    for mode in ("eager", "default"):
        seen = []
        for name in (f"{mode}.output.log", f"{mode}-2.output.log", f"{mode}-3.output.log"):
            line = next(x for x in (runs / name).read_text().splitlines() if x.startswith("CACHE "))
            seen.append(line.split()[1:])
        assert seen[0] == [mode, caches[mode], "entries=0"], seen
        assert {s[1] for s in seen} == {caches[mode]}
        assert not os.path.exists(caches[mode])


@pytest.mark.slow
def test_bad_runs_and_budget_get_a_line_and_the_budget_ends_the_rounds(tmp_path):
    one_line_containing(ctmon("bench", "--runs", "0", SLEEPY, "same"), "--runs must be above 0")
    one_line_containing(ctmon("bench", "--runs", "few", SLEEPY, "same"), "--runs takes a number")
    one_line_containing(ctmon("bench", "--budget", "-5", SLEEPY, "same"), "--budget must be above 0")
    # the first round always runs; past the budget no other starts
    doc = _bench(tmp_path, "budget", "--modes", "eager", "--budget", "0.5", SLEEPY, "same")
    assert doc["ended_by"] == "budget" and doc["rounds"] == [["eager"]] and doc["modes"][0]["runs"] == 1


@pytest.mark.slow
def test_try_runs_default_with_one_change_and_shows_the_storm_gone(tmp_path):
    """--try dynamic=True on a recompile storm of dynamic=False: the try
    row is default with that argument put into the script's torch.compile
    call; its recompiles are gone, the unchanged default row keeps them."""
    shapes = workload("bench_shapes.py")
    doc = _bench(tmp_path, "try", "--modes", "default", "--runs", "1", "--try", "dynamic=True", shapes)
    rows = {r["mode"]: r for r in doc["modes"]}
    assert list(rows) == ["eager", "default", "try"] and doc["tried"] == "dynamic=True"
    assert rows["default"]["recompiles"] >= 4 and rows["try"]["recompiles"] == 0, rows
    assert rows["try"]["tried"] == "dynamic=True" and rows["default"].get("tried") is None
    assert "ctmon bench (default): tried: torch.compile(..., dynamic=True)" in rows["try"]["notes"]
    text = render_text(doc)
    assert "try: default with dynamic=True, against the unchanged default row" in text
    assert "try: tried: torch.compile(..., dynamic=True)" in text
    one_line_containing(ctmon("bench", "--try", "dynamc=1", shapes), "--try 'dynamc' is neither")
    one_line_containing(ctmon("bench", "--try", "dynamic=yes", shapes), "is not a Python literal")


def test_a_bad_try_in_the_job_is_said_and_never_fails_its_compile_call(monkeypatch):
    """The runner checks --try; set by hand in the job's environment, a bad
    or unknown one must still leave the job's torch.compile call as it was."""
    import torch

    from ctmon.agent import bench_mode

    for text, said in (
        ("dynamic=yes", "is not a Python literal"),
        ("torch._dynamo.config.no_such_setting=1", "this torch has no such setting"),
    ):
        monkeypatch.setenv(bench_mode.TRY_ENV, text)
        kwargs, why = bench_mode.with_try({"backend": "eager"})
        assert kwargs == {"backend": "eager"} and why is not None and said in why, why
    monkeypatch.setenv(bench_mode.TRY_ENV, "torch._dynamo.config.recompile_limit=3")
    before = torch._dynamo.config.recompile_limit
    try:
        assert bench_mode.with_try({})[1] == "tried: torch._dynamo.config.recompile_limit = 3"
        assert torch._dynamo.config.recompile_limit == 3
    finally:
        torch._dynamo.config.recompile_limit = before


@pytest.mark.slow
def test_a_modes_cold_compile_is_its_own_whatever_the_order(tmp_path):
    """Two modes that compile the same graph (default and reduce-overhead on
    a CPU), typed in either order: each mode's first run misses Inductor's FX
    graph cache and hits nothing, so neither compile time is the other's
    reuse and the order the user typed changes nothing."""
    from ctmon.read.load import load

    for order in (["default", "reduce-overhead"], ["reduce-overhead", "default"]):
        doc = _bench(
            tmp_path, "-".join(order), "--modes", ",".join(order), "--runs", "1", workload("bench_inductor.py")
        )
        rows = {r["mode"]: r for r in doc["modes"]}
        assert set(rows) == {"eager", *order}, rows
        for mode in order:
            assert rows[mode]["status"] == "ok", rows[mode]
            session, _ = load(rows[mode]["recording"])
            fx = session.compile.cache["fx_graph"]
            assert fx.hit == 0 and fx.miss >= 1, (order, mode, fx)
