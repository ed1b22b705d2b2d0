"""Running ctmon in subprocesses, and reading PyTorch's own TORCH_TRACE."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = os.path.join(ROOT, "tests", "workloads")


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    recording: str
    trace_dir: str | None

    @property
    def returncode(self) -> int:
        return self.proc.returncode

    def report(self) -> dict[str, Any]:
        out = ctmon("report", self.recording, "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def events(self) -> list[dict[str, Any]]:
        with open(self.recording, "rb") as f:
            return [json.loads(line) for line in f if line.strip()]

    def trace(self) -> TraceCounts:
        assert self.trace_dir is not None
        return read_torch_trace(self.trace_dir)

    def self_timing(self) -> dict[str, Any]:
        for line in self.proc.stdout.splitlines():
            if line.startswith("SELF_TIMING "):
                return json.loads(line[len("SELF_TIMING ") :])
        raise AssertionError("workload printed no SELF_TIMING line:\n" + self.proc.stdout[-2000:])


def short_tmux_dir(preferred: str) -> str:
    """A TMUX_TMPDIR whose server socket path fits a Unix socket address
    (108 bytes): pytest's tmp_path can be too deep for it."""
    if len(preferred) <= 60:
        return preferred
    return tempfile.mkdtemp(prefix="ctx-", dir="/tmp" if os.path.isdir("/tmp") else None)


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def ctmon(
    *args: str,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctmon", *args],
        cwd=cwd or ROOT,
        env=env or env_with(),
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
    )


def record(
    tmp_path: Any,
    target: list[str],
    *,
    torch_trace: bool = True,
    cwd: str | None = None,
    extra_env: dict[str, str] | None = None,
    options: list[str] | None = None,
    timeout: float = 300,
) -> Run:
    os.makedirs(str(tmp_path), exist_ok=True)
    rec = os.path.join(str(tmp_path), "rec.jsonl")
    trace_dir = os.path.join(str(tmp_path), "torch_trace") if torch_trace else None
    env = env_with(**(extra_env or {}))
    if trace_dir:
        env["TORCH_TRACE"] = trace_dir
    proc = ctmon("record", "-o", rec, *(options or []), *target, cwd=cwd, env=env, timeout=timeout)
    return Run(proc, rec, trace_dir)


def workload(name: str) -> str:
    return os.path.join(WORKLOADS, name)


@dataclass
class TraceCounts:
    compiles: int = 0
    recompiles: int = 0
    limit_hits: int = 0
    graph_breaks: int = 0
    bwd_compiles: int = 0
    fx_hit: int = 0
    fx_miss: int = 0
    fx_bypass: int = 0
    aot_hit: int = 0
    aot_miss: int = 0
    aot_bypass: int = 0
    files: int = 0


def read_torch_trace(trace_dir: str, pattern: str = "*.log") -> TraceCounts:
    """Count events in PyTorch's own TORCH_TRACE logs (what tlparse reads);
    ``pattern`` picks files (one rank's: ``*_rank_1_*.log``).

    Each record is a glog-style prefix, then a JSON object on the same line;
    payload lines that follow start with a tab and are skipped here.
    """
    counts = TraceCounts()
    files = sorted(glob.glob(os.path.join(trace_dir, pattern)))
    counts.files = len(files)
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("\t"):
                    continue
                brace = line.find("] {")
                if brace < 0:
                    continue
                try:
                    md = json.loads(line[brace + 2 :])
                except ValueError:
                    continue
                if "compilation_metrics" in md:
                    m = md["compilation_metrics"]
                    counts.compiles += 1
                    if m.get("recompile_reason"):
                        counts.recompiles += 1
                    if str(m.get("fail_reason") or "").startswith("Dynamo recompile limit exceeded"):
                        counts.limit_hits += 1
                elif "bwd_compilation_metrics" in md:
                    counts.bwd_compiles += 1
                elif "artifact" in md:
                    name = md["artifact"].get("name")
                    if name == "dynamo_graph_break_reason":
                        counts.graph_breaks += 1
                    elif name in ("fx_graph_cache_hit", "fx_graph_bundled_cache_hit"):
                        counts.fx_hit += 1
                    elif name == "fx_graph_cache_miss":
                        counts.fx_miss += 1
                    elif name == "fx_graph_cache_bypass":
                        counts.fx_bypass += 1
                    elif name == "aotautograd_cache_hit":
                        counts.aot_hit += 1
                    elif name == "aotautograd_cache_miss":
                        counts.aot_miss += 1
                    elif name == "aotautograd_cache_bypass":
                        counts.aot_bypass += 1
    return counts


def assert_matches_torch_trace(report: dict[str, Any], trace: TraceCounts) -> None:
    """The acceptance rule: ctmon's compile counts equal PyTorch's own log's."""
    assert trace.files >= 1, "TORCH_TRACE wrote no log"
    c = report["compile"]
    assert c["compiles"] == trace.compiles, (c, trace)
    assert c["recompiles"] == trace.recompiles, (c, trace)
    assert c["limit_hits"] == trace.limit_hits, (c, trace)
    assert c["graph_breaks"] == trace.graph_breaks, (c, trace)
    assert c["backward_compiles"] == trace.bwd_compiles, (c, trace)
    cache = report["cache"]
    assert cache["fx_graph"] == {"hit": trace.fx_hit, "miss": trace.fx_miss, "bypass": trace.fx_bypass}, (cache, trace)
    assert cache["aot_autograd"] == {"hit": trace.aot_hit, "miss": trace.aot_miss, "bypass": trace.aot_bypass}, (
        cache,
        trace,
    )


def marker_lines(path: str) -> dict[str, int]:
    out = {}
    with open(path) as f:
        for i, line in enumerate(f, 1):
            m = re.search(r"# BREAK:(\w+)", line)
            if m:
                out[m.group(1)] = i
    return out


def one_line_containing(out: subprocess.CompletedProcess[str], *parts: str, code: int = 2) -> str:
    """Exit ``code``, exactly one ``ctmon: ...`` line on stderr holding every
    part, no traceback; returns that line."""
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctmon: "), out.stderr
    for p in parts:
        assert p in lines[0], (p, lines[0])
    assert out.returncode == code, (out.returncode, out.stderr)
    return lines[0]
