"""A job of two ranks under ``ctmon attach`` in a real terminal (tmux).

torchrun starts two gloo ranks; rank 1 alone recompiles, and that compile
takes 12 s. While it runs the header says one rank is compiling and one
waiting, and the ranks view (``r``) names the frame and the rank waited for;
the critical divergence finding reaches the Alerts area while the job still
runs. A second job's rank 1 sleeps outside any compile: both ranks are said
to be stalled with nothing compiling. Each within seconds, long before any
collective would time out.
"""

from __future__ import annotations

import re
import shutil
import sys

import pytest
from helpers import workload
from test_tui_e2e import Tmux
from test_whole_ranks import free_port

SCRIPT = workload("ddp_ranks.py")

# torchrun ranks, watched live in tmux
pytestmark = [pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"), pytest.mark.slow]


def _start(tm: Tmux, rec: str, *job_args: str) -> None:
    tm.start_shell(120, 36)
    launcher = f"torchrun --nproc_per_node 2 --master_addr 127.0.0.1 --master_port {free_port()}"
    cmd = f"{sys.executable} -m ctmon attach -o {rec} -- {launcher} {SCRIPT} {' '.join(job_args)}"
    tm("send-keys", "-t", "e2e", cmd, "Enter")


def test_a_rank_compiling_and_one_waiting_are_told_apart_live(tmp_path) -> None:  # type: ignore[no-untyped-def]
    tm = Tmux(str(tmp_path))
    try:
        args = ("--diverge", "--slow-compile", "12", "--steps", "10", "--step-sleep", "0.5")
        _start(tm, str(tmp_path / "live.jsonl"), *args)
        tm.wait_for(lambda s: "2 ranks: 1 compiling, 1 waiting" in s, 90, "one rank compiling, one waiting")
        tm("send-keys", "-t", "e2e", "r")
        # Both lines at once. On a loaded machine rank 1's *first* compile can
        # outlast rank 0's by seconds, so the header may say so then; the
        # slow recompile that follows makes rank 0 wait again, for longer.
        shown = tm.wait_for(
            lambda s: (
                re.search(r"r1 +compiling Sequential for \d+ s", s) is not None
                and re.search(r"r0 +waiting \d+ s, for rank 1 \(compiling Sequential\)", s) is not None
            ),
            30,
            "the ranks view naming the compile and the rank waiting for it",
        )
        assert "● running" in shown
        tm("send-keys", "-t", "e2e", "Escape")
        # the critical finding, while the job still runs
        tm.wait_for(
            lambda s: "CRIT Ranks compiled Sequential differently" in s and "● running" in s,
            60,
            "the divergence finding while the job runs",
        )
    finally:
        tm.kill()


def test_ranks_stuck_with_nothing_compiling_are_said_to_be_stalled(tmp_path) -> None:  # type: ignore[no-untyped-def]
    tm = Tmux(str(tmp_path))
    try:
        _start(tm, str(tmp_path / "live.jsonl"), "--stall", "12", "--steps", "8")
        screen = tm.wait_for(lambda s: "2 ranks: 2 stalled" in s, 90, "both ranks stalled")
        assert "● running" in screen
    finally:
        tm.kill()
