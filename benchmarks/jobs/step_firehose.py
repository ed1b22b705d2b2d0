"""``ctmon.step()`` called N times as fast as the loop goes, for
``benchmarks/whole_job.py firehose``: the recording must keep every step.

    python benchmarks/jobs/step_firehose.py N

Prints ``RESULT N STEPS_PER_S``.
"""

import sys
import time

import ctmon

n = int(sys.argv[1])
step = ctmon.step
t0 = time.perf_counter()
for _ in range(n):
    step()
dt = time.perf_counter() - t0
print(f"RESULT {n} {n / dt:.0f}")
