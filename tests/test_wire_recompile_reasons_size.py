"""A recompile's reasons stay a bounded event however many versions failed.

PyTorch's ``recompile_reasons`` artifact lists the failed guard of every
cached version of the frame, so the n-th recompile lists n reasons: sent
whole, 800 recompiles of one frame made a 75 MB recording, and past ~4,500
each event was over the 1 MiB line limit and lost. The agent now sends the
kinds of failure with their counts and PyTorch's total
(ctmon/wire/guard_reasons.py); a recording written before, with the whole
lists, must still give the same report.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import pytest
from helpers import assert_matches_torch_trace, ctmon, record

from ctmon.findings import guards as G
from ctmon.findings import recompiles as R
from ctmon.findings.guard_advice import _size_beside
from ctmon.store import Session
from ctmon.store.compiles import CompileRecord
from ctmon.wire import guard_reasons

RECOMPILES = 60  # the old event at the last one: ~18 KB, and growing by ~190 bytes each
LINE_CAP = 8 * 1024

JOB = """\
import torch

torch._dynamo.config.recompile_limit = {limit}
torch._dynamo.config.automatic_dynamic_shapes = False  # 'k' stays specialised: one version per value


def scale(x, k):
    return x * k


f = torch.compile(scale, backend="eager")
x = torch.ones(2)
for k in range({calls}):
    f(x, k)
print("ok")
"""


def trace_reasons(trace_dir: str) -> tuple[dict[str, list[str]], dict[str, str | None]]:
    """From PyTorch's own TORCH_TRACE: compile id -> its whole list of
    recompile reasons, and -> the ``recompile_reason`` of its metrics."""
    lists: dict[str, list[str]] = {}
    firsts: dict[str, str | None] = {}
    for path in glob.glob(os.path.join(trace_dir, "*.log")):
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for i, line in enumerate(lines):
            brace = line.find("] {")
            if line.startswith("\t") or brace < 0:
                continue
            md = json.loads(line[brace + 2 :])
            cid = f"{md.get('frame_id')}/{md.get('frame_compile_id')}"
            if "compilation_metrics" in md:
                firsts[cid] = md["compilation_metrics"].get("recompile_reason")
            elif md.get("artifact", {}).get("name") == "recompile_reasons":
                payload = []
                for more in lines[i + 1 :]:
                    if not more.startswith("\t"):
                        break
                    payload.append(more[1:])
                text = "\n".join(payload)
                lists[cid] = json.loads(text) if text.startswith("[") else [text]
    return lists, firsts


def reasons_events(rec: str) -> list[tuple[int, dict[str, Any]]]:
    """(line length in bytes, event) of each recompile_reasons line."""
    out = []
    with open(rec, "rb") as f:
        for line in f:
            if b'"recompile_reasons"' in line:
                ev = json.loads(line)
                if ev.get("kind") == "recompile_reasons":
                    out.append((len(line), ev))
    return out


def bytes_per_compile(rec: str) -> dict[int, int]:
    """Bytes of the recording's lines about each compile, by its number in the frame."""
    out: dict[int, int] = {}
    with open(rec, "rb") as f:
        for line in f:
            cid = json.loads(line).get("compile_id")
            if isinstance(cid, str) and cid.startswith("0/"):
                n = int(cid.split("/")[1])
                out[n] = out.get(n, 0) + len(line)
    return out


def as_old_recording(rec: str, lists: dict[str, list[str]], out: str) -> None:
    """The same run as an older agent wrote it: each recompile_reasons event
    with PyTorch's whole list, no counts, no total."""
    with open(rec, "rb") as f, open(out, "wb") as w:
        for line in f:
            ev = json.loads(line)
            if ev.get("kind") == "recompile_reasons":
                ev = {k: v for k, v in ev.items() if k not in ("counts", "total")}
                ev["reasons"] = lists[ev["compile_id"]]
                line = json.dumps(ev).encode() + b"\n"
            w.write(line)


@pytest.mark.slow
def test_a_recompile_storm_records_bounded_reasons_that_agree_with_torch_trace(tmp_path):
    job = tmp_path / "storm.py"
    job.write_text(JOB.format(limit=RECOMPILES + 50, calls=RECOMPILES + 1))
    run = record(tmp_path, [str(job)], timeout=240)
    assert run.returncode == 0, run.proc.stderr
    assert run.trace_dir is not None
    rep = run.report()
    assert_matches_torch_trace(rep, run.trace())
    assert rep["compile"]["recompiles"] == RECOMPILES

    # bounded: every line under the cap, and the last no longer than an early one
    sized = reasons_events(run.recording)
    assert len(sized) == RECOMPILES
    biggest = max(n for n, _ in sized)
    assert biggest < LINE_CAP, f"a recompile_reasons line of {biggest} bytes"
    by_id = {ev["compile_id"]: n for n, ev in sized}
    early, last = by_id["0/20"], by_id[f"0/{RECOMPILES}"]
    assert last <= early + 64, (early, last)  # a few more digits, nothing per version
    # the recording grows linearly: a late compile costs what an early one did
    per = bytes_per_compile(run.recording)
    quarter = RECOMPILES // 4
    first_half = sum(per[n] for n in range(quarter, 2 * quarter)) / quarter
    second_half = sum(per[n] for n in range(3 * quarter, 4 * quarter)) / quarter
    assert second_half < 1.25 * first_half, (first_half, second_half)

    # what was kept agrees with PyTorch's own trace of the same run
    lists, firsts = trace_reasons(run.trace_dir)
    assert sorted(lists) == sorted(ev["compile_id"] for _, ev in sized)
    for _, ev in sized:
        full = lists[ev["compile_id"]]
        assert ev["total"] == len(full) == int(ev["compile_id"].split("/")[1])
        assert ev["reasons"][0] == full[0] == firsts[ev["compile_id"]]
        assert all(r in full for r in ev["reasons"])
        assert sum(ev["counts"]) == min(len(full), guard_reasons.EXAMINED)
    listed = {c["compile_id"]: c["reason"] for c in rep["compiles"]}
    assert all(listed[cid] == firsts[cid] for cid in lists)
    (frame,) = rep["frames"]
    assert frame["recompiles"] == RECOMPILES and len(frame["recompile_reasons"]) == RECOMPILES
    (finding,) = [f for f in rep["findings"] if f["rule"] == "scalar-recompiles"]
    assert f"recompiled {RECOMPILES}× on the Python number 'k'" in finding["title"]
    assert "also failed: k == 3; k == 2; k == 1 …" in finding["evidence"][4]

    # a recording of the same run with the whole lists (an older agent's) reads the same
    old = str(tmp_path / "old.jsonl")
    as_old_recording(run.recording, lists, old)
    out = ctmon("report", old, "--json")
    assert out.returncode == 0, out.stderr
    old_rep = json.loads(out.stdout)
    assert max(n for n, _ in reasons_events(old)) > LINE_CAP  # the size this run has without the fix
    for key in ("compile", "frames", "compiles", "findings"):
        assert old_rep[key] == rep[key], key


# ---------------------------------------------------------------- unit level

SRC = '  # return x * k  # t.py:10 in scale\nUser stack trace:\n  File "t.py", line 10, in scale\n    return x * k'


def k_reasons(n: int) -> list[str]:
    """What PyTorch lists on the n-th recompile of a frame guarded on ``k``: newest version first."""
    return [f"0/{v}: k == {v}{' ' * (40 - len(str(v)))}{SRC}" for v in reversed(range(n))]


def size_reasons(n: int) -> list[str]:
    return [f"0/{v}: tensor 'x' size mismatch at index 0. expected {v + 2}, actual {n + 2}" for v in reversed(range(n))]


MIXED = [
    "0/9: len(kwargs) == 9  # return func(*args, **kwargs)  # transformers/utils/generic.py:940 in wrapper",
    *[
        f"0/{v}: tensor 'kwargs['input_ids']' size mismatch at index 1. expected {v + 3}, actual 40"
        for v in range(8, 0, -1)
    ],
    "0/0: 2 <= L['x'].size()[0]  # y = x * 2  # t.py:3 in f",
]
RANGE_FIRST = [
    "0/5: 2 <= L['x'].size()[0]  # y = x * 2  # t.py:3 in f",
    *[f"0/{v}: tensor 'x' size mismatch at index 1. expected {v}, actual 7" for v in range(4, 1, -1)],
    *[f"0/{v}: tensor 'x' size mismatch at index 0. expected {v + 8}, actual 1" for v in range(1, -1, -1)],
]


def test_a_kind_of_failure_is_kept_once_with_its_count():
    kept, counts = guard_reasons.summarize(k_reasons(500))
    # the first few as they are (a finding's "also failed"), the rest counted under the first
    assert kept == k_reasons(500)[: guard_reasons.HEAD]
    assert counts == [guard_reasons.EXAMINED - guard_reasons.HEAD + 1] + [1] * (guard_reasons.HEAD - 1)
    kept, counts = guard_reasons.summarize(MIXED)
    assert [kept.index(r) for r in (MIXED[0], MIXED[1], MIXED[-1])] == [0, 1, len(kept) - 1]
    assert sum(counts) == len(MIXED)
    # dims and names stay apart, values and padding do not
    assert guard_reasons.kind_of(RANGE_FIRST[1]) != guard_reasons.kind_of(RANGE_FIRST[-1])
    assert guard_reasons.kind_of(k_reasons(12)[0]) == guard_reasons.kind_of(k_reasons(12)[5])


def test_what_is_kept_is_bounded_whatever_the_reasons():
    huge = [f"0/{v}: tensor 'x{v}' size mismatch at index 0. expected {v}, actual 1" + "y" * 3000 for v in range(300)]
    for reasons in (k_reasons(5000), size_reasons(5000), huge):
        kept, counts = guard_reasons.summarize(reasons)
        assert len(kept) <= 1 + guard_reasons.MAX_KINDS + guard_reasons.HEAD
        assert sum(len(r) for r in kept) <= guard_reasons.TEXT_BUDGET + len(reasons[0])
        assert len(counts) == len(kept) and sum(counts) <= guard_reasons.EXAMINED
        assert guard_reasons.summarize(kept)[0] == kept  # kept again as it is


def _record(failures: list[str]) -> CompileRecord:
    return CompileRecord("0/99", 0, 0.0, recompile_reason=failures[0], guard_failures=failures)


def test_findings_read_the_same_from_the_kinds_as_from_the_whole_list():
    """The cause, the "also failed" evidence and the size a range guard
    refused, from the kept reasons, are what the whole list (the newest 64,
    as the store always read) gives."""
    for reasons in (k_reasons(300), size_reasons(300), MIXED, RANGE_FIRST, MIXED * 20):
        full = reasons[: guard_reasons.EXAMINED]
        kept, _ = guard_reasons.summarize(reasons)
        g = G.cause(full)
        assert G.cause(kept) == g
        assert R._ev(_record(kept), g) == R._ev(_record(full), g)
        assert _size_beside(kept, g) == _size_beside(full, g)
    assert _size_beside(RANGE_FIRST, G.cause(RANGE_FIRST)) == "1"


def _fold(ev: dict[str, Any]) -> CompileRecord:
    s = Session()
    s.apply({"kind": "compile_start", "t": 1.0, "compile_id": "0/300", "frame_id": 0, "name": "scale"})
    s.apply({"t": 1.5, "compile_id": "0/300", "frame_id": 0, **ev})
    s.apply({"kind": "compile", "t": 2.0, "compile_id": "0/300", "frame_id": 0, "recompile_reason": "0/299: k == 299"})
    assert s.bad_events == 0
    return s.compile.frames[0].compiles[-1]


def test_an_old_recordings_whole_list_folds_as_the_agent_sends_it_now():
    from ctmon.agent.trace_convert import recompile_reasons

    whole = k_reasons(300)
    payload = "[\n" + ",\n".join(json.dumps(r) for r in whole) + "\n]"  # PyTorch's own layout
    new = _fold({"kind": "recompile_reasons", **recompile_reasons(payload)})
    old = _fold({"kind": "recompile_reasons", "reasons": whole})
    assert new.guard_failures == old.guard_failures == whole[: guard_reasons.HEAD]
    assert new.guard_counts == old.guard_counts and new.versions_failed == old.versions_failed == 300
    assert len(json.dumps(recompile_reasons(payload))) < LINE_CAP


def test_a_writer_that_sends_too_many_reasons_or_counts_is_held_to_the_bound():
    rec = _fold({"kind": "recompile_reasons", "reasons": ["0/0: a"] * 500, "counts": [1, 2], "total": 3})
    assert len(rec.guard_failures) == 1 + guard_reasons.MAX_KINDS + guard_reasons.HEAD
    assert rec.guard_counts[:3] == [1, 2, 1] and rec.versions_failed == sum(rec.guard_counts)


def test_the_frame_detail_lists_the_kinds_and_says_how_many_versions_failed():
    from ctmon.store.compile_state import CompileState
    from ctmon.tui.context import ViewContext
    from ctmon.tui.details import frame_detail

    s = Session()
    s.apply({"kind": "compile_start", "t": 1.0, "compile_id": "0/300", "frame_id": 0, "name": "scale"})
    s.apply({"kind": "recompile_reasons", "t": 1.5, "compile_id": "0/300", "frame_id": 0, "reasons": k_reasons(300)})
    s.apply({"kind": "compile", "t": 2.0, "compile_id": "0/300", "frame_id": 0, "recompile_reason": k_reasons(300)[0]})
    assert isinstance(s.compile, CompileState)
    text = frame_detail(s.compile.frames[0], ViewContext(session=s)).plain
    assert text.count("- version 0/") == guard_reasons.HEAD
    assert "(300 versions failed: the first few, one of each kind listed)" in text
