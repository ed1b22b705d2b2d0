"""The report's ``system`` section: what the ~1 Hz samples say about the
machine while the job ran -- was the GPU busy, how much memory at the peak
(the device's and the job's own), the power, the host's CPU and memory --
and the share of the stepping time each GPU sat idle."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctmon.report.model import Gpu, System
from ctmon.store import Session

IDLE_UTIL = 5.0  # % utilisation under which a sample counts as the GPU idle


def _q(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1)


@dataclass
class _GpuSamples:
    """One GPU's samples, gathered before its figures are taken."""

    name: str | None
    total: int | None
    util: list[float] = field(default_factory=list)
    step_util: list[float] = field(default_factory=list)  # while steps ran
    mem: int = 0
    job_mem: int = 0
    power: list[float] = field(default_factory=list)


def system_report(s: Session) -> System:
    samples = list(s.samples)
    series = s.steps.current
    window = (series.times[0], series.times[-1]) if series is not None and len(series) >= 2 else None
    per: dict[int, _GpuSamples] = {}
    for ev in samples:
        stepping = window is not None and window[0] <= ev.t <= window[1]
        for g in ev.gpus or []:
            d = per.setdefault(g.index if g.index is not None else -1, _GpuSamples(g.name, g.mem_total))
            if g.util is not None:
                d.util.append(g.util)
                if stepping:
                    d.step_util.append(g.util)
            d.mem = max(d.mem, g.mem_used or 0)
            d.job_mem = max(d.job_mem, g.proc_mem or 0)
            if g.power_w is not None:
                d.power.append(g.power_w)
    gpus = [_gpu(index, d) for index, d in sorted(per.items())]
    cpu = [ev.cpu_percent for ev in samples if ev.cpu_percent is not None]
    rss = [ev.tree_rss or ev.rss or 0 for ev in samples]
    return {
        "samples": len(samples),
        "gpus": gpus,
        # why there are no GPU figures: no NVIDIA driver or GPU, NVML missing (None: GPUs were sampled)
        "no_gpu": None if gpus else (s.meta.gpu_error or ("no samples" if not samples else "no GPU was sampled")),
        "cpu_percent_mean": round(sum(cpu) / len(cpu), 1) if cpu else None,
        "cpu_percent_peak": round(max(cpu), 1) if cpu else None,
        "cpus": next((ev.cpus for ev in reversed(samples) if ev.cpus), None),
        "rss_peak_bytes": max(rss) if rss and max(rss) > 0 else None,
    }


def _gpu(index: int, d: _GpuSamples) -> Gpu:
    util, step_util = d.util, d.step_util
    return {
        "index": index,
        "name": d.name,
        "samples": len(util),
        "util_mean": round(sum(util) / len(util), 1) if util else None,
        "util_p10": _q(util, 0.1),
        "util_p90": _q(util, 0.9),
        "memory_peak_bytes": d.mem or None,
        "memory_total_bytes": d.total,
        "job_memory_peak_bytes": d.job_mem or None,
        "power_mean_w": round(sum(d.power) / len(d.power), 1) if d.power else None,
        # the share of the samples taken while steps ran in which this GPU was idle
        "idle_share_while_stepping": round(sum(1 for u in step_util if u < IDLE_UTIL) / len(step_util), 3)
        if step_util
        else None,
    }
