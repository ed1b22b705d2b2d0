"""generate(): its compiled calls read as tokens, prefill apart from decode.

End to end, a tiny Llama built from a config generates under ``ctmon record``
twice -- its forward compiled by the user (dynamic cache: prefill and decode
compiled), and by transformers itself (static cache: decode only) -- and so
does a tiny T5 (an encoder-decoder, its forward compiled by the user); the
report's ``generation`` must count the tokens the script printed. The trace
PyTorch writes under ctmon must equal the plain run's (the watch wraps
nothing). The agent's watch and the store's statistics are also driven
directly, with a stand-in for transformers' GenerationMixin, so every branch
(the start of a call, where Python 3.11 has no event for it; calls outside
generate(); a job that ends inside one) runs here.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import time
import types
from typing import Any

import pytest
from helpers import WORKLOADS, assert_matches_torch_trace, env_with, read_torch_trace, record
from trace_shape import read_trace_shape

from ctmon.agent.generation import GenerationWatch
from ctmon.read.feeds import RecordingFeed
from ctmon.store import Session
from ctmon.tui.app import CtmonApp
from ctmon.tui.capture import screen_text
from ctmon.tui.testing import wait_loaded
from ctmon.wire import protocol

SCRIPT = os.path.join(WORKLOADS, "hf_generate.py")
CTMON_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ctmon") + os.sep
NEW_TOKENS = 6
CASES = {
    # user-compiled forward: every forward compiled, the first of each call is its prefill
    "dynamic": (["--cache", "dynamic", "--backend", "eager"], "compiled"),
    # transformers' own compile of the decode forward (static cache); prefill eager
    "static": (["--cache", "static", "--backend", "aot_eager"], "eager"),
    # an encoder-decoder: the encoder runs eager once per call, the decoder's forward is compiled
    "t5": (["--model", "t5", "--cache", "dynamic", "--backend", "eager"], "compiled"),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    name = request.param
    args, prefill = CASES[name]
    base = tmp_path_factory.mktemp(f"gen-{name}")
    argv = [SCRIPT, *args, "--new-tokens", str(NEW_TOKENS)]
    plain_dir = str(base / "plain_trace")
    plain = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=env_with(TORCH_TRACE=plain_dir), timeout=300
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    run = record(base / "ctmon", argv, options=["-q"])
    assert run.returncode == 0, run.proc.stderr[-3000:]
    return types.SimpleNamespace(
        name=name, prefill=prefill, plain=plain, plain_dir=plain_dir, run=run, rep=run.report()
    )


@pytest.mark.slow
def test_tokens_are_the_ones_the_script_generated(case):
    printed = [int(n) for n in re.findall(r"generated (\d+) tokens", case.run.proc.stdout)]
    assert printed == [NEW_TOKENS, NEW_TOKENS]
    g = case.rep["generation"]
    assert g is not None, case.rep["steps"]
    assert g["calls"] == 2
    assert g["tokens"] == sum(printed)
    assert g["prefill"] == case.prefill
    # each call: NEW_TOKENS - 1 decode calls, so NEW_TOKENS - 2 intervals between them,
    # less those that paid for a compile (the first decode call of a static cache
    # compiles; a dynamic cache recompiles once when it is first filled)
    assert 1 <= g["token_samples"] <= 2 * (NEW_TOKENS - 2)
    assert g["token_p50_ms"] is not None and 0 < g["token_p50_ms"] <= g["token_p90_ms"]
    if sys.version_info >= (3, 12):
        assert g["ttft_ms"] is not None and g["ttft_ms"] > 0
    else:
        assert g["ttft_ms"] is None  # no event for the start of a call without a wrapper
    # the step series still has one boundary per compiled call
    compiled_calls = 2 * (NEW_TOKENS - 1) + (2 if case.prefill == "compiled" else 0)
    assert case.rep["steps"]["count"] == compiled_calls
    assert case.rep["steps"]["source"] == "compiled_call"


@pytest.mark.slow
def test_counts_equal_torch_trace_and_the_plain_runs_trace(case):
    assert case.run.trace_dir is not None
    assert_matches_torch_trace(case.rep, read_torch_trace(case.run.trace_dir))
    want, got = read_trace_shape(case.plain_dir), read_trace_shape(case.run.trace_dir)
    assert want.compiles
    assert got.compiles == want.compiles
    assert got.breaks == want.breaks
    assert [
        f
        for stack in got.start_stacks.values()
        for f, _, name in stack
        if f.startswith(CTMON_DIR) or name.startswith("ctmon_")
    ] == []


@pytest.mark.slow
def test_reports_and_summary_speak_of_tokens(case):
    from ctmon.report.markdown import markdown
    from ctmon.report.text import full_text, summary_lines

    line = "2 generate() calls, 12 tokens (prefill " + case.prefill + ")"
    assert any(line in s for s in summary_lines(case.rep))
    assert line in full_text(case.rep).replace("\n    ", " ")
    assert line in markdown(case.rep)


@pytest.mark.slow
def test_steps_panel_shows_the_tokens(case):
    import asyncio

    async def screen() -> str:
        app = CtmonApp(RecordingFeed(case.run.recording), replay=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_loaded(pilot)
            return screen_text(app)

    text = asyncio.run(screen())
    assert "gen ×2 · 12 tok · p50 " in text, text


# ------------------------------------------------------------------ the agent's watch, directly


class _Channel:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def put(self, record: tuple[Any, ...], urgent: bool = False) -> None:
        assert record[0] == "event"
        self.events.append(record[1])


class GenerationConfig:
    pass


def _no_grad(fn):  # type: ignore[no-untyped-def]
    """Like torch.no_grad(): generate() is decorated, its code is the wrapped one's."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        return fn(*args, **kwargs)

    return wrapper


class GenerationMixin:
    """What the watch looks for, shaped like transformers' own."""

    on_start: Any = None

    @_no_grad
    def generate(self, prefill_calls: int, decode_calls: int, call: Any, fail: bool = False) -> int:
        if GenerationMixin.on_start is not None:
            GenerationMixin.on_start()  # where sys.monitoring's PY_START fires on 3.12+
        generation_config = GenerationConfig()  # noqa: F841 - each call's own copy
        self._prefill(prefill_calls, call)
        for _ in range(decode_calls):
            time.sleep(0.001)
            call()
            if fail:
                raise RuntimeError("out of memory")
        return decode_calls

    def _prefill(self, n: int, call: Any) -> None:
        for _ in range(n):
            call()


def _watch(with_start: bool = False) -> tuple[GenerationWatch, _Channel, Any]:
    ch = _Channel()
    watch = GenerationWatch(ch)  # type: ignore[arg-type]
    module = types.ModuleType("generation_utils")
    module.GenerationMixin = GenerationMixin  # type: ignore[attr-defined]
    assert watch.arm(module)
    code = GenerationMixin.generate.__wrapped__.__code__  # type: ignore[attr-defined]
    GenerationMixin.on_start = (lambda: watch._on_start(code, 0)) if with_start else None
    counter = iter(range(1000))

    def enter() -> None:  # stands for the compiled callable's enter hook
        watch.on_call(next(counter), time.perf_counter_ns())

    def call() -> None:  # stands for torch's wrapper around the compiled forward
        enter()

    return watch, ch, call


def test_watch_tells_calls_prefill_and_decode_apart():
    watch, ch, call = _watch()
    model = GenerationMixin()
    model.generate(1, 4, call)
    model.generate(0, 3, call)
    call()  # a compiled call outside generate(): no generation
    assert [(e["prefill_calls"], e["decode_calls"], e["i0"], e["i1"]) for e in ch.events] == [
        (1, 4, 1, 4),
        (0, 3, 5, 7),
    ]
    assert all(e["kind"] == protocol.GENERATION and e["ttft_ms"] is None for e in ch.events)
    assert watch._open is None


def test_watch_times_the_first_token_from_the_start_of_the_call():
    watch, ch, call = _watch(with_start=True)
    t0 = time.perf_counter()
    GenerationMixin().generate(1, 3, call)
    wall_ms = (time.perf_counter() - t0) * 1e3
    (e,) = ch.events
    # the first decode call comes after one sleep of 1 ms
    assert 1.0 <= e["ttft_ms"] <= e["ms"] <= wall_ms


def test_watch_sends_a_call_the_job_ended_inside_at_exit():
    watch, ch, call = _watch()
    with pytest.raises(RuntimeError):
        GenerationMixin().generate(0, 2, call, fail=True)
    # the traceback keeps the frame and its config alive (a debugger may look at it)
    assert ch.events == [] or ch.events[0]["decode_calls"] == 1
    watch.flush()
    assert len(ch.events) == 1 and ch.events[0]["decode_calls"] == 1


def test_watch_with_a_broken_run_of_boundaries_leaves_latency_unknown():
    watch, ch, _ = _watch()
    idx = iter([0, 1, 5, 6])

    def call() -> None:
        watch.on_call(next(idx), time.perf_counter_ns())

    GenerationMixin().generate(0, 4, call)
    assert (ch.events[0]["i0"], ch.events[0]["i1"], ch.events[0]["decode_calls"]) == (-1, -1, 4)


def test_watch_without_transformers_stays_unarmed():
    watch = GenerationWatch(_Channel())  # type: ignore[arg-type]
    assert not watch.arm(types.ModuleType("empty"))
    assert not watch.armed


# ------------------------------------------------------------------ the store


def _steps(ns: list[int], t: float = 1000.0) -> dict[str, Any]:
    return {"kind": "steps", "t": t, "src": "compiled_call", "i0": 0, "ns": ns}


def test_store_reads_token_latencies_from_the_step_series():
    s = Session()
    ms = 1_000_000
    # boundaries 0..9: a first generate() of prefill 0 + decode 1..4, a second of decode 6..9
    s.apply(_steps([0, 50 * ms, 2 * ms, 3 * ms, 4 * ms, 40 * ms, 60 * ms, 5 * ms, 6 * ms, 7 * ms]))
    s.apply(
        {
            "kind": "generation",
            "t": 1,
            "src": "compiled_call",
            "prefill_calls": 1,
            "decode_calls": 4,
            "i0": 1,
            "i1": 4,
            "ttft_ms": 55.0,
        }
    )
    s.apply(
        {
            "kind": "generation",
            "t": 2,
            "src": "compiled_call",
            "prefill_calls": 1,
            "decode_calls": 4,
            "i0": 6,
            "i1": 9,
            "ttft_ms": 65.0,
        }
    )
    g = s.generation.stats(s.steps)
    assert g is not None
    assert (g.calls, g.tokens, g.prefill_compiled, g.token_samples) == (2, 10, True, 6)
    assert g.token_p50_ms == pytest.approx(4.5, rel=1e-6)  # of 2, 3, 4, 5, 6, 7 ms
    assert (g.ttft_ms, g.ttft_max_ms) == (60.0, 65.0)
    # the last call only
    last = s.generation.stats(s.steps, last=1)
    assert last is not None and (last.tokens, last.token_samples, last.ttft_ms) == (5, 3, 65.0)
    # intervals that paid for a compile are left out
    t = s.steps.current.times  # type: ignore[union-attr]
    spans = [(t[2] + 1e-6, t[3] - 1e-6)]
    g2 = s.generation.stats(s.steps, spans)
    assert g2 is not None and g2.token_samples == 5


def test_store_refuses_empty_and_negative_generations():
    s = Session()
    s.apply({"kind": "generation", "t": 1, "src": "compiled_call", "prefill_calls": 0, "decode_calls": 0})
    s.apply({"kind": "generation", "t": 1, "src": "compiled_call", "prefill_calls": -1, "decode_calls": 3})
    assert len(s.generation) == 0 and s.generation.stats(s.steps) is None
