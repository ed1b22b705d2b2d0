"""Shared fixtures.

Test files sort by the room of ctmon they test: ``test_<room>_<topic>.py``,
the room one of agent, launch, wire, read, store, findings, tui, report and
words as in ctmon/, and ``whole`` for what runs across them (the demos, the
fault suite, ranks, the program left unchanged). A test that runs a real job
(a subprocess with torch.compile, torchrun, tmux) is marked ``slow``:
``pytest -m "not slow"`` is the fast loop, and CI runs everything.

Every test runs ctmon against real ``torch.compile`` in subprocesses. To keep
CI fast: one Inductor cache dir for the whole session (Inductor's first
compile on a CPU builds a precompiled header that later compiles reuse),
``backend="eager"``/``"aot_eager"`` wherever Inductor itself is not the
point, and private runtime/state dirs so tests never touch the user's own.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

_SESSION_TMP = tempfile.mkdtemp(prefix="ctmon-tests-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_SESSION_TMP, "inductor"))
os.environ["CTMON_RUNTIME_DIR"] = os.path.join(_SESSION_TMP, "run")
os.environ["XDG_STATE_HOME"] = os.path.join(_SESSION_TMP, "state")
os.environ.setdefault("PYTHONUNBUFFERED", "1")
# Keep torch quiet and deterministic in subprocesses.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Inductor on a CPU otherwise checks, in every process, that the compiler
# builds and loads code for each vector ISA the CPU names: a few C++ builds
# per new cache dir (about 10 s of a cold compile here) and a Python child
# per ISA in every process, warm ones too. The tests' jobs trust the CPU's
# flags instead; what ctmon records (compiles, cache hits and misses) is the same.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")

# A signal ignored here stays ignored in every job a test starts (an exec
# keeps SIG_IGN): run under nohup (SIGHUP) or as a shell's background job
# (SIGINT, SIGQUIT), the signal tests' jobs would not end by the signals
# they are sent. The suite starts its jobs as a terminal would.
for _sig in (signal.SIGHUP, signal.SIGQUIT):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, signal.SIG_DFL)
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def workloads() -> str:
    return os.path.join(ROOT, "tests", "workloads")


# Test files by the time they took, longest first (a run of the whole suite
# on 2 shared cores, 2026-11-27; the files added that day placed by their
# own runs). xdist hands whole files to its workers in collection order: a
# long file collected last would leave one worker running it alone at the
# end, so the long ones go first and the short ones fill in after them.
LONGEST_FIRST = (
    "test_report_bench_verdicts.py",
    "test_whole_faults.py",
    "test_whole_demos.py",
    "test_launch_join_ranks.py",
    "test_whole_program_unchanged.py",
    "test_agent_generation.py",
    "test_launch_launcher.py",
    "test_report_bench.py",
    "test_findings_advice_levers.py",
    "test_report_diff_inputs.py",
    "test_report_diff.py",
    "test_findings_hf.py",
    "test_findings.py",
    "test_findings_advice_fixes.py",
    "test_launch_join_pid.py",
    "test_agent_hook_steps.py",
    "test_findings_advice_breaks.py",
    "test_read_torch_trace_input.py",
    "test_report_diff_settings.py",
    "test_tui_terminal_safety.py",
    "test_agent_hotness.py",
    "test_findings_generate_eager.py",
    "test_whole_ranks.py",
    "test_findings_advice_guards.py",
    "test_report_since_base.py",
    "test_tui_since_base.py",
    "test_findings_unseen_work.py",
    "test_wire_fuzz.py",
    "test_tui_app.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files of LONGEST_FIRST first, in its order; the others after
    them as collected; within a file, its own order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n N`` alone: whole test files to a worker (``--dist loadfile``).

    Many files make their recordings of real jobs once, in a module-scoped
    fixture; xdist's default ``load`` hands a file's tests to both workers
    and each would make them again. A ``--dist`` given on the command line
    (or in PYTEST_ADDOPTS) is kept."""
    given = [*config.invocation_params.args, *os.environ.get("PYTEST_ADDOPTS", "").split()]
    chosen = config.getoption("distload") or any(a == "--dist" or a.startswith("--dist=") for a in given)
    if config.getoption("dist") != "load" or chosen:
        return None
    from xdist.scheduler import LoadFileScheduling

    return LoadFileScheduling(config, log)


@pytest.fixture(scope="session")
def graph_breaks_trace(tmp_path_factory: pytest.TempPathFactory) -> str:
    """PyTorch's own TORCH_TRACE of tests/workloads/graph_breaks.py run with
    plain ``python``: made once per worker for every test that reads such a
    trace (read it, copy it; never write into it)."""
    import subprocess

    from helpers import env_with, workload

    trace = str(tmp_path_factory.mktemp("graph-breaks-trace") / "trace")
    out = subprocess.run(
        [sys.executable, workload("graph_breaks.py")],
        env=env_with(TORCH_TRACE=trace),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return trace
