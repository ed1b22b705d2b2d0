"""``--metrics-port``: the supervisor's Prometheus endpoint, scraped during a
real run and read with prometheus-client's own parser; its figures agree
with ``report --json`` of the same recording."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
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


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _one(metrics: dict, name: str) -> float:  # type: ignore[type-arg]
    (value,) = metrics[name].values()
    return value


@pytest.mark.slow
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


def test_a_port_without_permission_is_one_line(tmp_path):
    """Port 81 needs CAP_NET_BIND_SERVICE: as root, it is taken away for the
    run (setpriv), as anyone else it is not there."""
    script = tmp_path / "job.py"
    script.write_text("print('ran')\n")
    cmd = [sys.executable, "-m", "ctmon", "record", "--metrics-port", "81", str(script)]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv: cannot take the permission away")
        cmd = ["setpriv", "--bounding-set", "-net_bind_service", *cmd]
    out = subprocess.run(cmd, cwd=ROOT, env=env_with(), capture_output=True, text=True, timeout=60)
    one_line_containing(out, "cannot serve metrics on 127.0.0.1:81: Permission denied")
    assert "ran" not in out.stdout


@pytest.mark.slow
def test_attach_serves_metrics_from_its_detached_supervisor(tmp_path, monkeypatch):
    """``ctmon attach --metrics-port``: the endpoint is the detached
    supervisor's, so it serves while the job runs whether or not the TUI is
    open; a busy port stops the start with the same line as record's."""
    from ctmon.launch.daemon import DaemonError, start_detached
    from ctmon.launch.spec import JobSpec

    script = tmp_path / "job.py"
    script.write_text(JOB)
    stepped, release, rec = tmp_path / "stepped", tmp_path / "release", str(tmp_path / "rec.jsonl")
    monkeypatch.setenv("PYTHONPATH", ROOT)
    port = _free_port()
    spec = JobSpec(mode="script", target=str(script), args=[str(stepped), str(release)], cwd=ROOT)
    d = start_detached(spec, rec, metrics=str(port))
    try:
        deadline = time.monotonic() + 120
        while not stepped.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        metrics: dict = {}
        while time.monotonic() < deadline:
            metrics = _scrape(port)
            if _one(metrics, "ctmon_steps_total") >= 30:
                break
            time.sleep(0.2)
        assert _one(metrics, "ctmon_steps_total") == 30 and _one(metrics, "ctmon_job_running") == 1
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            taken = busy.getsockname()[1]
            with pytest.raises(DaemonError, match=f"cannot serve metrics on 127.0.0.1:{taken}"):
                start_detached(spec, str(tmp_path / "other.jsonl"), metrics=str(taken))
    finally:
        release.touch()
        assert d.proc.wait(60) == 0
    rep = json.loads(ctmon("report", rec, "--json").stdout)
    assert rep["steps"]["count"] == 30 and rep["exit_code"] == 0
    out = ctmon("attach", "--metrics-port", "abc", str(script))
    one_line_containing(out, "attach: --metrics-port takes [HOST:]PORT")


@pytest.mark.slow
def test_scrapes_while_the_run_ends_never_hold_it_up(tmp_path):
    """Scrapes hammer the endpoint while the job ends and the supervisor shuts
    down, and a client holds a half-sent request open: each scrape gets a
    whole, valid exposition or a refused or cut connection (a body short of
    its Content-Length is refused by the client); ctmon exits with the job's
    code (the half-sent request holds nothing up), prints no traceback, and
    keeps every step."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    stepped, release, rec = tmp_path / "stepped", tmp_path / "release", tmp_path / "rec.jsonl"
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctmon", "record", "-q", "-o", str(rec), "--metrics-port", str(port), str(script)]
        + [str(stepped), str(release)],
        cwd=ROOT,
        env=env_with(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    outcomes: list[str] = []
    odd: list[str] = []  # the bodies of scrapes without ctmon_steps
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                names = {f.name for f in text_string_to_metric_families(body)}
                outcomes.append("ok" if "ctmon_steps" in names else "incomplete")
                if "ctmon_steps" not in names:
                    odd.append(body[:2000])  # what it was, for the assertion's message
            except urllib.error.HTTPError as e:
                outcomes.append(f"http {e.code}")
            except (OSError, http.client.HTTPException):
                outcomes.append("refused")
                time.sleep(0.05)

    try:
        deadline = time.monotonic() + 120
        while not stepped.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        half = socket.create_connection(("127.0.0.1", port), timeout=5)
        half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
        threads = [threading.Thread(target=hammer) for _ in range(3)]
        for t in threads:
            t.start()
        _wait_for(lambda: outcomes.count("ok") > 3, "scrapes while the job runs")
        release.touch()
        out, err = proc.communicate(timeout=60)  # held up by the half-sent request, it would not end at all
        _wait_for(lambda: outcomes[-3:] == ["refused"] * 3, "scrapes refused once ctmon has ended")
    finally:
        stop.set()
        release.touch()
        if proc.poll() is None:
            proc.kill()
    for t in threads:
        t.join(10)
    half.close()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert outcomes.count("ok") > 3 and outcomes[-1] == "refused", outcomes[-5:]
    assert set(outcomes) <= {"ok", "refused"}, (set(outcomes), odd[:2])
    assert json.loads(ctmon("report", str(rec), "--json").stdout)["steps"]["count"] == 30


# The supervisor's endpoint, in a process of its own: each scrape thread is
# held up right after its first bytes go out (as a descheduled thread on a busy
# machine is), and the process closes the endpoint and ends meanwhile.
PREEMPTED_SCRAPE = textwrap.dedent(
    """
    import socket, sys, threading, time
    from ctmon.launch.metrics import MetricsServer

    sent = threading.Event()
    send = socket.socket.sendall

    def send_then_stall(self, data, *args):
        done = send(self, data, *args)
        if threading.current_thread() is not threading.main_thread():
            sent.set()
            time.sleep(60)  # the rest of this answer waits for the scheduler; the process ends first
        return done

    socket.socket.sendall = send_then_stall
    server = MetricsServer(sys.argv[1], sys.argv[2])
    server.serve()
    print("serving", flush=True)
    sent.wait(60)
    server.close()
    """
)


@pytest.mark.slow
def test_a_scrape_cut_off_by_the_end_is_never_a_short_200(tmp_path):
    """A scrape answered while the supervisor ends gets the whole exposition
    or no answer; never ``200 OK`` with an empty or partial body (a
    Prometheus server would take that as every series gone)."""
    rec = tmp_path / "rec.jsonl"
    rec.write_text('{"kind":"session","t":1.0,"host":"h"}\n')
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", PREEMPTED_SCRAPE, f"127.0.0.1:{port}", str(rec)],
        cwd=ROOT,
        env=env_with(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "serving", server.stderr
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as answer:
                status, body = answer.status, answer.read().decode()
        except (OSError, http.client.HTTPException):  # a body short of its length is refused
            status, body = None, ""  # no answer: Prometheus counts a failed scrape, the series stay
        out, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
    assert server.returncode == 0 and "Traceback" not in err, err
    # the answer was written before the end, so it arrives, and whole
    assert status == 200 and body, (status, body)
    assert {"ctmon_steps", "ctmon_job_running"} <= {f.name for f in text_string_to_metric_families(body)}, body


# The endpoint in a process of its own, ended once its scrape threads are done.
SERVE_UNTIL_TOLD = textwrap.dedent(
    """
    import sys, threading, time
    from ctmon.launch.metrics import MetricsServer

    server = MetricsServer(sys.argv[1], sys.argv[2])
    server.serve()
    idle = threading.active_count()
    print("serving", flush=True)
    sys.stdin.readline()
    deadline = time.monotonic() + 60
    while threading.active_count() > idle and time.monotonic() < deadline:  # every connection handled
        time.sleep(0.05)
    server.close()
    print("handled" if threading.active_count() <= idle else "still handling", flush=True)
    """
)


def test_a_scraper_that_resets_its_connection_leaves_no_traceback(tmp_path):
    """A scraper that gives up (a reset in the middle of its request, or
    before its answer is written) is its own business: nothing on the
    supervisor's stderr, which is the user's terminal."""
    rec = tmp_path / "rec.jsonl"
    rec.write_text('{"kind":"session","t":1.0,"host":"h"}\n')
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE_UNTIL_TOLD, f"127.0.0.1:{port}", str(rec)],
        cwd=ROOT,
        env=env_with(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "serving"
        for request in (b"GET /metrics HTTP/1.1\r\nHost: x\r\n", b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"):
            client = socket.create_connection(("127.0.0.1", port), timeout=10)
            client.sendall(request)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # with a zero linger: a reset
        out, err = server.communicate("go\n", timeout=90)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
    assert out.split() == ["handled"] and server.returncode == 0, (out, err)
    assert err == "", err
