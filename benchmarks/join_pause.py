"""How long is a job stopped while ``ctmon record --pid`` joins it, and what
does its step cost once joined?

    python benchmarks/join_pause.py join --reps 5
    python benchmarks/join_pause.py gdb --reps 5

``join``: a job (plain python + torch, a tiny MLP compiled with
``backend="eager"``, SGD, one thread) runs a steady step loop and stamps the
end of every step. After ``--before-s`` of steps, ``ctmon record -q --pid``
joins it; ``--after-s`` after the ``joined`` event is in the recording, the job
ends (which ends the recording). Fresh job each repetition. Per repetition:

* ``gap``: the longest time between two consecutive step ends from ctmon's
  start to 0.5 s after the ``joined`` event was seen: the stop (gdb's attach,
  the symbols it reads, the call it schedules, then the agent's start on the
  job's main thread) plus one step;
* ``second_gap``: the second-longest gap in that window: the job stops twice,
  for gdb and for the agent's start on its main thread, and the longer of
  the two is ``gap``;
* ``held``: gdb's own wall time (ctmon's "gdb held it X s" note: its start-up,
  attach, commands and detach; an upper bound of the part gdb stops the job);
* ``noise``: the longest gap in the ``--before-s`` before ctmon started, the
  machine's own stalls, for scale;
* ``before`` / ``after``: the median step before ctmon started and from 0.5 s
  after the ``joined`` event on (the same job), and their ratio.

``gdb``: where gdb's time goes. One job; each repetition runs, interleaved,
gdb with only ``info proc`` (attach and detach: ``attach``), with only the two
``sharedlibrary`` commands (libc's and libpython's symbols: ``libs``), ctmon's
commands calling by symbol (those two, then scheduling ``pass`` as the pending
call: ``symbols``) and calling by the addresses ctmon reads from /proc/PID/maps
and the libraries' ELF dynamic symbols (``addresses``, what ctmon does). Per arm: gdb's wall time and the job's longest
step gap during it.

Each figure is given as median (min-max) over the repetitions.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import harness

from ctmon.launch import join_inject as join_mod

WAIT_S = 180.0  # a compile on a busy two-core machine; every wait is bounded by it
SETTLE_S = 0.5  # after the joined event: the agent's first reads of the job's state

JOB = """
import json, os, sys, time
import torch

out, ready, end, width, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width))
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(batch, width)


def step():
    opt.zero_grad(set_to_none=True)
    compiled(x).square().mean().backward()
    opt.step()


for _ in range(5):
    step()
open(ready, "w").close()
stamps = []
deadline = time.time() + 900
while not os.path.exists(end) and time.time() < deadline:
    step()
    stamps.append(time.time())
with open(out, "w") as f:
    json.dump(stamps, f)
"""


class Job:
    """The step loop, started and past its compile."""

    def __init__(self, workdir: str, width: int, batch: int) -> None:
        self.dir = workdir
        script = os.path.join(workdir, "join_loop.py")
        with open(script, "w") as f:
            f.write(JOB)
        self.out, self.ready, self.end = (os.path.join(workdir, n) for n in ("stamps.json", "ready", "end"))
        self.proc = subprocess.Popen(
            [sys.executable, script, self.out, self.ready, self.end, str(width), str(batch)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=harness.env(),
        )
        _wait(lambda: os.path.exists(self.ready) or self.proc.poll() is not None, "the job's compile")
        if self.proc.poll() is not None:
            raise SystemExit(f"the job failed: {self.proc.stderr.read().decode()[-2000:] if self.proc.stderr else ''}")

    def finish(self) -> list[float]:
        """End the loop; the end time of every step."""
        open(self.end, "w").close()
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise SystemExit("the job did not end") from None
        with open(self.out) as f:
            return [float(t) for t in json.load(f)]


def _wait(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def _events(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line being written
    return out


def _max_gap(stamps: Sequence[float], start: float, end: float) -> float:
    """The longest time between consecutive step ends, over the steps whose
    interval overlaps [start, end]."""
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False) if b >= start and a <= end]
    return max(gaps, default=0.0)


def _second_gap(stamps: Sequence[float], start: float, end: float) -> float:
    """The second-longest such gap: the job stops twice while ctmon joins
    (gdb, then the agent's start on its main thread at the pending call)."""
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:], strict=False) if b >= start and a <= end)
    return gaps[-2] if len(gaps) > 1 else 0.0


def _median_step(stamps: Sequence[float], start: float, end: float) -> float:
    steps = [b - a for a, b in zip(stamps, stamps[1:], strict=False) if a >= start and b <= end]
    return statistics.median(steps) if steps else float("nan")


# ------------------------------------------------------------------- join


def join_once(width: int, batch: int, before_s: float, after_s: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="ctmon-join-") as d:
        job = Job(d, width, batch)
        rec = os.path.join(d, "joined.jsonl")
        ctmon: subprocess.Popen[str] | None = None
        try:
            time.sleep(before_s)  # steps before the join
            started = time.time()
            ctmon = subprocess.Popen(
                harness.ctmon_cmd("record", "-q", "--pid", str(job.proc.pid), "-o", rec),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=harness.env(),
            )
            _wait(lambda: any(e.get("kind") == "joined" for e in _events(rec)) or ctmon.poll() is not None, "joined")
            if ctmon.poll() is not None:
                raise SystemExit(f"ctmon record --pid failed: {ctmon.communicate()[1][-2000:]}")
            seen = time.time()
            time.sleep(after_s + SETTLE_S)  # steps after it
            stamps = job.finish()
            ctmon.wait(timeout=WAIT_S)  # the job's exit ends the recording
        finally:
            for p in (ctmon, job.proc):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait(timeout=30)
        held = _held_s(_events(rec))
    return {
        "gap_s": _max_gap(stamps, started, seen + SETTLE_S),
        "second_gap_s": _second_gap(stamps, started, seen + SETTLE_S),
        "held_s": held,
        "noise_s": _max_gap(stamps, started - before_s + 0.2, started),
        "before_ms": _median_step(stamps, started - before_s + 0.2, started) * 1e3,
        "after_ms": _median_step(stamps, seen + SETTLE_S, stamps[-1]) * 1e3,
    }


def _held_s(events: list[dict[str, Any]]) -> float:
    for e in events:
        message = str(e.get("message", ""))
        if e.get("kind") == "note" and "gdb held it" in message:
            return float(message.split("gdb held it ")[1].split()[0])
    return float("nan")


def cmd_join(args: Any) -> None:
    runs = [join_once(args.width, args.batch, args.before_s, args.after_s) for _ in range(args.reps)]
    for i, r in enumerate(runs):
        print(f"rep {i}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), file=sys.stderr)
    ratio = [r["after_ms"] / r["before_ms"] for r in runs]
    summary = {
        "machine": harness.machine(with_torch=False),
        "command": " ".join(["python", "benchmarks/join_pause.py", *sys.argv[1:]]),
        "gap_s": harness.spread([r["gap_s"] for r in runs]),
        "second_gap_s": harness.spread([r["second_gap_s"] for r in runs]),
        "held_s": harness.spread([r["held_s"] for r in runs]),
        "noise_s": harness.spread([r["noise_s"] for r in runs]),
        "before_ms": harness.spread([r["before_ms"] for r in runs]),
        "after_ms": harness.spread([r["after_ms"] for r in runs]),
        "after_over_before": harness.spread(ratio),
    }
    print(f"longest step gap around the join: {harness.spread_text([r['gap_s'] for r in runs])}")
    print(f"second-longest gap around it:     {harness.spread_text([r['second_gap_s'] for r in runs])}")
    print(f"gdb held it:                      {harness.spread_text([r['held_s'] for r in runs])}")
    print(f"longest gap before (noise):       {harness.spread_text([r['noise_s'] for r in runs])}")
    print(f"median step before:               {harness.spread_text([r['before_ms'] for r in runs], 'ms')}")
    print(f"median step joined:               {harness.spread_text([r['after_ms'] for r in runs], 'ms')}")
    print(f"joined / before:                  {harness.spread_text(ratio, 'x', 3)}")
    print("RESULT " + json.dumps(summary))


# -------------------------------------------------------------------- gdb


def _gdb(pid: int, commands: Sequence[str]) -> list[str]:
    argv = ["gdb", "-batch", "-nx"]
    for cmd in join_mod.GDB_INIT:
        argv += ["-iex", cmd]
    argv += ["-p", str(pid)]
    for cmd in commands:
        argv += ["-ex", cmd]
    return argv


def gdb_arms(pid: int) -> dict[str, Callable[[], list[str]]]:
    code = "pass"
    return {
        "attach": lambda: _gdb(pid, ["info proc"]),
        "libs": lambda: _gdb(pid, ["sharedlibrary libc", "sharedlibrary libpython"]),
        "symbols": lambda: _gdb(pid, join_mod.gdb_commands(code, None)),
        "addresses": lambda: _gdb(pid, join_mod.gdb_commands(code, _addresses(pid))),
    }


def _addresses(pid: int) -> dict[str, int]:
    found = join_mod.call_addresses(pid)
    if found is None:
        raise SystemExit(f"could not read the addresses of {join_mod.CALLED} in process {pid}")
    return found


def cmd_gdb(args: Any) -> None:
    if shutil.which("gdb") is None:
        raise SystemExit("needs gdb")
    with tempfile.TemporaryDirectory(prefix="ctmon-gdb-") as d:
        job = Job(d, args.width, args.batch)
        windows: dict[str, list[tuple[float, float, float]]] = {}
        try:
            time.sleep(1.0)
            arms = gdb_arms(job.proc.pid)
            for order in harness.orders(list(arms), args.reps, "rotate"):
                for name in order:
                    argv = arms[name]()  # the addresses are read before gdb starts: part of its arm
                    t0 = time.time()
                    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
                    t1 = time.time()
                    if name in ("symbols", "addresses") and "ctmon-rc 0" not in done.stdout:
                        raise SystemExit(f"{name}: gdb failed:\n{(done.stdout + done.stderr)[-2000:]}")
                    windows.setdefault(name, []).append((t0, t1, t1 - t0))
                    time.sleep(0.5)  # the job's steps between arms
            stamps = job.finish()
        finally:
            if job.proc.poll() is None:
                job.proc.send_signal(signal.SIGKILL)
                job.proc.wait(timeout=30)
    summary: dict[str, Any] = {
        "machine": harness.machine(),
        "command": " ".join(["python", "benchmarks/join_pause.py", *sys.argv[1:]]),
    }
    for name, runs in windows.items():
        walls = [w for _, _, w in runs]
        gaps = [_max_gap(stamps, t0, t1 + 0.1) for t0, t1, _ in runs]
        summary[name] = {"gdb_s": harness.spread(walls), "gap_s": harness.spread(gaps)}
        print(f"{name:10s} gdb {harness.spread_text(walls)}   longest step gap {harness.spread_text(gaps)}")
    print("RESULT " + json.dumps(summary))


def main() -> None:
    p = harness.parser(__doc__)
    sub = p.add_subparsers(dest="what", required=True)
    for name in ("join", "gdb"):
        s = sub.add_parser(name)
        s.add_argument("--reps", type=int, default=5)
        s.add_argument("--width", type=int, default=512, help="the MLP's width (sets the step time)")
        s.add_argument("--batch", type=int, default=64)
        s.add_argument("--before-s", type=float, default=2.0)
        s.add_argument("--after-s", type=float, default=2.0)
    args = p.parse_args()
    {"join": cmd_join, "gdb": cmd_gdb}[args.what](args)


if __name__ == "__main__":
    main()
