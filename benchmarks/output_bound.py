"""What ctmon costs a job whose speed is its output.

Jobs writing SIZE MB to stdout as fast as Python can:

  text    1 MiB blocks of 100-byte ASCII lines, through ``sys.stdout.write``
  binary  1 MiB blocks of random bytes with no newline in them (not UTF-8),
          through ``sys.stdout.buffer.write``
  print   the same 100-byte lines, one ``print()`` each (a logging loop; not
          run by default: ``--kinds text,binary,print``)

each run plainly (``python job.py | cat > /dev/null``) and under ctmon
(``ctmon record -q -o r.jsonl job.py > /dev/null``), the arms interleaved
within every repetition (their order alternating). The job times its own
write loop (from its first write to its last flush: the interpreter's and
ctmon's start-up are left out) and writes that time to a side file; the
whole command's wall time is reported too, and ctmon's own CPU time (user +
system of the ``ctmon record`` process, start-up and end included, the job
left out): on a busy machine, the figure that moves least with the load.
Figures: the median and the min-max spread over the repetitions, and the
recording's size (with the output log its events point into, where a fast
writer's large chunks are kept) against the output's. PYTHONUNBUFFERED is taken out of
the environment (with it, each ``print`` is two writes).

``--tree NAME=DIR`` runs ctmon from another copy of the source (its
``ctmon`` package is put first on PYTHONPATH), e.g. the code before a change
(``git archive HEAD | tar -x -C /tmp/old``), so that old and new are measured
in one run on one machine:

  python benchmarks/output_bound.py --reps 5 --tree old=/tmp/old --tree new=.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import harness

JOB = r"""
import os, sys, time
kind, size_mb, timing = sys.argv[1], int(sys.argv[2]), sys.argv[3]
block_bytes = 1 << 20
line = ("x" * 99) + "\n"
if kind == "binary":
    raw = os.urandom(block_bytes)
    block = raw.replace(b"\n", b"\x0b")  # no newline anywhere
    write, flush = sys.stdout.buffer.write, sys.stdout.buffer.flush
else:
    block = line * (block_bytes // len(line))
    write, flush = sys.stdout.write, sys.stdout.flush
total = size_mb * 1_000_000
written = 0
t0 = time.perf_counter()
if kind == "print":
    text = line[:-1]
    for _ in range(total // len(line)):
        print(text)
    written = total // len(line) * len(line)
else:
    while written < total:
        write(block)
        written += len(block)
flush()
t1 = time.perf_counter()
with open(timing, "w") as f:
    f.write(f"{t1 - t0} {written}")
"""

# ``ctmon`` as ``python -m ctmon`` runs it, writing its own CPU time at exit.
CTMON = r"""
import atexit, os, resource, runpy, sys
def _cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["OUTPUT_BENCH_CPU"], "w") as f:
        f.write(str(r.ru_utime + r.ru_stime))
atexit.register(_cpu)
sys.argv[0] = "ctmon"
runpy.run_module("ctmon", run_name="__main__", alter_sys=True)
"""


class Figures:
    def __init__(self) -> None:
        self.job_s: list[float] = []
        self.wall_s: list[float] = []
        self.cpu_s: list[float] = []
        self.rec_ratio: list[float] = []


def _run(cmd: str, env: dict[str, str], timing: str) -> tuple[float, float, int]:
    """(the job's own write time, the command's wall time, bytes written)."""
    t0 = time.perf_counter()
    subprocess.run(["bash", "-c", cmd], env=env, check=True)
    wall = time.perf_counter() - t0
    with open(timing) as f:
        job_s, written = f.read().split()
    return float(job_s), wall, int(written)


def _env(tree: str | None, cpu_file: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)  # the job's stdout buffered, as a job's is unless it is told otherwise
    env["OUTPUT_BENCH_CPU"] = cpu_file
    if tree is not None:
        env["PYTHONPATH"] = os.path.abspath(tree) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def main() -> None:
    ap = harness.parser(__doc__)
    ap.add_argument("--size-mb", type=int, default=300, help="output of each job in MB (default 300)")
    ap.add_argument("--reps", type=int, default=5, help="interleaved repetitions (default 5)")
    ap.add_argument("--kinds", default="text,binary", help="text,binary,print (default text,binary)")
    ap.add_argument(
        "--tree", action="append", default=[], metavar="NAME=DIR", help="a ctmon source tree to measure (repeatable)"
    )
    ap.add_argument("--json", action="store_true", help="print the raw figures as JSON as well")
    args = ap.parse_args()
    trees = [t.split("=", 1) for t in args.tree] or [["ctmon", harness.ROOT]]
    kinds = args.kinds.split(",")
    py = shlex.quote(sys.executable)
    results: dict[str, dict[str, Figures]] = {}
    with tempfile.TemporaryDirectory(prefix="ctmon-outbench-") as tmp:
        job, wrapper = os.path.join(tmp, "job.py"), os.path.join(tmp, "ctmon_cpu.py")
        with open(job, "w") as f:
            f.write(JOB)
        with open(wrapper, "w") as f:
            f.write(CTMON)
        timing, cpu_file = os.path.join(tmp, "timing"), os.path.join(tmp, "cpu")
        rec = os.path.join(tmp, "r.jsonl")
        for rep in range(args.reps):
            for kind in kinds:
                job_cmd = f"{shlex.quote(job)} {kind} {args.size_mb} {shlex.quote(timing)}"
                arms: list[tuple[str, str, str | None]] = [("plain", f"{py} {job_cmd} | cat > /dev/null", None)]
                arms += [
                    (name, f"{py} {shlex.quote(wrapper)} record -q -o {shlex.quote(rec)} {job_cmd} > /dev/null", tree)
                    for name, tree in trees
                ]
                if rep % 2:
                    arms.reverse()  # neither arm always runs first
                for name, cmd, tree in arms:
                    job_s, wall, written = _run(cmd, _env(tree, cpu_file), timing)
                    fig = results.setdefault(kind, {}).setdefault(name, Figures())
                    fig.job_s.append(job_s)
                    fig.wall_s.append(wall)
                    line = f"rep {rep + 1} {kind:6} {name:6} job {job_s:6.2f} s  wall {wall:6.2f} s"
                    if tree is not None:
                        # the recording and the output log its events point into
                        log = rec[: -len(".jsonl")] + ".output.log"
                        kept = os.path.getsize(rec) + (os.path.getsize(log) if os.path.exists(log) else 0)
                        fig.rec_ratio.append(kept / written)
                        os.unlink(rec)
                        if os.path.exists(log):
                            os.unlink(log)
                        with open(cpu_file) as f:
                            fig.cpu_s.append(float(f.read()))
                        line += f"  ctmon cpu {fig.cpu_s[-1]:5.2f} s  recording {fig.rec_ratio[-1]:.3f}x"
                    print(line, file=sys.stderr, flush=True)
    _print_table(results, args.size_mb, args.reps)
    if args.json:
        print(json.dumps({k: {n: vars(f) for n, f in arms.items()} for k, arms in results.items()}))


def _print_table(results: dict[str, dict[str, Figures]], size_mb: int, reps: int) -> None:
    print(f"\n{size_mb} MB per job, {reps} interleaved repetitions; median (min-max)\n")
    print("| output | arm | job's write loop | vs plain | whole command | ctmon's CPU | recording / output |")
    print("|---|---|---|---|---|---|---|")
    for kind, arms in results.items():
        plain = statistics.median(arms["plain"].job_s)
        for name, fig in arms.items():
            ratio = f"{statistics.median(fig.rec_ratio):.3f}" if fig.rec_ratio else "-"
            cpu = harness.spread_text(fig.cpu_s) if fig.cpu_s else "-"
            print(
                f"| {kind} | {name} | {harness.spread_text(fig.job_s)} | {statistics.median(fig.job_s) / plain:.1f}x | "
                f"{harness.spread_text(fig.wall_s)} | {cpu} | {ratio} |"
            )


if __name__ == "__main__":
    main()
