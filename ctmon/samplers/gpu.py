"""GPU utilisation, memory, power and temperature through NVML (pynvml,
from the nvidia-ml-py package), plus the job's own GPU memory.

NVML errors never escape: a failed query becomes None ("N/A" on screen), and
a machine without NVML or without GPUs reports that state once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_PIDS = 256  # processes of the job listed per GPU


class GpuSampler:
    def __init__(self) -> None:
        self.error: str | None = None
        self._no_v2 = False
        self._nv: Any = None
        self._handles: list[Any] = []
        self.names: list[str] = []
        try:
            import pynvml
        except Exception as e:  # ImportError, or a broken install
            self.error = f"pynvml not available ({type(e).__name__})"
            return
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self.names = [_text(_safe(pynvml.nvmlDeviceGetName, h)) or f"GPU {i}" for i, h in enumerate(self._handles)]
            self.driver = _text(_safe(pynvml.nvmlSystemGetDriverVersion))
            self._nv = pynvml
            if not self._handles:
                self.error = "no NVIDIA GPU"
        except Exception as e:
            self.error = _nvml_message(e)

    @property
    def available(self) -> bool:
        return self._nv is not None and bool(self._handles)

    def sample(self, pids: Iterable[int] = ()) -> list[dict[str, Any]]:
        nv = self._nv
        if nv is None:
            return []
        pidset = set(pids)
        out = []
        for i, h in enumerate(self._handles):
            g: dict[str, Any] = {"index": i, "name": self.names[i]}
            util = _safe(nv.nvmlDeviceGetUtilizationRates, h)
            g["util"] = getattr(util, "gpu", None)
            g["mem_util"] = getattr(util, "memory", None)
            mem = self._memory(h)
            g["mem_used"] = getattr(mem, "used", None)
            g["mem_total"] = getattr(mem, "total", None)
            power = _safe(nv.nvmlDeviceGetPowerUsage, h)
            g["power_w"] = power / 1000.0 if isinstance(power, (int, float)) else None
            limit = _safe(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            g["power_limit_w"] = limit / 1000.0 if isinstance(limit, (int, float)) else None
            g["temp_c"] = _safe(nv.nvmlDeviceGetTemperature, h, getattr(nv, "NVML_TEMPERATURE_GPU", 0))
            g["sm_clock_mhz"] = _safe(nv.nvmlDeviceGetClockInfo, h, getattr(nv, "NVML_CLOCK_SM", 1))
            g["proc_mem"], g["pid_mem"] = self._proc_mem(h, pidset)
            out.append(g)
        return out

    def _memory(self, handle: Any) -> Any:
        """Memory info as nvidia-smi counts it: NVML's v2 call leaves the
        driver's reserved memory out of "used" (v1 includes it, ~0.5 GiB on an
        H100); fall back to v1 on drivers or bindings without v2."""
        nv = self._nv
        v2 = getattr(nv, "nvmlMemory_v2", None)
        if v2 is not None and not self._no_v2:
            try:
                return nv.nvmlDeviceGetMemoryInfo(handle, version=v2)
            except Exception:
                self._no_v2 = True
        return _safe(nv.nvmlDeviceGetMemoryInfo, handle)

    def _proc_mem(self, handle: Any, pids: set[int]) -> tuple[int | None, dict[int, int] | None]:
        """The job tree's memory on this GPU, and each of its processes' (a
        distributed job's ranks); None if NVML cannot tell.

        In a container NVML may report host PIDs, which match none of ours:
        that is "unknown", not zero.
        """
        if not pids:
            return None, None
        nv = self._nv
        procs = _safe(nv.nvmlDeviceGetComputeRunningProcesses, handle)
        if procs is None:
            return None, None
        total = 0
        each: dict[int, int] = {}
        for p in procs:
            pid = getattr(p, "pid", None)
            if pid in pids:
                used = getattr(p, "usedGpuMemory", None)
                if isinstance(used, int):
                    total += used
                    if len(each) < MAX_PIDS:
                        each[pid] = each.get(pid, 0) + used
                else:
                    each.setdefault(pid, 0)
        if each:
            return total, each
        return (0, None) if not procs else (None, None)

    def close(self) -> None:
        if self._nv is not None:
            try:
                self._nv.nvmlShutdown()
            except Exception:
                pass


def _safe(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def _text(v: object) -> str | None:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v if isinstance(v, str) else None


def _nvml_message(e: Exception) -> str:
    text = str(e) or type(e).__name__
    if "Driver Not Loaded" in text or "Library Not Found" in text or "libnvidia-ml" in text:
        return "no NVIDIA driver (NVML not found)"
    return f"NVML unavailable: {text}"
