"""A compiled function whose graphs hold the GIL, between steps that sleep.

The backend's compiled callable spins for --busy-ms in Python before running
the graph: the case sampling cannot see (a sample lands where the job's
thread lets the GIL go, and a spin never does). The function breaks its
graph once (two frames: ``step_fn`` and its resume function, each with a
graph), and is recompiled once for a second input shape, so each frame has
two graphs whose calls add up. After the loop it is called --extra more
times outside any step: calls per run count them, step-time shares do not.

Prints ``STEPS n EXTRA k GRAPH_SHARE s``: s is the share of the steps' time
(after the first steps, which compile) the graphs took, timed here."""

import argparse
import time

import torch

import ctmon

parser = argparse.ArgumentParser()
parser.add_argument("--busy-ms", type=float, default=2.0)
parser.add_argument("--sleep-ms", type=float, default=4.0)
parser.add_argument("--seconds", type=float, default=8.0)
parser.add_argument("--extra", type=int, default=5)
args = parser.parse_args()

graph_s = 0.0


def busy_backend(gm, example_inputs):
    def run(*inputs):
        global graph_s
        t0 = time.perf_counter()
        end = t0 + args.busy_ms / 1000
        while time.perf_counter() < end:
            pass
        out = gm(*inputs)
        graph_s += time.perf_counter() - t0
        return out

    return run


@torch.compile(backend=busy_backend, dynamic=False)
def step_fn(x):
    y = x + 1
    torch._dynamo.graph_break()
    return y * 2


small, large = torch.ones(8), torch.ones(16)
steps = 0
warm = 3  # the first steps of each shape compile: left out of the truth
timed_graph = timed_wall = 0.0
start = time.perf_counter()
while time.perf_counter() - start < args.seconds:
    x = small if steps < 400 else large  # a recompile at step 400
    g0, t0 = graph_s, time.perf_counter()
    step_fn(x)
    time.sleep(args.sleep_ms / 1000)
    ctmon.step()
    steps += 1
    if warm < steps and not (400 <= steps < 400 + warm):
        timed_graph += graph_s - g0
        timed_wall += time.perf_counter() - t0
for _ in range(args.extra):
    step_fn(large)
print(f"STEPS {steps} EXTRA {args.extra} GRAPH_SHARE {timed_graph / timed_wall:.4f}", flush=True)
