"""input() in the job: record passes ctmon's stdin through; attach gives the
job a terminal for stdin and the TUI's ``i`` types a line into it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from helpers import ROOT, env_with, short_tmux_dir
from test_tui_app import _running, run_async

from ctmon.tui.app import CtmonApp
from ctmon.tui.stdin_prompt import StdinPrompt
from ctmon.tui.testing import QueueFeed, wait_applied

ASK = (
    "import sys\n"
    "print('TTY', sys.stdin.isatty(), flush=True)\n"
    "name = input('name? ')\n"
    "print('hello', name, flush=True)\n"
)


def _events(path: str) -> list[dict]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def _output(path: str) -> str:
    return "".join(e["data"] for e in _events(path) if e["kind"] == "output")


def test_record_input_from_a_pipe_as_under_python(tmp_path):
    job = tmp_path / "ask.py"
    job.write_text(ASK)
    plain = subprocess.run(
        ["bash", "-c", f"echo bob | {sys.executable} {job}"], capture_output=True, text=True, env=env_with(), timeout=60
    )
    run = subprocess.run(
        ["bash", "-c", f"echo bob | {sys.executable} -m ctmon record -q -o {tmp_path}/r.jsonl {job}"],
        capture_output=True,
        text=True,
        env=env_with(),
        timeout=60,
    )
    assert run.returncode == plain.returncode == 0, run.stderr
    assert run.stdout == plain.stdout == "TTY False\nname? hello bob\n"


def test_attach_gives_the_job_a_terminal_and_passes_a_typed_line(tmp_path):
    """The supervisor side over its real viewer socket (what the TUI's ``i`` sends)."""
    from ctmon.launch.daemon import start_detached
    from ctmon.launch.spec import JobSpec
    from ctmon.read.feeds import SocketFeed

    job = tmp_path / "ask.py"
    job.write_text(ASK)
    rec = str(tmp_path / "r.jsonl")
    d = start_detached(JobSpec("script", str(job), cwd=str(tmp_path)), rec)
    feed = SocketFeed(d.viewer_path)
    try:
        deadline = time.monotonic() + 60
        while "name? " not in _output(rec) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "TTY True" in _output(rec)
        assert feed.send_stdin("bob\n")
        while not any(e["kind"] == "exit" for e in _events(rec)) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        feed.close()
        d.proc.wait(timeout=30)
    out = _output(rec)
    assert "hello bob" in out
    exits = [e for e in _events(rec) if e["kind"] == "exit"]
    assert exits and exits[0]["code"] == 0
    assert any(e["kind"] == "note" and "input" in e["message"] for e in _events(rec))


@run_async
async def test_i_opens_a_prompt_whose_line_goes_to_the_job() -> None:
    feed = QueueFeed()
    feed.push(_running())
    app = CtmonApp(feed, launched=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_applied(pilot, len(_running()))
        await pilot.press("i")
        assert isinstance(app.screen, StdinPrompt)
        await pilot.press("b", "o", "b", "enter")
        await pilot.pause()
        assert feed.stdin == ["bob\n"]
        assert app.screen is app.main
        await pilot.press("i", "x", "escape")  # Esc sends nothing
        await pilot.pause()
        assert feed.stdin == ["bob\n"] and app.screen is app.main


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
@pytest.mark.parametrize("cmd", ["record", "attach"])
@pytest.mark.slow
def test_input_in_a_terminal(tmp_path, cmd):
    from test_tui_e2e import Tmux

    job = tmp_path / "ask.py"
    job.write_text(ASK + "import time\ntime.sleep(0.5)\n")
    rec = str(tmp_path / "r.jsonl")
    tmux_dir = tmp_path / "tmux"
    tmux_dir.mkdir()
    tm = Tmux(short_tmux_dir(str(tmux_dir)))
    try:
        args = ["new-session", "-d", "-s", "e2e", "-x", "120", "-y", "36"]
        for k in ("CTMON_RUNTIME_DIR", "XDG_STATE_HOME"):
            args += ["-e", f"{k}={os.environ[k]}"]
        tm(*args, "-e", f"PYTHONPATH={ROOT}", "bash --norc --noprofile")
        tm(
            "send-keys",
            "-t",
            "e2e",
            f"export PS1='READY$ '; clear; {sys.executable} -m ctmon {cmd} -o {rec} {job}",
            "Enter",
        )
        deadline = time.monotonic() + 60
        while "name? " not in _output(rec) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "TTY True" in _output(rec)
        if cmd == "attach":
            tm("send-keys", "-t", "e2e", "i")
            tm.wait_for(lambda s: "Input to the job" in s, 15, "the input prompt")
        tm("send-keys", "-t", "e2e", "-l", "bob")
        tm("send-keys", "-t", "e2e", "Enter")
        while not any(e["kind"] == "exit" for e in _events(rec)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "hello bob" in _output(rec)
        if cmd == "record":
            tm.wait_for(lambda s: "hello bob" in s and "exited with code 0" in s, 15, "the job's answer")
        else:
            tm("send-keys", "-t", "e2e", "q")
            tm.wait_for(lambda s: "READY$" in s and "exited with code 0" in s, 15, "the shell")
    finally:
        tm.kill()
