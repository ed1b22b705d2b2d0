"""``--metrics-port``: the supervisor's Prometheus endpoint, scraped during a
real run and read with prometheus-client's own parser; its figures agree
with ``report --json`` of the same recording."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

from helpers import ROOT, ctmon, env_with, one_line_containing
from prometheus_client.parser import text_string_to_metric_families

JOB = textwrap.dedent(
    """
    import os, sys, time, torch
    m = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    f = torch.compile(m, backend="eager")
    for i in range(30):
        f(torch.randn(4 if i < 20 else 6, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    open(sys.argv[1], "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.05)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(body):
        for sample in fam.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _one(metrics: dict, name: str) -> float:  # type: ignore[type-arg]
    (value,) = metrics[name].values()
    return value


def test_a_scrape_during_a_run_agrees_with_the_report(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    stepped, release, rec = tmp_path / "stepped", tmp_path / "release", tmp_path / "rec.jsonl"
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctmon", "record", "-q", "-o", str(rec), str(script), str(stepped), str(release)],
        cwd=ROOT,
        env=env_with(CTMON_METRICS_PORT=str(port)),  # the environment variable, as a cluster job sets it
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not stepped.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        metrics: dict = {}
        while time.monotonic() < deadline:  # the recording is flushed a moment after the steps
            metrics = _scrape(port)
            if _one(metrics, "ctmon_steps_total") >= 30 and _one(metrics, "ctmon_compiles_total") >= 2:
                break
            time.sleep(0.2)
        assert _one(metrics, "ctmon_job_running") == 1
        hist = metrics["ctmon_step_duration_seconds_count"]
        assert list(hist.values()) == [_one(metrics, "ctmon_steps_total") - 1]  # intervals between 30 boundaries
    finally:
        release.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert f"Prometheus metrics at http://127.0.0.1:{port}/metrics" in err
    rep = json.loads(ctmon("report", str(rec), "--json").stdout)
    assert _one(metrics, "ctmon_steps_total") == rep["steps"]["count"] == 30
    assert _one(metrics, "ctmon_compiles_total") == rep["compile"]["compiles"]
    assert _one(metrics, "ctmon_recompiles_total") == rep["compile"]["recompiles"] >= 1
    assert _one(metrics, "ctmon_graph_breaks_total") == rep["compile"]["graph_breaks"]
    assert _one(metrics, "ctmon_recompile_limit_hits_total") == rep["compile"]["limit_hits"]
    labels = dict(next(iter(metrics["ctmon_steps_total"])))
    assert labels == {"rank": "", "host": rep["host"]}
    # every series the Grafana dashboard plots is served (the GPU's where a GPU is sampled)
    with open(os.path.join(ROOT, "docs", "grafana-ctmon.json")) as f:
        wanted = set(re.findall(r"ctmon_[a-z_]+", f.read()))
    with open(os.path.join(ROOT, "docs", "METRICS.md")) as f:
        documented = f.read()
    for name in wanted:
        assert f"`{re.sub(r'_bucket$', '', name)}`" in documented, name
        if not name.startswith("ctmon_gpu_"):
            assert name in metrics, name
    # after the job: the endpoint is gone with its supervisor
    try:
        _scrape(port)
        raise AssertionError("the endpoint outlived the run")
    except OSError:
        pass


def test_a_bad_or_busy_port_is_one_line_and_nothing_is_lost(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("print('ran')\n")
    rec = tmp_path / "kept.jsonl"
    rec.write_text('{"kind":"session","t":1.0}\n')
    one_line_containing(ctmon("record", "--metrics-port", "abc", str(script)), "--metrics-port takes [HOST:]PORT")
    one_line_containing(ctmon("record", "--metrics-port", "70000", str(script)), "is not a TCP port")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = ctmon("record", "-o", str(rec), "--metrics-port", str(port), str(script))
    one_line_containing(out, f"cannot serve metrics on 127.0.0.1:{port}")
    assert "ran" not in out.stdout  # the job was not started
    assert rec.read_text() == '{"kind":"session","t":1.0}\n'  # the recording there is kept
    assert os.path.exists(rec)
