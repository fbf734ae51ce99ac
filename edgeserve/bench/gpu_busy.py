"""How busy the GPU was during a run, from ``nvidia-smi`` sampled every 200 ms.

NVML's *utilization* is the fraction of a sample period in which a kernel ran on the GPU — a
busy fraction, not a measure of how many SMs were used. It is what ``nvidia-smi`` prints and the
only GPU figure both stock vLLM and edgeserve can be measured with from outside. The sampler
runs ``nvidia-smi --query-gpu=timestamp,utilization.gpu -lms 200`` into a file for the whole
comparison; :meth:`GpuBusySampler.mean` averages the samples inside a run's window. Without
``nvidia-smi`` (a CPU machine) every figure is ``None``.
"""

from __future__ import annotations

import shutil
import subprocess
from datetime import datetime
from pathlib import Path

QUERY = ["--query-gpu=timestamp,utilization.gpu", "--format=csv,noheader,nounits"]


def parse_samples(text: str) -> list[tuple[float, float]]:
    """``nvidia-smi`` CSV lines → (epoch seconds, busy fraction 0–1); other lines skipped."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2:
            continue
        try:
            ts = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((ts, float(parts[1].split()[0]) / 100.0))
        except (ValueError, IndexError):
            continue
    return out


def mean_in(samples: list[tuple[float, float]], t0_s: float, t1_s: float) -> float | None:
    """The mean busy fraction of the samples taken in ``[t0_s, t1_s]`` (None: none there)."""
    inside = [u for t, u in samples if t0_s <= t <= t1_s]
    return sum(inside) / len(inside) if inside else None


class GpuBusySampler:
    """``nvidia-smi`` in the background, writing to ``log_path`` until :meth:`stop`."""

    def __init__(self, log_path: Path, interval_ms: int = 200) -> None:
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        tool = shutil.which("nvidia-smi")
        if tool is None:
            return
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen([tool, *QUERY, f"--loop-ms={interval_ms}"], stdout=log,
                                         stderr=subprocess.DEVNULL)

    def mean(self, t0_s: float, t1_s: float) -> float | None:
        if self.proc is None:
            return None
        try:
            return mean_in(parse_samples(self.log_path.read_text()), t0_s, t1_s)
        except OSError:
            return None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def device_name() -> str | None:
    """The first GPU's name (``NVIDIA H200``), None without ``nvidia-smi``."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    done = subprocess.run([tool, "--query-gpu=name,memory.total", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=30)
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else None
