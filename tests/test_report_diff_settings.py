"""``ctmon diff``: the Inductor (and AOTAutograd) settings of two runs, and
which of them changed a cache key.

Each FX graph and AOTAutograd cache record carries the settings not at their
defaults when its key was made (the agent's ``read_settings_in_force``). The
diff lists them as ``config`` entries, and a ``cache_key`` entry whose
changed component is ``inductor_config`` names the settings inside it.
Real runs (marked slow) change a setting the two ways not covered by
tests/test_report_diff.py's cache-key test: the job's environment
(TORCHINDUCTOR_*) and ``torch.compile(options=...)``."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from helpers import ctmon, record, workload

from ctmon.report.build import build_report
from ctmon.report.diff import compare, run_summary
from ctmon.report.diff_render import render_text
from ctmon.store import Session

JOB = workload("diff_settings_job.py")
MA = "torch._inductor.config.max_autotune"


def _session(inductor_hash: str, settings: dict[str, list[Any]] | None) -> Session:
    """One frame compiled once, its forward graph's FX cache record keyed by
    an ``inductor_config`` that hashes to ``inductor_hash`` and carrying
    ``settings`` (None: a recording made before settings were kept)."""
    s = Session()
    where = {"compile_id": "0/0", "frame_id": 0}
    s.apply({"kind": "compile_start", "t": 1.0, **where, "name": "forward", "file": "/p/train.py", "line": 12})
    cache: dict[str, Any] = {"kind": "cache", "t": 1.5, **where, "cache": "fx_graph", "result": "miss"}
    cache.update(
        key="k" + inductor_hash, graph="forward", components=[["gm", "g1"], ["inductor_config", inductor_hash]]
    )
    if settings is not None:
        cache["settings"] = settings
    s.apply(cache)
    s.apply({"kind": "compile", "t": 2.0, **where, "co_name": "forward", "co_filename": "/p/train.py"})
    assert s.bad_events == 0
    return s


def _summary(s: Session) -> Any:
    return run_summary("r.jsonl", s, build_report(s, lean=True))


def _kinds(entries: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in entries if e["kind"] == kind]


def test_the_setting_that_changed_a_key_is_named() -> None:
    base = _summary(_session("c1", {}))
    new = _summary(_session("c2", {MA: [True, False], "torch._inductor.config.triton.cudagraphs": [True, False]}))
    doc = compare(base, new)
    (key,) = _kinds(doc["changed"], "cache_key")
    assert key["components"] == ["inductor_config"]
    assert key["settings"] == [MA, "torch._inductor.config.triton.cudagraphs"]
    what = "FX graph cache for /p/train.py:12 forward: key changed in inductor_config: max_autotune, triton.cudagraphs"
    assert key["what"] == what
    config = {e["subject"]: e for e in _kinds(doc["changed"], "config")}
    assert config[MA]["what"] == f"{MA}: False (default) → True"
    assert (config[MA]["base"], config[MA]["new"]) == (False, True)
    text = render_text(doc)
    assert what in text and f"{MA}: False (default) → True" in text
    # the same settings both sides: unchanged, and the key entry names none
    same = compare(new, _summary(_session("c3", {MA: [True, False]})))
    assert [e["subject"] for e in _kinds(same["unchanged"], "config") if e["subject"].startswith("torch.")] == [MA]


def test_a_run_without_recorded_settings_says_nothing_of_them() -> None:
    tuned = _summary(_session("c2", {MA: [True, False]}))
    for old in (_summary(_session("c1", None)), {**tuned, "module_settings": None}):
        for a, b in ((old, tuned), (tuned, old)):
            doc = compare(a, b)
            entries = [e for v in ("changed", "unchanged") for e in doc[v]]
            assert not [e for e in entries if e["kind"] == "config" and e["subject"].startswith("torch.")], entries
            for key in _kinds(doc["changed"], "cache_key"):
                assert "settings" not in key and key["what"].endswith("key changed in inductor_config"), key
    # a summary made before settings were kept (no module_settings key) compares none either
    legacy = {k: v for k, v in tuned.items() if k != "module_settings"}
    legacy["config"] = {k: v for k, v in tuned["config"].items() if not k.startswith("torch.")}
    assert not [e for e in compare(legacy, tuned)["changed"] if e["kind"] == "config"]


def test_a_setting_the_environment_set_reads_default_on_the_other_side() -> None:
    env = _summary(_session("c2", {MA: [True]}))  # the environment set its default: none named
    doc = compare(_summary(_session("c1", {})), env)
    (entry,) = [e for e in _kinds(doc["changed"], "config") if e["subject"] == MA]
    assert entry["what"] == f"{MA}: default → True" and (entry["base"], entry["new"]) == (None, True)


# ------------------------------------------------------------ real runs


def _run(tmp: Any, name: str, *flags: str, env: dict[str, str]) -> Any:
    run = record(tmp / name, [JOB, *flags], options=["-q"], extra_env=env)
    assert run.returncode == 0, run.proc.stderr[-2000:]
    return run


@pytest.mark.slow
def test_a_setting_changed_by_environment_or_compile_options_is_named(tmp_path: Any) -> None:
    """Three runs share one Inductor cache: the second sets an Inductor
    setting through the job's environment, the third through
    torch.compile(options=...). Each misses the FX graph cache, and the diff
    with the first names the setting, in text and JSON; from the
    TORCH_TRACE directories (no settings recorded) it names none."""
    shared = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    base = _run(tmp_path, "base", env=shared)
    by_env = _run(tmp_path, "env", env={**shared, "TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE": "1"})
    by_options = _run(tmp_path, "options", "--options", env=shared)
    for run, setting, change in (
        (by_env, "max_autotune_pointwise", "default → True"),
        (by_options, "epilogue_fusion", "True (default) → False"),
    ):
        name = f"torch._inductor.config.{setting}"
        out = ctmon("diff", str(base.recording), str(run.recording), "--json")
        doc = json.loads(out.stdout)
        fx = [e for e in _kinds(doc["changed"], "cache_key") if e["subject"].startswith("fx_graph:")]
        assert {e["subject"].rsplit(":", 1)[-1] for e in fx} == {"forward", "backward"}, fx
        for e in fx:
            assert e["components"] == ["inductor_config"] and e["settings"] == [name], e
        config = [e for e in _kinds(doc["changed"], "config") if e["subject"] == name]
        assert [e["what"] for e in config] == [f"{name}: {change}"], doc["changed"]
        text = ctmon("diff", str(base.recording), str(run.recording)).stdout
        assert f" forward: key changed in inductor_config: {setting}\n" in text, text
        assert f"{name}: {change}" in text, text
        traced = ctmon("diff", str(base.trace_dir), str(run.trace_dir)).stdout
        assert " forward: key changed in inductor_config\n" in traced and name not in traced, traced
    assert os.path.isdir(shared["TORCHINDUCTOR_CACHE_DIR"])
