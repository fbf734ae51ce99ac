"""The machine the UI runs on: CPU and memory via psutil, GPUs via NVML when present.

Shown in the system panel next to what the watched server reports about itself, because on an
edge box the UI, the server and the load generator often share the same few cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import psutil


@dataclass(slots=True, frozen=True)
class GpuStats:
    name: str
    util_percent: float
    mem_used_bytes: int
    mem_total_bytes: int
    temp_c: float | None = None


@dataclass(slots=True, frozen=True)
class HostStats:
    """One reading of this host.

    Attributes:
        cpu_percent: Busy share of all cores since the previous reading (0..100).
        per_cpu_percent: The same per core.
        mem_percent: Memory in use (0..100).
        gpus: One entry per NVIDIA GPU; empty without NVML.
        gpu_note: Why ``gpus`` is empty, for people.
    """

    cpu_percent: float
    per_cpu_percent: tuple[float, ...]
    mem_percent: float
    gpus: tuple[GpuStats, ...] = ()
    gpu_note: str = ""


class HostProbe(Protocol):
    def read(self) -> HostStats: ...


class PsutilProbe:
    """Reads this host with psutil and, where the ``pynvml`` module and a driver exist, NVML."""

    def __init__(self) -> None:
        psutil.cpu_percent(percpu=True)  # primes the counters: the first call reports 0
        self._nvml: Any = None
        self._gpu_note = "no NVIDIA GPU (NVML not available)"
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
        except Exception:  # no module, no driver, no device: all mean "no GPU figures"
            self._nvml = None

    def read(self) -> HostStats:
        per = tuple(psutil.cpu_percent(percpu=True))
        mem = psutil.virtual_memory().percent
        gpus = self._read_gpus()
        return HostStats(
            cpu_percent=sum(per) / len(per) if per else 0.0,
            per_cpu_percent=per,
            mem_percent=mem,
            gpus=gpus,
            gpu_note="" if gpus else self._gpu_note,
        )

    def _read_gpus(self) -> tuple[GpuStats, ...]:
        nv = self._nvml
        if nv is None:
            return ()
        out = []
        try:
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                util = nv.nvmlDeviceGetUtilizationRates(h)
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                name = nv.nvmlDeviceGetName(h)
                temp = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
                out.append(
                    GpuStats(str(name), float(util.gpu), int(mem.used), int(mem.total), float(temp))
                )
        except Exception as e:  # a GPU that went away mid-run
            self._gpu_note = f"NVML error: {e}"
            return ()
        return tuple(out)


class FixedProbe:
    """A host that always reads the same (snapshot tests must not depend on this machine)."""

    def __init__(self, stats: HostStats) -> None:
        self.stats = stats

    def read(self) -> HostStats:
        return self.stats
