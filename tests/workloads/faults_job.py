"""A small deterministic job for the fault suite (tests/test_whole_faults.py).

It runs N steps marked with ``ctmon.step()`` (a no-op without ctmon), prints
lines, and ends the way it is told. Run plainly it gives the reference ("as
without ctmon"): its exit status and its own count of steps, printed as

    FAULTS_JOB {"steps": N, "loop_s": ..., "max_gap_s": ...}

just before the ending.

options:
  --steps N          steps to run (default 200)
  --step-ms MS       sleep this long in each step (default 0)
  --print-every K    print "step I <padding>" every K steps (0: never)
  --line-bytes B     pad each step line to about B bytes (default 0)
  --compiles K       before the steps: K compiles of a tiny torch.compile(backend="eager")
                     function, one per input shape (imports torch)
  --raw-events N     under ctmon only: also send N events of an unknown kind ("x_soak")
                     straight to the supervisor's agent socket, as a second agent
                     would, interleaved with the steps (a load for the soak test)
  --trace-records N  after the gate: N structured-trace records of a kind ctmon keeps
                     (an FX graph cache miss), through PyTorch's own trace_structured
                     (imports torch); without ctmon nobody listens and they cost ~nothing
  --warmup W         W more steps before the gate (counted in the total)
  --gate PATH        before the steps: print READY and wait until PATH exists
                     (nothing is printed while the steps run, so a stopped
                     supervisor cannot block the job through its stdout)
  --done PATH        after the steps: create PATH, then wait until PATH.go exists
  --ignore-sigint    the first SIGINT is only reported; a second one interrupts
  --end HOW          ok (exit 0) | exception (uncaught RuntimeError, exit 1) |
                     exit (os._exit(7)) | sigkill (kills itself) |
                     wait (print WAITING, sleep until a signal ends it)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import ctmon


def _arg(name: str, default: str | None = None) -> str | None:
    argv = sys.argv[1:]
    if name in argv:
        i = argv.index(name)
        return argv[i + 1] if i + 1 < len(argv) else default
    return default


def _wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.01)


def _compile_loop(k: int) -> None:
    import torch
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(k + 8, 8)  # type: ignore[attr-defined]
    torch._dynamo.config.automatic_dynamic_shapes = False

    @torch.compile(backend="eager", dynamic=False)
    def f(x):  # type: ignore[no-untyped-def]
        return x * 2 + 1

    for n in range(1, k + 1):
        f(torch.ones(n))


class _RawEvents:
    """Event lines written straight to the agent socket, in batches spread over the steps."""

    BATCH = 1000

    def __init__(self, n: int, steps: int) -> None:
        self.n = n
        self.sent = 0
        self.sock = None
        self.every = 0
        path = os.environ.get("CTMON_AGENT_SOCKET")
        if n <= 0 or not path:
            return
        import socket

        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        batches = -(-n // self.BATCH)
        self.every = max(1, steps // batches)

    def send(self) -> None:
        if self.sock is None or self.sent >= self.n:
            return
        k = min(self.BATCH, self.n - self.sent)
        t = time.time()
        self.sock.sendall(b"".join(b'{"kind":"x_soak","t":%.6f,"i":%d}\n' % (t, self.sent + j) for j in range(k)))
        self.sent += k

    def close(self) -> None:
        while self.sock is not None and self.sent < self.n:
            self.send()
        if self.sock is not None:
            self.sock.close()


def _trace_records(n: int) -> float:
    """Emit n records into PyTorch's structured trace, as a compile storm's
    cache lookups would; returns the seconds it took."""
    from torch._logging import trace_structured

    t0 = time.perf_counter()
    for _ in range(n):
        trace_structured(
            "artifact",
            metadata_fn=lambda: {"name": "fx_graph_cache_miss", "encoding": "json"},
            payload_fn=lambda: '{"key": "faults-job", "cache_state": "miss"}',
            expect_trace_id=False,
        )
    return time.perf_counter() - t0


def main() -> None:
    steps = int(_arg("--steps", "200") or 200)
    step_s = float(_arg("--step-ms", "0") or 0) / 1000.0
    every = int(_arg("--print-every", "0") or 0)
    pad = int(_arg("--line-bytes", "0") or 0)
    compiles = int(_arg("--compiles", "0") or 0)
    gate = _arg("--gate")
    done = _arg("--done")
    end = _arg("--end", "ok")

    if "--ignore-sigint" in sys.argv:
        seen: list[int] = []

        def on_int(signum, frame):  # type: ignore[no-untyped-def]
            if seen:
                raise KeyboardInterrupt
            seen.append(signum)
            print("got SIGINT, going on", flush=True)

        signal.signal(signal.SIGINT, on_int)

    if compiles:
        _compile_loop(compiles)
    warmup = int(_arg("--warmup", "0") or 0)
    for _ in range(warmup):
        ctmon.step()
    if gate:
        print("READY", flush=True)
        _wait_for(gate)

    n_trace = int(_arg("--trace-records", "0") or 0)
    trace_s = _trace_records(n_trace) if n_trace else 0.0

    raw = _RawEvents(int(_arg("--raw-events", "0") or 0), steps)
    filler = "x" * max(0, pad - 16)
    t0 = prev = time.perf_counter()
    max_gap = 0.0
    for i in range(steps):
        if step_s:
            time.sleep(step_s)
        if every and i % every == 0:
            sys.stdout.write(f"step {i} {filler}\n")
            sys.stdout.flush()
        ctmon.step()
        if raw.every and i % raw.every == 0:
            raw.send()
        now = time.perf_counter()
        max_gap = max(max_gap, now - prev)
        prev = now
    loop_s = time.perf_counter() - t0
    raw.close()

    if done:
        with open(done, "w") as f:
            f.write(str(steps))
        _wait_for(done + ".go")

    print("FAULTS_JOB " + json.dumps({"steps": warmup + steps, "loop_s": round(loop_s, 4), "max_gap_s": round(max_gap, 4),
                                     "raw_events": raw.sent, "trace_records": n_trace, "trace_s": round(trace_s, 3)}),
          flush=True)
    if end == "exception":
        raise RuntimeError(f"simulated failure after {steps} steps")
    if end == "exit":
        os._exit(7)
    if end == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if end == "wait":
        print("WAITING", flush=True)
        while True:
            time.sleep(0.05)


if __name__ == "__main__":
    main()
