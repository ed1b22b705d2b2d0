"""What a ctmon-launched job costs to start, with ctmon's sources compiled or not.

Many CI images set PYTHONDONTWRITEBYTECODE, so no process caches what it
compiles: every ctmon process (the command, the supervisor, the agent inside
the job) compiles the ctmon modules it imports again. .ci/run compiles them
once before the tests. This measures what that saves: the CPU seconds (user +
system, the job included) of ``ctmon record -q -- python -c pass``, with
PYTHONDONTWRITEBYTECODE=1, from two copies of the ctmon package: one with its
bytecode compiled (``compileall``), one without. The arms are interleaved.

    python benchmarks/startup_bytecode.py --reps 10
"""

from __future__ import annotations

import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from harness import ROOT, median_ci, parser, spread_text


def cpu_seconds(pythonpath: str, out_dir: str) -> float:
    """User + system CPU of one ``ctmon record`` of an empty job (its children included)."""
    environ = dict(os.environ, PYTHONPATH=pythonpath, PYTHONDONTWRITEBYTECODE="1")
    rec = os.path.join(out_dir, "r.jsonl")
    cmd = [sys.executable, "-m", "ctmon", "record", "-q", "-o", rec, "--", sys.executable, "-c", "pass"]
    # cwd: out of the checkout, whose own ctmon ``python -m`` would import first
    proc = subprocess.Popen(cmd, env=environ, cwd=out_dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, rusage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"ctmon record failed: {err[-500:]}")
    return rusage.ru_utime + rusage.ru_stime


def copy_of_ctmon(where: str, compiled: bool) -> str:
    """A directory holding a copy of the ctmon package (its sources only), compiled or not."""
    shutil.copytree(
        os.path.join(ROOT, "ctmon"), os.path.join(where, "ctmon"), ignore=shutil.ignore_patterns("__pycache__")
    )
    if compiled and not compileall.compile_dir(os.path.join(where, "ctmon"), quiet=1):
        raise SystemExit("compileall failed")
    return where


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--reps", type=int, default=10, help="runs of each arm (interleaved)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        arms = {
            "source": copy_of_ctmon(os.path.join(tmp, "source"), compiled=False),
            "compiled": copy_of_ctmon(os.path.join(tmp, "compiled"), compiled=True),
        }
        got: dict[str, list[float]] = {name: [] for name in arms}
        for i in range(args.reps):
            for name in list(arms) if i % 2 == 0 else list(reversed(arms)):
                got[name].append(cpu_seconds(arms[name], tmp))
    for name, xs in got.items():
        med, lo, hi = median_ci(xs)
        print(f"{name:9s} CPU {spread_text(xs)}  median {med:.3f} s, 95 % interval [{lo:.3f}, {hi:.3f}]")
    saved = statistics.median(got["source"]) - statistics.median(got["compiled"])
    print(f"saved per ctmon-launched job: {saved:.3f} s of CPU (medians)")


if __name__ == "__main__":
    main()
