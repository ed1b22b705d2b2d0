"""A job that fails under ``ctmon attach`` leaves its traceback in the
terminal, as ``python script.py`` would: once the TUI has closed, a real
terminal (tmux) shows the traceback, then where the job's whole output is,
then ctmon's summary. Also the pure part: which of stderr's lines are the
traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from test_tui_e2e import PROMPT, Tmux, _events

from ctmon.store.job_error import last_traceback

SYNTAX_ERROR = "import sys\ndef broken(:\n    pass\n"
RAISES_AT_STEP_3 = """\
import torch

model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 6):
    print(f"step {step}", flush=True)
    if step == 3:
        raise RuntimeError("boom at step 3")
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def _stderr_of(code: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return proc.stderr.splitlines()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "first", "last"),
    [
        ("def f(:\n  pass", '  File "<string>", line 1', "SyntaxError: invalid syntax"),
        ("print('noise')\nraise ValueError('x')", "Traceback (most recent call last):", "ValueError: x"),
        (
            "try:\n  1/0\nexcept Exception as e:\n  raise KeyError('k') from e",
            "Traceback (most recent call last):",
            "KeyError: 'k'",
        ),
        ("import sys\nsys.stderr.write('a\\nb\\n')\nsys.exit(3)", "log 12", "b"),
    ],
    ids=["syntax-error", "exception", "chained", "no-traceback"],
)
def test_the_traceback_is_the_last_one_on_stderr_with_its_chain(code: str, first: str, last: str) -> None:
    # a traceback the job printed and went on from, long before its end
    earlier = ["Traceback (most recent call last):", '  File "x.py", line 1, in f', "OldError: x"]
    lines = last_traceback([*earlier, *(f"log {i}" for i in range(20)), *_stderr_of(code), ""])
    assert lines[0] == first and lines[-1] == last, lines
    assert "OldError: x" not in lines
    if "from e" in code:
        assert any("ZeroDivisionError" in line for line in lines)  # the cause, as Python prints it


def test_a_deep_traceback_keeps_its_head_and_tail() -> None:
    frames = [f'  File "x.py", line {i}, in f' for i in range(500)]
    lines = last_traceback(["Traceback (most recent call last):", *frames, "RecursionError: too deep"])
    assert lines[0].startswith("Traceback") and lines[-1] == "RecursionError: too deep"
    assert len(lines) <= 60 and "lines of the traceback" in lines[1]


pytestmark_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


def _wait_for_exit(rec: str, timeout: float) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exits = [e for e in _events(rec) if e.get("kind") == "exit"]
        if exits:
            return exits[0]
        time.sleep(0.2)
    raise AssertionError(f"the job did not exit within {timeout} s")


def _quit(tm: Tmux) -> None:
    """``q`` until the shell is back: again while the TUI still holds the
    screen (a first ``q`` may close a view the failure opened), never into the shell."""
    deadline = time.monotonic() + 60
    sent = 0.0
    while time.monotonic() < deadline:
        tui_up = tm("display-message", "-p", "-t", "e2e", "#{alternate_on}").strip() == "1"
        if not tui_up and tm.screen().rstrip().endswith(PROMPT.rstrip()):
            return
        if tui_up and time.monotonic() - sent > 10:
            tm("send-keys", "-t", "e2e", "q")
            sent = time.monotonic()
        time.sleep(0.25)
    raise AssertionError(f"the TUI did not give the terminal back:\n{tm.screen()}")


@pytest.mark.slow
@pytestmark_tmux
@pytest.mark.parametrize(
    ("script", "last_line"),
    [(SYNTAX_ERROR, "SyntaxError: invalid syntax"), (RAISES_AT_STEP_3, "RuntimeError: boom at step 3")],
    ids=["syntax-error", "raises-at-step-3"],
)
def test_attach_leaves_the_failed_jobs_traceback_in_the_terminal(tmp_path, script: str, last_line: str) -> None:  # type: ignore[no-untyped-def]
    job = tmp_path / "job.py"
    job.write_text(script)
    rec = str(tmp_path / "run.jsonl")
    tmux_dir = tmp_path / "tmux"
    tmux_dir.mkdir()
    tm = Tmux(str(tmux_dir))
    try:
        tm.start_shell(100, 30)
        tm("send-keys", "-t", "e2e", f"{sys.executable} -m ctmon attach -o {rec} {job}", "Enter")
        exit_ev = _wait_for_exit(rec, 120)
        assert exit_ev.get("code") == 1
        tm.wait_for(lambda s: "exited" in s or "code 1" in s, 30, "the TUI to show the job's end")
        _quit(tm)
        text = tm("capture-pane", "-p", "-J", "-S", "-100", "-t", "e2e")
        lines = [ln.rstrip() for ln in text.splitlines()]
        log_line = f"ctmon: the job's whole output: {rec[: -len('.jsonl')]}.output.log"
        assert last_line in lines, text
        assert log_line in lines, text
        summary = next(i for i, ln in enumerate(lines) if ln.startswith("ctmon: python") and "exited with code 1" in ln)
        # python's order: the traceback, then where the rest is, then ctmon's own words
        assert lines.index(last_line) < lines.index(log_line) < summary, text
        assert os.path.exists(log_line.split(": ", 2)[2])
        if script is RAISES_AT_STEP_3:
            assert "Traceback (most recent call last):" in lines, text
        else:
            assert f'  File "{job}", line 2' in lines, text
    finally:
        tm.kill()
