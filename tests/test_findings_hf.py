"""Findings on a real library model and on silent failures, under ``ctmon record``.

A tiny Hugging Face GPT-2 built from a config (no download), compiled with
backend="eager": one change of the sequence length recompiles four frames
(transformers' hook wrapper, forward, the loss, the output dataclass) and must
read as one finding; the same script failing in its first step must name the
exception; a compiled step that captures no operation must say it runs eager.
A tiny ViT trained on the batches a DataLoader without drop_last gives (and
then single images) must get advice about batch sizes, written with the
script's own variable, and transformers' own config setting. A Llama with
gradient checkpointing, called with use_cache=True, must quote transformers'
own message (which names the fix) on the graph break its logging call makes.
Every recording is also analysed in-process with ``strict=True``, so a rule
that raises on it fails here instead of vanishing from the report.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import pytest
from helpers import WORKLOADS, assert_matches_torch_trace, ctmon, env_with, record
from trace_shape import read_trace_shape

from ctmon.findings import analyze
from ctmon.read.recording import read_recording
from ctmon.store import Session

pytestmark = pytest.mark.slow  # Hugging Face models under ctmon record

GPT2 = os.path.join(WORKLOADS, "findings", "hf_gpt2.py")
EMPTY = os.path.join(WORKLOADS, "findings", "empty_graph.py")
NOT_CALLED = os.path.join(WORKLOADS, "findings", "compiled_not_called.py")
VIT = os.path.join(WORKLOADS, "findings", "hf_vit.py")
CKPT = os.path.join(WORKLOADS, "findings", "hf_checkpointing.py")
RECOMPILE_RULES = ("shape-recompiles", "scalar-recompiles", "guard-recompiles", "recompile-limit")


def marker(path: str, name: str) -> int:
    with open(path) as f:
        return next(i for i, line in enumerate(f, 1) if f"# {name}" in line)


def def_line(path: str, name: str) -> int:
    with open(path) as f:
        return next(i for i, line in enumerate(f, 1) if re.match(rf"def {name}\(", line))


class Recorded:
    def __init__(self, tmp: Any, target: list[str], rc: int = 0, torch_trace: bool = False) -> None:
        self.run = record(tmp, target, torch_trace=torch_trace)
        assert self.run.returncode == rc, (self.run.returncode, self.run.proc.stderr[-3000:])
        self.rep = self.run.report()
        self.findings: list[dict[str, Any]] = self.rep["findings"]
        # the same recording, every rule strict: one that raises fails the test
        session = Session().apply_all(read_recording(self.run.recording))
        self.strict = [f.as_dict() for f in analyze(session, strict=True)]

    def rule(self, *rules: str) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["rule"] in rules]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("hf")
    # one at a time: the CI machines have two cores, and GPT-2's compiles fill one
    return {
        "gpt2": Recorded(base / "gpt2", [GPT2], torch_trace=True),
        "vit": Recorded(base / "vit", [VIT], torch_trace=True),
        "ckpt": Recorded(base / "ckpt", [CKPT], torch_trace=True),
        "crash": Recorded(base / "crash", [GPT2, "--crash"], rc=1),
        "empty": Recorded(base / "empty", [EMPTY]),
        "empty-fixed": Recorded(base / "empty-fixed", [EMPTY, "--fix"]),
        "not-called": Recorded(base / "not-called", [NOT_CALLED], torch_trace=True),
        "not-called-fixed": Recorded(base / "not-called-fixed", [NOT_CALLED, "--fix"], torch_trace=True),
    }


def test_the_report_is_what_every_rule_says_strictly(runs):
    for name, r in runs.items():
        assert [f["id"] for f in r.strict] == [f["id"] for f in r.findings], name


def test_one_sequence_length_change_is_one_finding_naming_the_frames(runs):
    r = runs["gpt2"]
    assert_matches_torch_trace(r.rep, r.run.trace())
    assert r.rep["compile"]["recompiles"] >= 3  # several frames recompiled on the change...
    (f,) = r.rule(*RECOMPILE_RULES)  # ...and it reads as one cause
    assert f["rule"] == "shape-recompiles" and f["severity"] == "info"
    assert f["title"].startswith(f"One change recompiled {r.rep['compile']['recompiles']} frames: ")
    assert "dim 1 of tensor 'input_ids' changed (16 → 24)" in f["title"]
    for frame in ("GPT2LMHeadModel.wrapper", "forward", "ForCausalLMLoss"):
        assert frame in f["detail"]
    assert f"{r.rep['compile']['recompiles']} recompiles" in f["detail"]
    assert any("tensor 'labels' size mismatch at index 1. expected 16, actual 24" in e for e in f["evidence"])
    assert f["evidence"][-1].startswith(f"in all: {r.rep['compile']['recompiles']} recompiles of ")
    # the user's line passes input_ids=ids: the fix names ids (input_ids is the model's name for it)
    assert "torch._dynamo.mark_dynamic(ids, 1)" in f["fix"] and "`ids` (passed as `kwargs['input_ids']`)" in f["fix"]


def test_a_job_that_fails_in_its_first_step_says_so(runs):
    r = runs["crash"]
    (f,) = r.rule("job-failed")
    assert f["severity"] == "critical" and r.findings[0] == f
    assert f["title"] == "The job failed: RuntimeError: loss went bad at step 0"
    assert (f["file"], f["line"]) == (GPT2, marker(GPT2, "CRASH"))
    assert "before any step completed" in f["detail"]
    assert f["evidence"][-1] == "RuntimeError: loss went bad at step 0"
    breaks = r.rule("graph-breaks")
    assert breaks and all(":before-failure" in b["id"] and "outside the step loop" not in b["title"] for b in breaks)
    assert not runs["gpt2"].rule("job-failed")


def test_a_compiled_step_that_captured_nothing_says_it_runs_eager(runs):
    r = runs["empty"]
    (f,) = r.rule("empty-graphs")
    assert f["severity"] == "warning" and f["title"] == "step compiled to an empty graph: it runs eager"
    assert (f["file"], f["line"]) == (EMPTY, def_line(EMPTY, "step"))
    assert "torch.compiler.disable" in f["fix"]
    assert not r.rule("compile-cost")  # not "[info] Compilation took 0.2 s"
    fixed = runs["empty-fixed"]
    assert not fixed.rule("empty-graphs") and fixed.rule("compile-cost")


def test_library_frames_breaks_and_findings_name_the_users_own_line(runs):
    """GPT-2's frames live in transformers: each also carries the script's
    line that called the model, and so does every finding located there."""
    r = runs["gpt2"]
    line = marker(GPT2, "SEQ-CALL")
    mine = {"file": GPT2, "line": line}

    def lead(item: dict[str, Any]) -> dict[str, Any] | None:
        c = item.get("called_from")
        return {"file": c["file"], "line": c["line"]} if c else None

    library = [f for f in r.rep["frames"] if "/site-packages/" in (f["file"] or "")]
    assert library, r.rep["frames"]
    assert all(lead(f) == mine for f in library), [(f["name"], f["called_from"]) for f in library]
    assert all(f["called_from"] is None for f in r.rep["frames"] if f not in library)
    assert all(f["called_from"]["code"] == "out = cmodel(input_ids=ids, labels=ids)  # SEQ-CALL" for f in library)
    for b in r.rep["graph_breaks"]:
        assert lead(b) == (mine if "/site-packages/" in (b["file"] or "") else None), b
    (f,) = r.rule(*RECOMPILE_RULES)
    assert lead(f) == mine
    # breaks inside transformers: advice about the library, never a custom_op in its source
    inside = [b for b in r.rule("graph-breaks") if "/site-packages/transformers/" in (b["file"] or "")]
    assert inside, r.rule("graph-breaks")
    for b in inside:
        assert b["id"].endswith(":library") and "(inside a library)" in b["title"], b
        assert "transformers" in b["fix"] and "custom_op" not in b["fix"], b["fix"]
        assert lead(b) == mine
    text = ctmon("report", r.run.recording)
    assert text.returncode == 0, text.stderr
    assert re.search(rf"called from \S*{os.path.basename(GPT2)}:{line}: out = cmodel", text.stdout), text.stdout


def test_torch_compile_called_but_nothing_compiled_says_so(runs):
    """torch.compile(model).generate() runs the original module: PyTorch's
    trace of the run is empty, the job prints its tokens, and only the call
    of torch.compile shows what was meant."""
    r = runs["not-called"]
    assert r.rep["compile"]["compiles"] == 0 and r.rep["compile"]["torch_compile_calls"] == 1
    assert not os.path.isdir(r.run.trace_dir) or r.run.trace().compiles == 0  # PyTorch saw no compile either
    (call,) = r.rep["compile_calls"]
    assert (call["target"], call["target_module"]) == ("GPT2LMHeadModel", "transformers.models.gpt2.modeling_gpt2")
    assert (call["file"], call["line"], call["backend"]) == (NOT_CALLED, marker(NOT_CALLED, "COMPILE-CALL"), "eager")
    (f,) = r.rule("never-compiled")
    assert f["severity"] == "warning" and f["title"].startswith("torch.compile was called but nothing was compiled")
    assert (f["file"], f["line"]) == (NOT_CALLED, marker(NOT_CALLED, "COMPILE-CALL"))
    assert "model.forward = torch.compile(model.forward)" in f["fix"]
    assert 'generation_config.cache_implementation = "static"' in f["fix"]  # the library's own setting
    fixed = runs["not-called-fixed"]
    assert fixed.rep["compile"]["compiles"] > 0 and not fixed.rule("never-compiled")
    assert_matches_torch_trace(fixed.rep, fixed.run.trace())
    (call,) = fixed.rep["compile_calls"]
    assert call["target"] == "GPT2LMHeadModel.forward" and call["dynamic"] is True
    assert (call["file"], call["line"]) == (NOT_CALLED, marker(NOT_CALLED, "FIXED-COMPILE"))
    for run in (r, fixed):  # nothing else on either run is a warning
        assert [x["rule"] for x in run.findings if x["severity"] != "info"] == (["never-compiled"] if run is r else [])


def test_a_vision_model_with_changing_batches_gets_batch_advice_in_the_users_words(runs, tmp_path):
    r = runs["vit"]
    assert_matches_torch_trace(r.rep, r.run.trace())
    # the program is the one plain python runs: PyTorch's trace of it agrees
    plain_dir = str(tmp_path / "plain")
    plain = subprocess.run(
        [sys.executable, VIT], capture_output=True, text=True, env=env_with(TORCH_TRACE=plain_dir), timeout=300
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    want, got = read_trace_shape(plain_dir), read_trace_shape(r.run.trace_dir)
    assert want.compiles and got.compiles == want.compiles and got.breaks == want.breaks

    mine = {"file": VIT, "line": marker(VIT, "BATCH-CALL")}
    (shape,) = r.rule("shape-recompiles")  # one cause, one finding
    assert shape["severity"] == "warning"
    assert shape["title"].endswith("dim 0 of tensor 'kwargs['pixel_values']' changed (sizes 4, 3, 1)")
    assert {"file": shape["called_from"]["file"], "line": shape["called_from"]["line"]} == mine
    assert "torch._dynamo.mark_dynamic(images, 0)" in shape["fix"]
    assert "DataLoader(drop_last=True)" in shape["fix"] and "A batch of one" in shape["fix"]
    (cfg,) = [f for f in r.rule("guard-recompiles") if "problem_type" in f["title"]]
    assert 'model.config.problem_type = "single_label_classification"' in cfg["fix"]
    assert cfg["called_from"] is not None and cfg["called_from"]["line"] == mine["line"]


def _plain_trace(tmp_path: Any, script: str) -> tuple[Any, str]:
    plain_dir = str(tmp_path / "plain")
    plain = subprocess.run(
        [sys.executable, script], capture_output=True, text=True, env=env_with(TORCH_TRACE=plain_dir), timeout=300
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    return read_trace_shape(plain_dir), plain.stderr


def test_a_library_break_quotes_the_librarys_own_message(runs, tmp_path):
    r = runs["ckpt"]
    assert_matches_torch_trace(r.rep, r.run.trace())
    want, plain_stderr = _plain_trace(tmp_path, CKPT)
    got = read_trace_shape(r.run.trace_dir)
    assert want.breaks and got.compiles == want.compiles and got.breaks == want.breaks
    said = "`use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`."
    # the library still prints its warning, once, as without ctmon
    assert r.run.proc.stderr.count(said) == plain_stderr.count(said) == 1
    (b,) = [f for f in r.rule("graph-breaks") if "/site-packages/transformers/" in (f["file"] or "")]
    assert b["id"] == "graph-breaks:logging:library" and b["severity"] == "warning"
    assert any(e.endswith("logged there: " + said) for e in b["evidence"]), b["evidence"]
    # PyTorch's own words first; then the library's own message, with the lever it names
    assert b["fix"].startswith("PyTorch (GB"), b["fix"]
    assert (
        f"ctmon: transformers explains this line itself: \u201c{said}\u201d Pass `use_cache=False` yourself" in b["fix"]
    )
    assert b["called_from"]["line"] == marker(CKPT, "CKPT-CALL")
    # the wrapper Dynamo gave up on at that call: the layers inside it still compiled
    failed = r.rule("compile-failures")
    assert failed and all(f["severity"] == "info" and "still compiled" in f["title"] for f in failed), failed
