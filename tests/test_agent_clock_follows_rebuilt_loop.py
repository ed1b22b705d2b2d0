"""The step clock follows a training loop built anew (a sweep's next trial,
a resized model): once the optimizer it counted is gone, the next one to
step is the clock. A second optimizer that steps beside a live one (a
GAN's) is still not counted twice."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import record

pytestmark = pytest.mark.slow  # a real compiled training job under ctmon record

JOB = textwrap.dedent(
    """
    import gc
    import torch

    def trial(steps, gan=False):
        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        other = torch.optim.SGD(torch.nn.Linear(8, 8).parameters(), lr=0.1) if gan else None
        for _ in range(steps):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            if other is not None:
                other.step()  # a GAN's second optimizer, alive beside the first
            opt.zero_grad()

    trial(5)        # the first optimizer is the clock, then gone with its trial
    gc.collect()
    trial(7, gan=True)
    print("trials done")
    """
)


def test_a_new_optimizer_takes_the_clock_once_the_old_one_is_gone(tmp_path):
    job = tmp_path / "sweep.py"
    job.write_text(JOB)
    run = record(tmp_path, [str(job)], torch_trace=False, timeout=240)
    assert run.returncode == 0, run.proc.stderr
    assert "trials done" in run.proc.stdout
    rep = run.report()
    assert rep["steps"]["source"] == "optimizer"
    assert rep["steps"]["count"] == 12, rep["steps"]  # 5 + 7: the GAN's second optimizer not counted
