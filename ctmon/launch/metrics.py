"""The Prometheus endpoint (``--metrics-port``, ``CTMON_METRICS_PORT``).

Served by the supervisor with prometheus-client on a thread of its own. A
scrape folds what the recording gained since the last scrape into a store
(the same store a report reads) and reads the figures off it, so an
endpoint nobody scrapes costs nothing, and the job's own path never waits on
it: a slow or failing scrape stays on the server's thread. Names and units
follow Prometheus' conventions; every per-job series carries ``rank`` (empty
for a job of one process) and ``host``. docs/METRICS.md lists them.
"""

from __future__ import annotations

import io
import socket
import threading
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler

from prometheus_client import make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector, CollectorRegistry

from ctmon.read.follow import Follower
from ctmon.store import Session

# step-time buckets, seconds: a 1 ms inference step to a 10 s training step
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LABELS = ["rank", "host"]
ANSWER_GRACE_S = 2.0  # how long close() waits for the scrapes being answered


class MetricsError(Exception):
    """The endpoint cannot be served (one line for the user)."""


def parse_address(text: str) -> tuple[str, int]:
    """``[HOST:]PORT`` -> (host, port); loopback unless a host is named."""
    host, _, port = text.rpartition(":")
    try:
        n = int(port)
    except ValueError:
        raise MetricsError(f"--metrics-port takes [HOST:]PORT, not {text!r}") from None
    if not 0 < n < 65536:
        raise MetricsError(f"--metrics-port: {n} is not a TCP port (1-65535)")
    return host.strip("[]") or "127.0.0.1", n


class StoreCollector(Collector):
    def __init__(self, recording: str) -> None:
        self.ready = False  # set once the recording is this job's (an earlier one is emptied first)
        self._follow = Follower(recording)
        self._lock = threading.Lock()
        self._hist: dict[str, tuple[int, list[int], float]] = {}  # rank -> (intervals read, bucket counts, sum)

    def collect(self) -> Iterator[Any]:
        with self._lock:  # scrapes may overlap: one folds at a time
            if self.ready:
                self._follow.read()
            yield from self._families(self._follow.session)

    def _families(self, s: Session) -> Iterator[Any]:
        steps = CounterMetricFamily("ctmon_steps", "Training or inference steps the job made", labels=LABELS)
        step_s = HistogramMetricFamily("ctmon_step_duration_seconds", "Step time (device-timed on CUDA)", labels=LABELS)
        compiles = CounterMetricFamily("ctmon_compiles", "Dynamo frame compiles, recompiles included", labels=LABELS)
        recompiles = CounterMetricFamily("ctmon_recompiles", "Recompiles of frames compiled before", labels=LABELS)
        breaks = CounterMetricFamily("ctmon_graph_breaks", "Graph breaks", labels=LABELS)
        limits = CounterMetricFamily(
            "ctmon_recompile_limit_hits", "Frames that hit the recompile limit (they run eager)", labels=LABELS
        )
        compile_s = CounterMetricFamily(
            "ctmon_compile_seconds", "Time compiling: frames and backward graphs", labels=LABELS
        )
        hits = CounterMetricFamily("ctmon_cache_hits", "Compile-cache hits", labels=[*LABELS, "cache"])
        misses = CounterMetricFamily("ctmon_cache_misses", "Compile-cache misses", labels=[*LABELS, "cache"])
        for rank, host, sess in _processes(s):
            labels = [rank, host]
            series = sess.steps.current
            n = len(series) if series is not None else 0
            steps.add_metric(labels, n)
            buckets, total = self._histogram(rank, sess)
            step_s.add_metric(labels, buckets, total)
            cs = sess.compile
            compiles.add_metric(labels, cs.compile_count)
            recompiles.add_metric(labels, cs.recompile_count)
            breaks.add_metric(labels, cs.graph_break_count)
            limits.add_metric(labels, cs.limit_hits)
            compile_s.add_metric(labels, cs.total_time_s + cs.bwd_time_s)
            for name, c in sorted(cs.cache.items()):
                hits.add_metric([*labels, name], c.hit)
                misses.add_metric([*labels, name], c.miss)
        yield from (steps, step_s, compiles, recompiles, breaks, limits, compile_s, hits, misses)
        yield from _gpus(s)
        running = GaugeMetricFamily("ctmon_job_running", "1 while the job runs, 0 once it has ended", labels=["host"])
        running.add_metric([s.meta.host or ""], 0 if s.exit is not None else 1)
        yield running
        if s.exit is not None and s.exit.known and s.exit.code is not None:
            code = GaugeMetricFamily("ctmon_job_exit_code", "The job's exit code, once it has ended", labels=["host"])
            code.add_metric([s.meta.host or ""], s.exit.code)
            yield code

    def _histogram(self, rank: str, sess: Session) -> tuple[list[tuple[str, float]], float]:
        """Cumulative buckets over every step so far, adding only the steps
        since the last scrape."""
        done, counts, total = self._hist.get(rank, (1, [0] * (len(BUCKETS) + 1), 0.0))
        series = sess.steps.current
        n = len(series) if series is not None else 0
        if series is not None and n > done:
            for ms in series.known_intervals(done, n):
                v = ms / 1000
                total += v
                k = next((i for i, b in enumerate(BUCKETS) if v <= b), len(BUCKETS))
                counts[k] += 1
            done = n
        self._hist[rank] = (done, counts, total)
        cum, out = 0, []
        for i, b in enumerate(BUCKETS):
            cum += counts[i]
            out.append((repr(b), float(cum)))
        out.append(("+Inf", float(cum + counts[-1])))
        return out, total


def _processes(s: Session) -> list[tuple[str, str, Session]]:
    """(rank label, host, store) of each of the job's processes with a store
    of its own: every rank, or the job's one process."""
    if s.ranks:
        return [(str(r), rs.host or s.meta.host or "", rs.session) for r, rs in sorted(s.ranks.items())]
    return [("", s.meta.host or "", s)]


def _gpus(s: Session) -> Iterator[Any]:
    util = GaugeMetricFamily("ctmon_gpu_utilization_ratio", "GPU utilisation (NVML), 0-1", labels=["gpu", "host"])
    used = GaugeMetricFamily("ctmon_gpu_memory_used_bytes", "GPU memory in use (NVML)", labels=["gpu", "host"])
    total = GaugeMetricFamily("ctmon_gpu_memory_total_bytes", "GPU memory (NVML)", labels=["gpu", "host"])
    job = GaugeMetricFamily("ctmon_gpu_job_memory_bytes", "The job's own processes' GPU memory", labels=["gpu", "host"])
    power = GaugeMetricFamily("ctmon_gpu_power_watts", "GPU power draw (NVML)", labels=["gpu", "host"])
    last = s.samples[-1] if s.samples else None
    host = s.meta.host or ""
    for g in (last.gpus or []) if last is not None else []:
        labels = [str(g.index if g.index is not None else ""), host]
        if g.util is not None:
            util.add_metric(labels, g.util / 100)
        if g.mem_used is not None:
            used.add_metric(labels, g.mem_used)
        if g.mem_total is not None:
            total.add_metric(labels, g.mem_total)
        if g.proc_mem is not None:
            job.add_metric(labels, g.proc_mem)
        if g.power_w is not None:
            power.add_metric(labels, g.power_w)
    yield from (util, used, total, job, power)


class _ScrapeServer(ThreadingWSGIServer):
    """prometheus-client's server (a daemon thread per scrape), counting the
    scrapes being answered so that ``close`` can let them finish."""

    def __init__(self, host: str, port: int) -> None:
        # the address family the host needs (an IPv6 address, a name), as start_http_server picks it
        self.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        self._answering = 0
        self._idle = threading.Condition()
        super().__init__((host, port), _WholeAnswer)

    def begin(self) -> None:
        with self._idle:
            self._answering += 1

    def end(self) -> None:
        with self._idle:
            self._answering -= 1
            self._idle.notify_all()

    def wait_answered(self, timeout: float) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._answering == 0, timeout)


class _WholeAnswer(WSGIRequestHandler):
    """Sends each answer in one write: status line, headers with the body's
    length, and body. wsgiref writes the status line, each server header and
    the body apart, and scrape threads are daemons: a process that ends
    between two writes left a client with a bare ``200 OK`` and, the
    connection closed, an empty body -- every series gone at once. Written
    whole, a scrape the end cuts off is a failed connection, or a body short
    of its Content-Length, which clients refuse."""

    server: _ScrapeServer
    _counted = False

    def handle(self) -> None:
        to_client = self.wfile
        answer = io.BytesIO()
        self.wfile = answer
        try:
            super().handle()  # reads the request and answers into the buffer
            to_client.write(answer.getvalue())
        except OSError:  # the scraper left (reset, timed out): its error is not the job's, nor for its terminal
            pass
        finally:
            self.wfile = to_client
            if self._counted:
                self.server.end()

    def parse_request(self) -> bool:
        whole = super().parse_request()
        if whole:  # a request is in: close() lets its answer go out (a half-sent one holds nothing up)
            self.server.begin()
            self._counted = True
        return whole

    def log_message(self, format: str, *args: object) -> None:
        """Scrapes are not logged (the job's stderr is the user's)."""


class MetricsServer:
    """The endpoint, bound before the job starts (a busy port is one line
    and the job is not started), stopped when the supervisor ends."""

    def __init__(self, address: str, recording: str) -> None:
        self.host, self.port = parse_address(address)
        registry = CollectorRegistry(auto_describe=False)
        self._collector = StoreCollector(recording)
        registry.register(self._collector)
        try:
            self._server = _ScrapeServer(self.host, self.port)
        except OSError as e:
            raise MetricsError(f"cannot serve metrics on {self.host}:{self.port}: {e.strerror or e}") from None
        self._server.set_app(make_wsgi_app(registry))
        self._thread = threading.Thread(target=self._server.serve_forever, name="ctmon-metrics", daemon=True)
        self._thread.start()

    def serve(self) -> None:
        self._collector.ready = True

    def close(self) -> None:
        """No new scrape is taken; those being answered get their whole
        answer, for up to ``ANSWER_GRACE_S``."""
        self._server.shutdown()
        self._server.server_close()
        self._server.wait_answered(ANSWER_GRACE_S)
