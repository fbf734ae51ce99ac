"""The interconnect as tensor parallelism sees it: an all-reduce timed between two GPUs.

Two processes (one per GPU) join a NCCL group (torch.distributed) and all-reduce bf16 tensors of
64 KiB to 256 MiB, each size warmed and then timed over several iterations between CUDA
synchronisations. A ring all-reduce of ``n`` bytes over ``p`` GPUs with per-hop latency ``α``
and link bandwidth ``B`` takes ``2(p − 1)·α + 2(p − 1)/p · n / B`` (the simulator's
:class:`~sim.scenario.deployment.Interconnect`); a least-squares fit of the timings to that line
gives ``B`` (GB/s, one direction per GPU: NCCL's "bus bandwidth") and ``α`` for the simulator.

    python benchmarks/allreduce_bw.py            # on a host with two GPUs
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

SIZES_BYTES = tuple(1 << k for k in range(16, 29, 2))  # 64 KiB … 256 MiB
WARMUP_ITERS = 5
TIMED_ITERS = 20


def _worker(rank: int, world: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    rows = []
    for nbytes in SIZES_BYTES:
        x = torch.ones(nbytes // 2, dtype=torch.bfloat16, device="cuda")
        for _ in range(WARMUP_ITERS):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(TIMED_ITERS):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        rows.append({"bytes": nbytes, "time_s": start.elapsed_time(end) / 1e3 / TIMED_ITERS})
    if rank == 0:
        Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


def fit(rows: list[dict[str, float]], gpus: int) -> dict[str, Any]:
    """``B`` (GB/s) and ``α`` (s) of the ring model fitted to the timings (least squares)."""
    import numpy as np

    p = gpus
    n = np.array([r["bytes"] for r in rows], dtype=float)
    t = np.array([r["time_s"] for r in rows], dtype=float)
    a = np.stack([np.full_like(n, 2 * (p - 1)), 2 * (p - 1) / p * n], axis=1)
    (alpha, inv_b), *_ = np.linalg.lstsq(a, t, rcond=None)
    largest = rows[-1]
    bus = 2 * (p - 1) / p * largest["bytes"] / largest["time_s"] / 1e9
    return {"gpus": p, "bandwidth_gb_s": float(1 / inv_b / 1e9) if inv_b > 0 else bus,
            "latency_s": max(0.0, float(alpha)), "bus_bandwidth_largest_gb_s": bus,
            "timings": rows}


def measure(gpus: int = 2) -> dict[str, Any]:
    """Time the all-reduces on ``gpus`` GPUs (one process each) and fit the ring model."""
    import torch.multiprocessing as mp

    from edgeserve.net import free_port

    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        mp.spawn(_worker, args=(gpus, free_port(), f.name), nprocs=gpus, join=True)
        rows = json.loads(Path(f.name).read_text())
    return fit(rows, gpus)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    result = measure()
    for r in result["timings"]:
        print(f"{r['bytes'] / 2**20:8.2f} MiB  {r['time_s'] * 1e6:9.1f} µs")
    print(f"fit: {result['bandwidth_gb_s']:.1f} GB/s, {result['latency_s'] * 1e6:.1f} µs per hop")
