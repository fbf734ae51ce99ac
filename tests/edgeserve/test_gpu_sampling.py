"""On a machine with an NVIDIA GPU, the resource sampler reads its utilization and memory (NVML).

Needs a GPU, ``pynvml`` and torch with CUDA; elsewhere it is skipped, saying so (this 2-core dev
box has no GPU: it runs on the GPU host, see docs/device_runs.md).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from edgeserve import records
from edgeserve.metrics import Metrics
from edgeserve.stalls import StallMeter
from edgeserve.tracing import Recorder, ResourceSampler

torch = pytest.importorskip("torch")
pynvml = pytest.importorskip("pynvml")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this host")


def idle_snapshot() -> dict:
    return {"preproc_queue": 0, "preproc_running": 0, "engine_waiting": 0, "engine_running": 0,
            "inflight": 0, "worker_busy": [], "worker_stage": [], "worker_pids": []}


def test_samples_carry_gpu_utilization_and_memory(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    trace = tmp_path / "trace.jsonl"
    recorder = Recorder(str(trace), Metrics(registry), {})
    sampler = ResourceSampler(0.5, recorder, StallMeter(time.monotonic()), idle_snapshot)
    n_gpus = torch.cuda.device_count()

    idle = sampler.take()
    assert len(idle.gpu_util) == len(idle.gpu_mem_bytes) == n_gpus

    block = torch.empty(4 << 30, dtype=torch.uint8, device="cuda:0")  # 4 GiB held
    a = torch.randn(8192, 8192, device="cuda:0")
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()

    t = threading.Thread(target=load)
    t.start()
    try:
        time.sleep(1.5)  # NVML's utilization is an average over its last sample period
        busy = []
        for _ in range(3):
            time.sleep(0.5)
            busy.append(sampler.take())
    finally:
        stop.set()
        t.join()
    recorder.sample(busy[-1])
    recorder.close()

    assert max(s.gpu_util[0] for s in busy) > 0.5
    assert busy[-1].gpu_mem_bytes[0] - idle.gpu_mem_bytes[0] >= 4 << 30
    text = generate_latest(registry).decode()
    assert 'edgeserve_gpu_utilization{gpu="0"}' in text
    assert 'edgeserve_gpu_memory_used_bytes{gpu="0"}' in text
    # busy seconds accumulate as utilization × interval: most of the 1.5 s under load
    busy_s = next(float(line.split()[-1]) for line in text.splitlines()
                  if line.startswith('edgeserve_gpu_busy_seconds_total{gpu="0"}'))
    assert 0.5 < busy_s <= 0.5 * 4 + 0.1
    samples = [i for i in records.read_trace(trace) if isinstance(i, records.ResourceSample)]
    assert samples and samples[-1].gpu_mem_bytes[0] >= 4 << 30
    del block
