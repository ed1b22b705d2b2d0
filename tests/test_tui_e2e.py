"""``ctmon attach`` in a real terminal (tmux): while the job still runs the
screen shows a recompile reason, a graph break's file:line, step times in
ms, the GPU and CPU panels and the cache figures; ``q`` then confirming
stops the job and leaves a clean shell."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from helpers import ROOT, short_tmux_dir

WORKLOAD = os.path.join(ROOT, "tests", "workloads", "tui_slow_recompiles.py")
PROMPT = "E2E-READY$ "

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


def _break_line() -> int:
    with open(WORKLOAD) as f:
        for n, line in enumerate(f, 1):
            if "# BREAK:print" in line:
                return n
    raise AssertionError("no BREAK marker in the workload")


class Tmux:
    def __init__(self, tmpdir: str) -> None:
        self.socket = f"ctmon-e2e-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.dir = short_tmux_dir(tmpdir)
        self.env = dict(os.environ, TMUX_TMPDIR=self.dir)
        self.env.pop("TMUX", None)

    def __call__(self, *args: str) -> str:
        proc = subprocess.run(
            ["tmux", "-L", self.socket, *args], env=self.env, capture_output=True, text=True, timeout=30
        )
        if proc.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "e2e")

    def joined(self) -> str:
        """The screen with wrapped lines joined (long paths wrap at the pane's width)."""
        return self("capture-pane", "-p", "-J", "-t", "e2e")

    def wait_for(self, predicate, timeout: float, what: str) -> str:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what}; the screen was:\n{text}")

    def start_shell(self, width: int, height: int) -> None:
        """A bash in a fresh session of that size, with the test's ctmon environment, at the prompt in ROOT."""
        env_pass = {
            "CTMON_RUNTIME_DIR": os.environ["CTMON_RUNTIME_DIR"],
            "XDG_STATE_HOME": os.environ["XDG_STATE_HOME"],
            "PYTHONPATH": ROOT,
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
            env_pass["TORCHINDUCTOR_CACHE_DIR"] = os.environ["TORCHINDUCTOR_CACHE_DIR"]
        args = ["new-session", "-d", "-s", "e2e", "-x", str(width), "-y", str(height)]
        for k, v in env_pass.items():
            args += ["-e", f"{k}={v}"]
        self(*args, "bash --norc --noprofile")
        self("send-keys", "-t", "e2e", f"export PS1='{PROMPT}'; cd {ROOT} && clear", "Enter")
        self.wait_for(lambda s: PROMPT.strip() in s, 15, "the shell prompt")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env, capture_output=True, timeout=30)
        if self.dir.startswith("/tmp/ctx-"):
            shutil.rmtree(self.dir, ignore_errors=True)


def _events(path: str) -> list[dict]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is not running
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return True


@pytest.mark.slow
def test_attach_live_then_q_stops_the_job(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rec = str(tmp_path / "live.jsonl")
    tmux_dir = tmp_path / "tmux"
    tmux_dir.mkdir()
    tm = Tmux(str(tmux_dir))
    job_pid = None
    try:
        tm.start_shell(160, 48)
        tm("send-keys", "-t", "e2e", f"{sys.executable} -m ctmon attach -o {rec} {WORKLOAD} 90", "Enter")

        where = f"tui_slow_recompiles.py:{_break_line()}"
        checks = {
            "a recompile reason": lambda s: re.search(r"tensor '\w+' size mismatch", s),
            "the graph break's file:line": lambda s: where in s,
            "step times in ms": lambda s: re.search(r"p50 [\d.]+ ms", s) and re.search(r"last [\d.]+ ms", s),
            "the GPU panel": lambda s: "─ GPU" in s and ("no GPU:" in s or re.search(r"util +\d+%", s)),
            "the CPU panel": lambda s: "─ Process" in s and re.search(r"CPU \d+% of \d+", s),
            "the cache figures": lambda s: re.search(
                r"cache FX graph \d+ hit / \d+ miss · AOTAutograd \d+ hit / \d+ miss", s
            ),
            "the running state": lambda s: "● running" in s,
        }

        def all_shown(s: str) -> bool:
            return all(check(s) for check in checks.values())

        try:
            screen = tm.wait_for(all_shown, 90, "the live screen")
        except AssertionError:
            last = tm.screen()
            missing = [name for name, check in checks.items() if not check(last)]
            raise AssertionError(f"not shown: {missing}\n{last}") from None
        events = _events(rec)
        assert not any(e["kind"] == "exit" for e in events), "the job ended before the screen showed everything"
        job_pid = next(e["job_pid"] for e in events if e["kind"] == "session")
        assert _alive(job_pid), "the script must still be running"
        assert "RECOMPILE" in screen and "BREAK" in screen  # the event log, colour-coded and worded

        tm("send-keys", "-t", "e2e", "q")
        tm.wait_for(lambda s: "Stop the job?" in s, 15, "the stop-the-job question")
        tm("send-keys", "-t", "e2e", "y")
        final = tm.wait_for(
            lambda s: s.rstrip().endswith(PROMPT.rstrip()) and "was killed by SIGTERM" in s, 30, "a clean shell prompt"
        )
        # a clean shell: the TUI's screen is gone, the terminal modes are back
        assert "╭─ Steps" not in final and "─ Compilation" not in final
        assert tm("display-message", "-p", "-t", "e2e", "#{alternate_on}").strip() == "0"
        assert tm("display-message", "-p", "-t", "e2e", "#{mouse_any_flag}").strip() == "0"
        # the path as the shell's directory (ROOT) reaches it, relative when shorter
        shown = [ln.split()[2] for ln in tm.joined().splitlines() if ln.startswith("ctmon: recording: ")]
        assert [os.path.normpath(os.path.join(ROOT, p)) for p in shown] == [rec], final
        exits = [e for e in _events(rec) if e["kind"] == "exit"]
        assert exits and exits[0]["signal"] == "SIGTERM"
        deadline = time.monotonic() + 10
        while _alive(job_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(job_pid), "the job was not stopped"
    finally:
        tm.kill()
        if job_pid is not None and _alive(job_pid):
            try:
                os.kill(job_pid, 9)
            except OSError:
                pass
