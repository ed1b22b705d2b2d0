"""Advice in the user's names, with the lever the user has, one finding per
cause, each figure with its scope -- proven by applying the advice.

* The names at the user's call: ``forward(self, idx, targets)`` called as
  ``cmodel(x, y)`` gets ``mark_dynamic(x, 1)``, never ``idx``; and since the
  graph ties ``x``'s length to ``y``'s, the fix says to mark ``y`` too
  (marking ``x`` alone stops the job with a ConstraintViolationError: run
  here). A batch passed as it comes from the DataLoader (``step(batch, i)``)
  gets ``mark_dynamic(batch[0], 0)`` and ``drop_last``; each is applied.
* The lever of who makes the call: transformers' Trainer compiles and calls
  the model itself, so its fixes are ``TrainingArguments(dataloader_drop_last=
  True)`` and the collator's ``pad_to_multiple_of`` -- applied, the findings
  go. Lightning (not installed here) calls ``training_step`` from its loop:
  its template is checked on events shaped as its recording would be, and
  the fix it gives (``drop_last=True``) is the one applied above.
* One finding per cause across ranks: rank 1 alone recompiling the three
  frames of a forward split by graph breaks is one critical finding naming
  the three; padding every rank's batches alike removes it. Every other
  finding of that job says it is rank 0's; the summary's totals say they are
  summed over the ranks.

CPU only, ``backend="eager"``, recorded two at a time.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from helpers import WORKLOADS
from test_findings import Recorded, record_all
from test_findings_unit import F, Run, by_id, only
from test_whole_ranks import _hello, free_port

from ctmon.findings.current import findings_of
from ctmon.report.text import summary_lines
from ctmon.store import Session

ADVICE = os.path.join(WORKLOADS, "advice")
NAMES = os.path.join(ADVICE, "call_names.py")
LAST = os.path.join(ADVICE, "last_batch.py")
TRAINER = os.path.join(ADVICE, "hf_trainer.py")
ACCELERATE = os.path.join(ADVICE, "accelerate_compile.py")
SPLIT = os.path.join(ADVICE, "rank_split.py")
HAS_TRANSFORMERS = all(
    __import__("importlib").util.find_spec(m) is not None for m in ("transformers", "tokenizers", "accelerate")
)
SHAPE_RULES = ("shape-recompiles", "recompile-limit")


def line_of(path: str, marker: str) -> int:
    with open(path, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip().endswith(f"# {marker}"))


def fixes(r: Recorded, *rules: str) -> list[str]:
    return [f["fix"] for f in r.findings if f["rule"] in (rules or SHAPE_RULES)]


# ---------------------------------------------------- the names at the user's call


@pytest.fixture(scope="module")
def names(tmp_path_factory: Any) -> dict[str, Recorded]:
    jobs: dict[str, dict[str, Any]] = {
        "broken": {"target": [NAMES]},
        "keywords": {"target": [NAMES, "--keywords"]},
        "fix": {"target": [NAMES, "--fix"]},
        "fix-one": {"target": [NAMES, "--fix-one"], "rc": 1},
    }
    return record_all(tmp_path_factory.mktemp("names"), jobs)


@pytest.mark.slow
@pytest.mark.parametrize("run", ["broken", "keywords"])
def test_the_fix_names_what_the_users_line_passes_not_the_parameter(names: dict[str, Recorded], run: str) -> None:
    r = names[run]
    assert r.rep["compile"]["limit_hits"] == 1
    found = fixes(r)
    assert len(found) == 2, r.loud()  # the limit, and the shape cause
    for fix in found:
        assert "mark_dynamic(idx" not in fix  # idx is a name only inside forward()
        assert "torch._dynamo.mark_dynamic(x, 1)" in fix and "`x` (passed as `idx`)" in fix
        assert "your line also passes `y`" in fix and "ConstraintViolationError" in fix
    (call,) = r.rep["compile_calls"]  # what the agent records for it
    assert call["params"] == ["idx", "targets"] and call["code_name"] == "forward"


@pytest.mark.slow
def test_marking_what_the_fix_names_compiles_once(names: dict[str, Recorded]) -> None:
    r = names["fix"]
    c = r.rep["compile"]
    assert (c["compiles"], c["recompiles"], c["limit_hits"]) == (1, 0, 0), c
    assert not r.loud() and not [f for f in r.findings if f["rule"] in SHAPE_RULES]
    assert names["broken"].rep["compile"]["compiles"] > c["compiles"]


@pytest.mark.slow
def test_marking_one_of_two_tied_inputs_fails_as_the_fix_warns(names: dict[str, Recorded]) -> None:
    out = names["fix-one"].run.proc.stdout + names["fix-one"].run.proc.stderr
    assert "ConstraintViolationError" in out


@pytest.fixture(scope="module")
def last(tmp_path_factory: Any) -> dict[str, Recorded]:
    jobs: dict[str, dict[str, Any]] = {
        "broken": {"target": [LAST]},
        "drop-last": {"target": [LAST, "--drop-last"]},
        "mark": {"target": [LAST, "--mark"]},
        "mark-one": {"target": [LAST, "--mark-one"], "rc": 1},
        "dynamic": {"target": [LAST, "--compile-dynamic"]},
    }
    return record_all(tmp_path_factory.mktemp("last"), jobs)


@pytest.mark.slow
def test_a_batch_passed_as_it_comes_is_named_by_its_place_in_the_batch(last: dict[str, Recorded]) -> None:
    r = last["broken"]
    assert r.rep["compile"]["recompiles"] == 1
    (f,) = r.rule("shape-recompiles")
    assert "dim 0 of tensor 'batch[0]' changed (sizes 4, 2)" in f["title"]
    assert "torch._dynamo.mark_dynamic(batch[0], 0)" in f["fix"]
    assert "the other tensors in `batch`" in f["fix"]  # the targets, tied to the inputs
    assert "DataLoader(drop_last=True)" in f["fix"] and "dynamic=True" in f["fix"]
    assert "a tensor inside an object" not in f["fix"]
    start = next(e for e in r.run.events() if e["kind"] == "compile_start")
    assert start["caller"]["line"] == line_of(LAST, "STEP")  # the call of a compiled function, from the live stack


@pytest.mark.slow
@pytest.mark.parametrize("run", ["drop-last", "mark", "dynamic"])
def test_each_alternative_applied_leaves_no_recompile(last: dict[str, Recorded], run: str) -> None:
    r = last[run]
    assert r.rep["compile"]["recompiles"] == 0, r.rep["compile"]
    assert not r.rule("shape-recompiles") and not r.loud()


@pytest.mark.slow
def test_marking_the_inputs_alone_fails_as_the_fix_warns(last: dict[str, Recorded]) -> None:
    out = last["mark-one"].run.proc.stdout + last["mark-one"].run.proc.stderr
    assert "ConstraintViolationError" in out


# --------------------------------------------------------- Trainer's own levers


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: Any) -> dict[str, Recorded]:
    if not HAS_TRANSFORMERS:
        pytest.skip("transformers, tokenizers or accelerate is not installed")
    home = str(tmp_path_factory.getbasetemp() / "hf")
    jobs: dict[str, dict[str, Any]] = {
        name: {"target": [TRAINER, *flags], "env": {"HF_HOME": home}, "options": ["-q"]}
        for name, flags in {"broken": [], "pad": ["--pad"], "both": ["--pad", "--drop-last"]}.items()
    }
    return record_all(tmp_path_factory.mktemp("trainer"), jobs)


def _by_dim(r: Recorded) -> dict[int, dict[str, Any]]:
    out = {}
    for f in r.rule("shape-recompiles"):
        for dim in (0, 1):
            if f"dim {dim} of tensor 'input_ids'" in f["title"]:
                out[dim] = f
    return out


@pytest.mark.slow
def test_trainers_compile_is_known_as_trainers(trainer: dict[str, Recorded]) -> None:
    (call,) = trainer["broken"].rep["compile_calls"]
    assert call["file"].endswith("accelerate/accelerator.py")  # accelerate makes the call, for Trainer
    assert "transformers:Trainer.train" in call["via"]
    assert call["called_from"]["line"] == line_of(TRAINER, "TRAIN")


@pytest.mark.slow
def test_trainer_gets_its_arguments_and_the_collator_not_a_call_the_user_never_made(
    trainer: dict[str, Recorded],
) -> None:
    shape = _by_dim(trainer["broken"])
    assert set(shape) == {0, 1}, [f["title"] for f in trainer["broken"].findings]
    for f in shape.values():
        assert "TrainingArguments(torch_compile=True)" in f["fix"]
        assert "torch._dynamo.mark_dynamic(" not in f["fix"] and "torch.compile(..., dynamic=True)" not in f["fix"]
    assert "TrainingArguments(dataloader_drop_last=True)" in shape[0]["fix"]
    assert "pad_to_multiple_of" in shape[1]["fix"] and 'padding="max_length"' in shape[1]["fix"]


@pytest.mark.slow
def test_the_collators_padding_removes_the_length_recompiles(trainer: dict[str, Recorded]) -> None:
    broken, pad = trainer["broken"], trainer["pad"]
    assert set(_by_dim(pad)) == {0}  # the length is one now; the short last batch is still there
    assert pad.rep["compile"]["recompiles"] < broken.rep["compile"]["recompiles"]


@pytest.mark.slow
def test_dropping_the_short_batch_too_leaves_no_recompile(trainer: dict[str, Recorded]) -> None:
    r = trainer["both"]
    assert r.rep["compile"]["recompiles"] == 0 and not _by_dim(r), r.rep["compile"]


@pytest.fixture(scope="module")
def accelerate(tmp_path_factory: Any) -> dict[str, Recorded]:
    if not HAS_TRANSFORMERS:
        pytest.skip("accelerate is not installed")
    jobs: dict[str, dict[str, Any]] = {
        name: {"target": [ACCELERATE, *flags], "env": {"HF_HOME": str(tmp_path_factory.getbasetemp() / "hf")}}
        for name, flags in {"broken": [], "dynamic": ["--dynamic"]}.items()
    }
    return record_all(tmp_path_factory.mktemp("accelerate"), jobs)


@pytest.mark.slow
def test_accelerates_compile_gets_dynamic_through_its_plugin(accelerate: dict[str, Recorded]) -> None:
    r = accelerate["broken"]
    (call,) = r.rep["compile_calls"]
    assert (
        call["file"].endswith("accelerate/accelerator.py") and call["via"][0] == "accelerate:Accelerator.prepare_model"
    )
    (f,) = r.rule("shape-recompiles")
    # the user calls the model: their name for the input; accelerate calls torch.compile: its plugin's setting
    assert "torch._dynamo.mark_dynamic(tokens, 1)" in f["fix"] and "`tokens` (passed as `idx`)" in f["fix"]
    assert "Accelerator(dynamo_plugin=TorchDynamoPlugin(backend=..., dynamic=True))" in f["fix"]
    assert "torch.compile(..., dynamic=True)" not in f["fix"]
    fixed = accelerate["dynamic"]  # that setting applied
    assert fixed.rep["compile"]["recompiles"] == 0 and not fixed.rule("shape-recompiles")
    assert r.rep["compile"]["compiles"] > fixed.rep["compile"]["compiles"]


# ------------------------------------------------- the templates on events alone

FIT = {"file": F, "line": 40, "name": "<module>", "code": "trainer.fit(model, train_loader)"}


def lightning_run(dim: int, via: list[str] | None = None, bases: list[str] | None = None) -> Run:
    """A LightningModule compiled by the user, its training_step called by
    Lightning's loop with each batch: the recording's events, as Lightning 2
    makes them (from_compiled wraps training_step in the compile's context)."""
    call = {
        "kind": "compile_call",
        "target": "LitRegressor",
        "target_module": "__main__",
        "file": F,
        "line": 30,
        "backend": "eager",
        "params": ["x"],
        "code_file": F,
        "code_line": 12,
        "code_name": "forward",
        "bases": ["lightning.pytorch.core.module.LightningModule"] if bases is None else bases,
        "via": via or [],
    }
    r = Run().add(call).steps(1)
    r.compile(0, "training_step", line=15)
    reason = f"0/0: tensor 'batch[0]' size mismatch at index {dim}. expected 4, actual 2"
    r.compile(0, "training_step", line=15, reason=reason)
    for ev in r.events:
        if ev["kind"] == "compile_start":
            ev["caller"] = FIT
    return r.steps(3)


def test_lightnings_last_batch_gets_drop_last_on_the_train_dataloader() -> None:
    f = only(lightning_run(0).findings(), "shape-recompiles")
    assert "Lightning's loop calls training_step" in f.fix
    assert "drop_last=True" in f.fix and "train_dataloader()" in f.fix and "trainer.fit" in f.fix
    assert "mark_dynamic" not in f.fix and "dynamic=True" not in f.fix
    other = only(lightning_run(1).findings(), "shape-recompiles")
    assert "collate_fn" in other.fix and "drop_last" not in other.fix


def test_the_lever_follows_who_called_torch_compile() -> None:
    from ctmon.findings import levers as L

    def lever(via: list[str], bases: list[str] | None = None) -> str:
        session = lightning_run(0, via=via, bases=bases or []).session()
        return L.lever_of(session.compile.calls[0])

    assert lever([]) == L.USER
    assert lever(["accelerate:Accelerator.prepare_model", "transformers:Trainer.train"]) == L.TRAINER
    assert lever(["transformers:Trainer._inner_training_loop", "trl:SFTTrainer.train"]) == L.TRAINER
    assert lever(["accelerate:Accelerator.prepare"]) == L.ACCELERATE
    assert lever(["lightning:Trainer.fit"]) == L.LIGHTNING  # Lightning's own Trainer is Lightning's
    assert lever(["transformers:GenerationMixin.generate"]) == L.USER
    assert lever([], ["lightning.pytorch.core.module.LightningModule"]) == L.LIGHTNING
    # a user who compiles under accelerate keeps mark_dynamic, and dynamic=True goes to accelerate's plugin
    f = only(lightning_run(0, via=["accelerate:Accelerator.prepare"], bases=[]).findings(), "shape-recompiles")
    assert "TorchDynamoPlugin(" in f.fix and "torch.compile(..., dynamic=True)" not in f.fix


@pytest.mark.parametrize(
    "code,params,name,expr",
    [
        ("_, loss = cmodel(x, y)", ("idx", "targets"), "idx", "x"),
        ("_, loss = cmodel(x, y)", ("idx", "targets"), "targets", "y"),
        ("loss = cmodel(x, targets=batch.y)", ("idx", "targets"), "targets", "batch.y"),
        ("out = cmodel(input_ids=ids, labels=ids)", (), "kwargs['input_ids']", "ids"),
        ("loss = cmodel(x).pow(2).mean()", (), "args[0]", "x"),
        ("loss = F.mse_loss(cmodel(x), y)", ("idx",), "idx", None),
        ("loss = step(batch, i)", ("batch", "batch_idx"), "batch[0]", "batch[0]"),
        ("loss = step(data[k], i)", ("batch", "batch_idx"), "batch[1]", "data[k][1]"),
        # what mark_dynamic cannot mark before the call: a new tensor made on the line
        ("loss = cmodel(x.to(dev), y)", ("idx", "targets"), "idx", None),
        ("loss = cmodel(images[:, :3], y)", ("idx", "targets"), "idx", None),
        ("print(cmodel(x, y))", ("idx", "targets"), "idx", None),
        ("a = cmodel(x, y) + cmodel(z, w)", ("idx", "targets"), "idx", None),
        ("loss = cmodel(*xs)", ("idx", "targets"), "idx", None),
        ("loss = cmodel(x,", ("idx", "targets"), "idx", None),  # a call over several lines
        ("_, loss = cmodel(x, y)", (), "idx", None),  # the frame is not the compiled entry
        ("_, loss = cmodel(x, y)", ("idx", "targets"), "h", None),  # not a parameter
    ],
)
def test_the_users_expression_for_a_guarded_input(code: str, params: tuple[str, ...], name: str, expr: str | None):
    from ctmon.findings import levers as L
    from ctmon.wire.events_compile import StackFrame

    site = L.CallSite(line=StackFrame(file=F, line=9, code=code), params=params)
    assert L.users_expression(site, name) == expr


# ------------------------------------------------ one cause across ranks, scoped


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: Any) -> dict[str, Recorded]:
    def job(*flags: str) -> dict[str, Any]:
        launch = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
        return {"target": [*launch, "--master_port", str(free_port()), SPLIT, *flags], "options": ["-q"]}

    return record_all(tmp_path_factory.mktemp("split"), {"broken": job(), "pad": job("--pad")})


FRAMES = ["Split.forward", "forward (resumed at line 30)", "forward (resumed at line 32)"]


@pytest.mark.slow
def test_one_ranks_change_is_one_finding_naming_its_frames(ranks: dict[str, Recorded]) -> None:
    r = ranks["broken"]
    assert [x["compile"]["recompiles"] for x in r.rep["ranks"]] == [0, 3]
    (f,) = r.rule("rank-divergence")
    assert f["severity"] == "critical" and f["id"] == "rank-divergence:" + "+".join(FRAMES)
    assert f["title"] == (f"Ranks compiled 3 frames ({', '.join(FRAMES)}) differently: 2× on rank 1; 1× on rank 0 each")
    assert all(name in f["detail"] for name in FRAMES) and "at the same step" in f["detail"]
    assert f["evidence"][0].startswith("rank 1: 6 compile(s), 3 recompile(s) of 3 frames — Split.forward 0/1 at step ")
    assert [f["evidence"][0].count(f"{name} ") for name in FRAMES] == [1, 1, 1]
    assert f["evidence"][1] == "rank 0: 3 compile(s), 0 recompile(s) of 3 frames"


@pytest.mark.slow
def test_every_figure_says_its_scope(ranks: dict[str, Recorded]) -> None:
    r = ranks["broken"]
    (cost,) = r.rule("compile-cost")
    assert cost["title"].startswith("Compilation took ") and cost["title"].endswith(" — on rank 0")
    for f in r.findings:
        assert f["title"].endswith(" — on rank 0") == (f["rule"] != "rank-divergence"), f["title"]
    lines = summary_lines(r.rep)
    assert any(x.startswith("ctmon: 6 steps") and x.endswith(", on rank 0") for x in lines), lines
    assert any("compiling, summed over 2 ranks" in x for x in lines), lines


@pytest.mark.slow
def test_padding_every_ranks_batches_alike_removes_the_divergence(ranks: dict[str, Recorded]) -> None:
    r = ranks["pad"]
    assert [x["compile"]["recompiles"] for x in r.rep["ranks"]] == [0, 0]
    assert not r.rule("rank-divergence") and not r.rule("shape-recompiles")


def _two_ranks(frames: list[tuple[int, float]]) -> Session:
    """Rank 1 recompiles frame fid at time t (each frame's first compiles at t=2 on both ranks)."""
    s = Session()
    for ev in [_hello(0, 0, 11), _hello(1, 1, 12)]:
        s.apply(ev)
    for fid, _ in frames:
        for rank in (0, 1):
            for ev in _compile_of(rank, fid, f"{fid}/0", t=2.0):
                s.apply(ev)
    for fid, t in frames:
        for ev in _compile_of(
            1, fid, f"{fid}/1", reason="tensor 'x' size mismatch at index 0. expected 8, actual 5", t=t
        ):
            s.apply(ev)
    return s


def _compile_of(rank: int, fid: int, cid: str, reason: str | None = None, t: float = 2.0) -> list[dict]:
    common = {"t": t, "compile_id": cid, "frame_id": fid, "rank": rank}
    start = {"kind": "compile_start", **common, "name": f"f{fid}", "file": "/t.py", "line": 3 + 10 * fid}
    end = {
        **common,
        "kind": "compile",
        "t": t + 0.1,
        "co_name": f"f{fid}",
        "co_filename": "/t.py",
        "co_firstlineno": 3 + 10 * fid,
        "entire_frame_compile_time_s": 0.1,
        "has_guarded_code": True,
        **({"recompile_reason": reason} if reason else {}),
    }
    return [start, end]


def test_frames_recompiled_together_are_one_cause_and_apart_are_two() -> None:
    together = [f for f in findings_of(_two_ranks([(0, 5.0), (1, 5.2), (2, 5.3)])) if f.rule == "rank-divergence"]
    assert [f.id for f in together] == ["rank-divergence:f0+f1+f2"]
    apart = [f for f in findings_of(_two_ranks([(0, 5.0), (1, 30.0)])) if f.rule == "rank-divergence"]
    assert sorted(f.id for f in apart) == ["rank-divergence:f0", "rank-divergence:f1"]
    assert by_id(apart)["rank-divergence:f0"].title == "Ranks compiled f0 differently: 2× on rank 1; 1× on rank 0"
