"""Where each replica runs: its GPUs (``CUDA_VISIBLE_DEVICES``) or its CPU cores.

``edgeserve serve --replicas N --tensor-parallel-size T`` needs ``N × T`` GPUs on a GPU host:
replica ``i`` sees GPUs ``i·T … i·T + T − 1`` of the visible ones (with ``T = 1``, replica ``i``
gets ``CUDA_VISIBLE_DEVICES=i``), so the replicas never share a GPU. Each replica also gets its
own slice of the cores this process may use (``cores // N`` each, pinned with the process's
affinity, which vLLM's CPU build and edgeserve's default worker count both follow): on the CPU
build an engine's threads never spin on another replica's cores, and on a GPU host each replica's
preprocessing workers are sized to its share of the cores instead of all of them. A layout that does not fit is refused
before anything starts, in one paragraph (:class:`~edgeserve.config.ConfigError`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from edgeserve.config import ConfigError
from edgeserve.hardware import Platform


@dataclass(slots=True, frozen=True)
class ReplicaSlot:
    """What one replica may use: GPU ids (GPU host) or CPU cores (CPU build)."""

    index: int
    gpus: tuple[str, ...] = ()  # CUDA_VISIBLE_DEVICES entries; empty on the CPU build
    cores: tuple[int, ...] = ()  # CPU affinity of the replica's processes; empty: all

    def env(self) -> dict[str, str]:
        """The environment the replica's server starts with (its GPUs, where it has any)."""
        return {"CUDA_VISIBLE_DEVICES": ",".join(self.gpus)} if self.gpus else {}

    def describe(self) -> str:
        if self.gpus:
            return f"GPU {','.join(self.gpus)}" + (f", cores {_ranges(self.cores)}"
                                                   if self.cores else "")
        return f"core{'s' if len(self.cores) != 1 else ''} {_ranges(self.cores)}"


def plan_replicas(replicas: int, tp: int, platform: Platform, cores: Sequence[int],
                  gpus: Sequence[str]) -> list[ReplicaSlot]:
    """One slot per replica, or :class:`ConfigError` saying why ``replicas × tp`` does not fit."""
    if replicas < 1 or tp < 1:
        raise ConfigError(f"need --replicas >= 1 and --tensor-parallel-size >= 1, got {replicas} "
                          f"and {tp}")
    need = replicas * tp
    if platform is Platform.GPU:
        if need > len(gpus):
            raise ConfigError(
                f"{replicas} replica(s) of tensor-parallel size {tp} need {need} GPUs (each "
                f"replica its own {tp}, never shared), but this host shows {len(gpus)} "
                f"({'CUDA_VISIBLE_DEVICES=' + ','.join(gpus) if gpus else 'none visible'}). "
                "Lower --replicas or --tensor-parallel-size so that replicas x size <= "
                f"{len(gpus)}, or make more GPUs visible.")
        share = len(cores) // replicas  # 0: too few cores to split, all share them
        return [ReplicaSlot(i, gpus=tuple(gpus[i * tp:(i + 1) * tp]),
                            cores=tuple(cores[i * share:(i + 1) * share])) for i in range(replicas)]
    if need > len(cores):
        raise ConfigError(
            f"{replicas} replica(s) of tensor-parallel size {tp} on vLLM's CPU build need at "
            f"least {need} cores (a core of its own for each engine rank; the preprocessing "
            f"workers share them), but this process may use {len(cores)} ({_ranges(cores)}). "
            "Lower --replicas or --tensor-parallel-size so that replicas x size <= "
            f"{len(cores)}, or run on a machine with more cores (taskset or a container's CPU "
            "limit can hide some).")
    share = len(cores) // replicas
    return [ReplicaSlot(i, cores=tuple(cores[i * share:(i + 1) * share]))
            for i in range(replicas)]


def visible_gpus() -> list[str]:
    """The GPU ids a child process may be given: ``CUDA_VISIBLE_DEVICES``'s entries where it is
    set, otherwise ``0 … n − 1`` for the devices torch counts (imports torch)."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [g.strip() for g in given.split(",") if g.strip() and g.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def allowed_core_ids() -> list[int]:
    """The cores this process may run on, in order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _ranges(cores: Sequence[int]) -> str:
    """``0-3,6`` for cores 0, 1, 2, 3, 6 (taskset's notation)."""
    out: list[str] = []
    for c in sorted(cores):
        if out and "-" in out[-1] and int(out[-1].split("-")[1]) == c - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        elif out and "-" not in out[-1] and int(out[-1]) == c - 1:
            out[-1] = f"{out[-1]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out) or "none"
