"""ctmon never changes the program it watches.

Each workload runs twice: with plain ``python`` and under ``ctmon record``,
both with TORCH_TRACE. PyTorch's own trace of the two runs must agree on what
was compiled (compile ids, frames, recompile and failure reasons, op and guard
counts), on every graph break (site and reason), and no ctmon frame may appear
in any stack Dynamo recorded from the script down; no warning may differ.
ctmon must still record the loop's steps.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from helpers import env_with, record, workload
from trace_shape import TraceShape, from_script, read_trace_shape

pytestmark = pytest.mark.slow  # each workload run twice, plainly and under ctmon record

SCRIPT = workload("unchanged.py")
# ctmon's own files, by where the package lives: a substring test would also
# match torch's files in a venv under a directory named e.g. "ctmon-ci.X".
CTMON_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ctmon") + os.sep
STEPS = 6
# workload -> where ctmon's step boundaries come from
WORKLOADS = {
    "opt_step": "optimizer",  # torch.compile(opt.step): the compiled step is the optimizer's
    "ddp": "optimizer",
    "submodules": "optimizer",
    "nested": "optimizer",  # a compiled submodule inside a compiled model
    "hooks": "compiled_call",
    "checkpoint": "optimizer",
    "function": "compiled_call",
    "module_compile": "compiled_call",  # Module.compile(): torch.compile of its _call_impl
}
LOG_PREFIX = re.compile(r"^(\[rank\d+\]:)?[DIWEV]\d{4} [\d:.]+ +\d+ ")


def _warnings(stderr: str) -> list[str]:
    return sorted(LOG_PREFIX.sub("", line) for line in stderr.splitlines() if "arning" in line)


def _stack_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("STACK ")]


def _names_ctmon(line: str) -> bool:
    """Whether a line of the job's stderr speaks of ctmon, not counting the
    directories that hold the checkout or the environment (either may be
    named after ctmon)."""
    root = os.path.dirname(CTMON_DIR.rstrip(os.sep))
    return "ctmon" in line.replace(sys.prefix, "").replace(root, "")


def _ctmon_frames(shape: TraceShape) -> list[str]:
    bad = []
    for cid, stack in shape.start_stacks.items():
        for filename, line, name in from_script(stack, SCRIPT):
            if os.path.abspath(filename).startswith(CTMON_DIR) or name.startswith("ctmon_"):
                bad.append(f"{cid}: {filename}:{line} in {name}")
    for cid, lines in shape.metric_stacks.items():
        script_at = next((i for i, s in enumerate(lines) if "Name: <module>," in s and SCRIPT in s), 0)
        bad += [f"{cid}: {s}" for s in lines[script_at:] if CTMON_DIR in s or "Name: ctmon_" in s]
    return bad


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A workload run with plain ``python`` and TORCH_TRACE: (the process, its
    trace dir), each workload run once for every test here that needs it."""
    done: dict[str, tuple[subprocess.CompletedProcess[str], str]] = {}

    def run(name: str) -> tuple[subprocess.CompletedProcess[str], str]:
        if name not in done:
            trace = str(tmp_path_factory.mktemp(f"plain-{name}") / "plain_trace")
            proc = subprocess.run(
                [sys.executable, SCRIPT, name, str(STEPS)],
                capture_output=True,
                text=True,
                env=env_with(TORCH_TRACE=trace),
                timeout=300,
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
            done[name] = (proc, trace)
        return done[name]

    return run


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_trace_under_ctmon_equals_the_plain_runs(tmp_path, name, plain_run):
    plain, plain_dir = plain_run(name)
    run = record(tmp_path / "ctmon", [SCRIPT, name, str(STEPS)], options=["-q"])
    assert run.returncode == 0, run.proc.stderr[-3000:]
    assert run.trace_dir is not None

    want, got = read_trace_shape(plain_dir), read_trace_shape(run.trace_dir)
    assert want.compiles, "the plain run compiled nothing: the workload tests nothing"
    assert [c.compile_id for c in got.compiles] == [c.compile_id for c in want.compiles]
    assert got.compiles == want.compiles
    assert got.breaks == want.breaks
    assert sorted(got.start_stacks) == sorted(want.start_stacks)
    assert _ctmon_frames(got) == []
    assert _ctmon_frames(want) == []  # the check itself finds nothing where ctmon never was
    assert not [line for line in run.proc.stderr.splitlines() if _names_ctmon(line)], run.proc.stderr[-3000:]
    assert _warnings(run.proc.stderr) == _warnings(plain.stderr)
    # inspect.stack() inside a compiled call, where the workload prints it
    assert bool(_stack_lines(plain.stdout)) == (name == "function")
    assert _stack_lines(run.proc.stdout) == _stack_lines(plain.stdout)

    assert f"LOOP_STEPS {STEPS}" in run.proc.stdout
    steps = run.report()["steps"]
    assert steps["source"] == WORKLOADS[name]
    assert steps["count"] == STEPS


def test_the_comparison_sees_a_changed_program(tmp_path, plain_run):
    """The check above is not blind: a hook Dynamo traces into (what ctmon once
    installed) shows up as an extra graph break at the hook's own line."""
    hook = tmp_path / "hook.py"
    hook.write_text(
        "import time, runpy, sys\n"
        "from torch.optim.optimizer import register_optimizer_step_post_hook\n"
        "register_optimizer_step_post_hook(lambda opt, args, kwargs: time.perf_counter_ns())\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    out = subprocess.run(
        [sys.executable, str(hook), SCRIPT, "opt_step", str(STEPS)],
        capture_output=True,
        text=True,
        env=env_with(TORCH_TRACE=str(tmp_path / "hooked")),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    plain, hooked = read_trace_shape(plain_run("opt_step")[1]), read_trace_shape(str(tmp_path / "hooked"))
    assert len(hooked.breaks) == len(plain.breaks) + 1
    assert any(os.path.basename(b.site) == "hook.py:3" for b in hooked.breaks), hooked.breaks


def test_optimizer_hook_folds_away_where_dynamo_traces_it(tmp_path, plain_run):
    """Compiled without torch.compile (torch._dynamo.optimize), the step runs
    with ctmon's optimizer hook registered and Dynamo inlines it: the hook's
    is_compiling() check folds it away -- no graph break, no warning, the same
    frames compiled. (That frame's guards then include the hook dict's one
    entry, and ctmon counts no steps from such a call: see RELIABILITY.md.)"""
    name = "opt_step_dynamo_optimize"
    plain, plain_dir = plain_run(name)
    run = record(tmp_path / "ctmon", [SCRIPT, name, str(STEPS)], options=["-q"])
    assert run.returncode == 0, run.proc.stderr[-3000:]
    assert run.trace_dir is not None
    want, got = read_trace_shape(plain_dir), read_trace_shape(run.trace_dir)
    assert want.breaks, "the optimizer's own graph break is the premise"
    assert got.breaks == want.breaks
    key = [(c.compile_id, c.co_name, c.fail_type, c.fail_reason, c.recompile_reason) for c in want.compiles]
    assert [(c.compile_id, c.co_name, c.fail_type, c.fail_reason, c.recompile_reason) for c in got.compiles] == key
    assert _ctmon_frames(got) == []
    assert _warnings(run.proc.stderr) == _warnings(plain.stderr)
