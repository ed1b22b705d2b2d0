"""What every benchmark here shares.

* Where things are: ``ROOT`` (the checkout, put first on ``sys.path`` so
  ``ctmon`` imports from it), ``job(NAME)`` (a workload in benchmarks/jobs/).
* Running a child: ``env()`` (PYTHONPATH with this checkout first),
  ``run()``, ``record_cmd()`` (the same command under ``ctmon record``),
  ``report()`` (``ctmon report --json`` of a recording), ``tagged()`` (the
  JSON a job prints after a tag such as ``RESULT``), ``usage()`` (a child's
  wall time and peak RSS), ``torchrun()``.
* Interleaving: ``orders()`` and ``interleaved()`` run every arm once per
  repetition, in alternating, rotating, shuffled or fixed order, so a
  machine's drift lands on every arm alike.
* Timing: ``per_call_ns()``.
* Statistics, as every figure in docs/PERFORMANCE.md gives them:
  ``median_ci()`` (the median with its distribution-free 95 % interval: the
  order statistics that Binomial(n, 1/2) puts around it), ``mean_ci()``
  (the mean with 1.96 standard errors either side), ``spread()`` /
  ``spread_text()`` (min, median and max of a few repetitions).
* ``parser()``: an argument parser whose help is the script's docstring.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
JOBS = os.path.join(BENCH, "jobs")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

T = TypeVar("T")


# ---------------------------------------------------------------- children


def job(name: str) -> str:
    """The path of a workload in benchmarks/jobs/."""
    return os.path.join(JOBS, name)


def env(**extra: str) -> dict[str, str]:
    """This process's environment with this checkout first on PYTHONPATH."""
    out = dict(os.environ)
    out["PYTHONPATH"] = ROOT + os.pathsep + out.get("PYTHONPATH", "")
    out.update(extra)
    return out


def ctmon_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ctmon", *args]


def record_cmd(rec: str, cmd: Sequence[str]) -> list[str]:
    """``cmd`` run under ``ctmon record -q -o REC``."""
    return ctmon_cmd("record", "-q", "-o", rec, "--", *cmd)


def run(
    cmd: Sequence[str], environ: dict[str, str] | None = None, timeout: float = 900, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run a child, its output captured as text; with ``check``, a failure
    exits with the end of its stderr."""
    out = subprocess.run(list(cmd), capture_output=True, text=True, env=environ or env(), timeout=timeout)
    if check and out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out


def report(rec: str, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """``ctmon report REC --json``, parsed."""
    return json.loads(run(ctmon_cmd("report", rec, "--json"), environ, check=True).stdout)  # type: ignore[no-any-return]


def tagged(stdout: str, tag: str = "RESULT ") -> list[Any]:
    """The JSON after ``tag`` on each line of a job's output that starts with it."""
    return [json.loads(line[len(tag) :]) for line in stdout.splitlines() if line.startswith(tag)]


def usage(cmd: Sequence[str], environ: dict[str, str] | None = None) -> tuple[float, int, bytes]:
    """Wall seconds, peak RSS in bytes (the child's ``ru_maxrss``) and the
    standard output of one child; exits with its stderr if it fails."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), env=environ or env(), stdout=out, stderr=subprocess.PIPE)
        _, status, rusage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-500:]}")
        out.seek(0)
        return wall, rusage.ru_maxrss * 1024, out.read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(ranks: int) -> list[str]:
    """torchrun for ``ranks`` ranks on this host, on a free port."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks)] + [
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
    ]


def machine(with_torch: bool = False) -> dict[str, Any]:
    """What a figure's machine line needs: CPU, cores, Python, the date, and
    torch's version and the GPU where torch is imported (``with_torch``
    imports it)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }
    if with_torch:
        import torch  # noqa: F401
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    return info


# ------------------------------------------------------------ interleaving


def orders(names: Sequence[str], reps: int, how: str = "alternate", seed: int = 0) -> Iterator[list[str]]:
    """The arms' order in each repetition: ``alternate`` (as given, then
    reversed), ``rotate`` (each arm first in turn), ``shuffle`` (a fresh
    random order, seeded) or ``fixed`` (as given every time)."""
    rnd = random.Random(seed)
    for i in range(reps):
        order = list(names)
        if how == "alternate" and i % 2:
            order.reverse()
        elif how == "rotate":
            order = order[i % len(order) :] + order[: i % len(order)]
        elif how == "shuffle":
            rnd.shuffle(order)
        yield order


def interleaved(arms: Mapping[str, Callable[[], T]], reps: int, how: str = "alternate") -> dict[str, list[T]]:
    """Each arm run once per repetition, interleaved; what each returned, per arm."""
    got: dict[str, list[T]] = {name: [] for name in arms}
    for order in orders(list(arms), reps, how):
        for name in order:
            got[name].append(arms[name]())
    return got


def per_call_ns(fn: Callable[[], object], n: int) -> float:
    """Mean ns of ``n`` calls of ``fn`` in a tight loop."""
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n


# -------------------------------------------------------------- statistics


def median_ci(xs: Sequence[float]) -> tuple[float, float, float]:
    """The median and its distribution-free 95 % interval: the k-th values
    from either end, k the largest with P(Binomial(n, 1/2) < k) <= 2.5 %
    (with too few values to reach 95 %: the whole range)."""
    d = sorted(xs)
    n, k, tail = len(d), 0, 0.0
    while k < n // 2 and tail + math.comb(n, k) / 2**n <= 0.025:
        tail += math.comb(n, k) / 2**n
        k += 1
    lo, hi = (d[k - 1], d[n - k]) if k else (d[0], d[-1])
    return statistics.median(d), lo, hi


def mean_ci(xs: Sequence[float]) -> tuple[float, float, float]:
    """The mean and its 95 % interval (1.96 standard errors)."""
    m = statistics.fmean(xs)
    half = 1.96 * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else math.inf
    return m, m - half, m + half


def rel_pct(on: float, off: float) -> float:
    return (on - off) / off * 100


def spread(values: Sequence[float], digits: int = 3) -> dict[str, float]:
    """Min, median and max of a few repetitions."""
    return {
        "min": round(min(values), digits),
        "median": round(statistics.median(values), digits),
        "max": round(max(values), digits),
    }


def spread_text(values: Sequence[float], unit: str = "s", digits: int = 2) -> str:
    """``median unit (min-max)``, as the tables in docs/PERFORMANCE.md give a spread."""
    med, lo, hi = statistics.median(values), min(values), max(values)
    return f"{med:.{digits}f} {unit} ({lo:.{digits}f}-{hi:.{digits}f})"


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser whose help is the script's docstring, as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
