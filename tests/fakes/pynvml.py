"""A stand-in for ``pynvml`` (nvidia-ml-py) on machines without an NVIDIA GPU.

Put ``tests/fakes`` first on the ``PYTHONPATH`` of a ``ctmon`` process and its
GPU sampler (ctmon/samplers/gpu.py) imports this module instead of the real
one; everything above that seam -- samples, the store, findings, the TUI --
runs unchanged. Only the calls the sampler makes are implemented.

The fake GPUs are configured through environment variables, read on every
call (so a test can also change them in-process):

    CTMON_FAKE_NVML_COUNT      number of GPUs (default 1; 0 = "no NVIDIA GPU")
    CTMON_FAKE_NVML_FAIL       "init": nvmlInit() raises, as without a driver
    CTMON_FAKE_NVML_NAME       device name (default "NVIDIA H100 80GB HBM3 (fake)")
    CTMON_FAKE_NVML_UTIL       GPU utilisation in % (default 0)
    CTMON_FAKE_NVML_MEM_UTIL   memory-controller utilisation in % (default 0)
    CTMON_FAKE_NVML_MEM_TOTAL  memory in bytes (default 80 GiB)
    CTMON_FAKE_NVML_MEM_USED   memory in use in bytes (default 2 GiB)
    CTMON_FAKE_NVML_PROC_MEM   memory each process of the job uses, in bytes
                               (default 1 GiB; 0 = list no processes)
    CTMON_FAKE_NVML_POWER_W    power draw in watts (default 300)
    CTMON_FAKE_NVML_POWER_LIMIT_W  enforced power limit in watts (default 700)
    CTMON_FAKE_NVML_TEMP_C     temperature in degrees C (default 55)
    CTMON_FAKE_NVML_SM_CLOCK   SM clock in MHz (default 1755)
    CTMON_FAKE_NVML_UNSUPPORTED  comma-separated queries that raise NVMLError
                               ("Not Supported"), as on some boards: any of
                               util, mem, power, power_limit, temp, clock, procs

Per-device values: every numeric variable also takes a comma-separated list,
one value per GPU index (the last one repeats), e.g.
``CTMON_FAKE_NVML_UTIL=95,5``.

GPU processes: the fake reports every descendant of the process that
imported it (psutil) as a compute process on each GPU. Imported by the ctmon
supervisor's sampler, that is the job's process tree, so the job counts as
using the GPU (``proc_mem`` > 0 in samples).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1

_GIB = 1024**3


class NVMLError(Exception):
    """Raised like pynvml's: ``str(e)`` is NVML's message."""

    def __init__(self, message: str = "Unknown Error") -> None:
        super().__init__(message)
        self.value = message

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class _Handle:
    index: int


@dataclass
class _Utilization:
    gpu: int
    memory: int


@dataclass
class _Memory:
    total: int
    used: int
    free: int


@dataclass
class _Process:
    pid: int
    usedGpuMemory: int  # noqa: N815 - pynvml's name


_state = {"initialised": False}


def _values(name: str, default: str) -> list[str]:
    raw = os.environ.get(name, "") or default
    return [v.strip() for v in raw.split(",") if v.strip()] or [default]


def _num(name: str, default: float, index: int = 0) -> float:
    vals = _values(name, str(default))
    try:
        return float(vals[min(index, len(vals) - 1)])
    except ValueError:
        return float(default)


def _check(handle: object, query: str) -> int:
    if not _state["initialised"]:
        raise NVMLError("Uninitialized")
    if not isinstance(handle, _Handle) or not 0 <= handle.index < nvmlDeviceGetCount():
        raise NVMLError("Invalid Argument")
    unsupported = {q.strip() for q in os.environ.get("CTMON_FAKE_NVML_UNSUPPORTED", "").split(",")}
    if query in unsupported:
        raise NVMLError("Not Supported")
    return handle.index


def nvmlInit() -> None:  # noqa: N802 - pynvml's names
    if os.environ.get("CTMON_FAKE_NVML_FAIL") == "init":
        raise NVMLError("Driver Not Loaded")
    _state["initialised"] = True


def nvmlShutdown() -> None:  # noqa: N802
    if not _state["initialised"]:
        raise NVMLError("Uninitialized")
    _state["initialised"] = False


def nvmlSystemGetDriverVersion() -> str:  # noqa: N802
    if not _state["initialised"]:
        raise NVMLError("Uninitialized")
    return "550.54.15"


def nvmlDeviceGetCount() -> int:  # noqa: N802
    if not _state["initialised"]:
        raise NVMLError("Uninitialized")
    return max(0, int(_num("CTMON_FAKE_NVML_COUNT", 1)))


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:  # noqa: N802
    if not _state["initialised"]:
        raise NVMLError("Uninitialized")
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError("Invalid Argument")
    return _Handle(index)


def nvmlDeviceGetName(handle: _Handle) -> str:  # noqa: N802
    i = _check(handle, "name")
    names = _values("CTMON_FAKE_NVML_NAME", "NVIDIA H100 80GB HBM3 (fake)")
    return names[min(i, len(names) - 1)]


def nvmlDeviceGetUtilizationRates(handle: _Handle) -> _Utilization:  # noqa: N802
    i = _check(handle, "util")
    return _Utilization(gpu=int(_num("CTMON_FAKE_NVML_UTIL", 0, i)), memory=int(_num("CTMON_FAKE_NVML_MEM_UTIL", 0, i)))


def nvmlDeviceGetMemoryInfo(handle: _Handle) -> _Memory:  # noqa: N802
    i = _check(handle, "mem")
    total = int(_num("CTMON_FAKE_NVML_MEM_TOTAL", 80 * _GIB, i))
    used = min(total, int(_num("CTMON_FAKE_NVML_MEM_USED", 2 * _GIB, i)))
    return _Memory(total=total, used=used, free=total - used)


def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:  # noqa: N802
    i = _check(handle, "power")
    return int(_num("CTMON_FAKE_NVML_POWER_W", 300, i) * 1000)  # milliwatts, as NVML


def nvmlDeviceGetEnforcedPowerLimit(handle: _Handle) -> int:  # noqa: N802
    i = _check(handle, "power_limit")
    return int(_num("CTMON_FAKE_NVML_POWER_LIMIT_W", 700, i) * 1000)


def nvmlDeviceGetTemperature(handle: _Handle, sensor: int) -> int:  # noqa: N802
    i = _check(handle, "temp")
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError("Invalid Argument")
    return int(_num("CTMON_FAKE_NVML_TEMP_C", 55, i))


def nvmlDeviceGetClockInfo(handle: _Handle, clock: int) -> int:  # noqa: N802
    i = _check(handle, "clock")
    if clock != NVML_CLOCK_SM:
        raise NVMLError("Invalid Argument")
    return int(_num("CTMON_FAKE_NVML_SM_CLOCK", 1755, i))


def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[_Process]:  # noqa: N802
    i = _check(handle, "procs")
    used = int(_num("CTMON_FAKE_NVML_PROC_MEM", _GIB, i))
    if used <= 0:
        return []
    import psutil

    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    return [_Process(pid=k.pid, usedGpuMemory=used) for k in kids]
