"""Shared fixtures.

Every test runs ctmon against real ``torch.compile`` in subprocesses. To keep
CI fast: one Inductor cache dir for the whole session (Inductor's first
compile on a CPU builds a precompiled header that later compiles reuse),
``backend="eager"``/``"aot_eager"`` wherever Inductor itself is not the
point, and private runtime/state dirs so tests never touch the user's own.
"""

from __future__ import annotations

import os
import sys
import tempfile

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


@pytest.fixture
def workloads() -> str:
    return os.path.join(ROOT, "tests", "workloads")
