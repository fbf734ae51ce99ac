"""Serving one model as N replicas behind one endpoint (``edgeserve serve --replicas N``).

:mod:`.plan` gives each replica its GPUs or cores, :mod:`.replica` runs each as a server of its
own, :mod:`.router` routes requests over them and answers ``/health`` and ``/metrics`` for all.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from edgeserve.config import ServeConfig
from edgeserve.hardware import Platform, vllm_platform
from edgeserve.replicas.plan import ReplicaSlot, allowed_core_ids, plan_replicas, visible_gpus

START_TIMEOUT_S = 900.0  # every replica's engine start, model load and warm-up


def slots_for(cfg: ServeConfig, platform: Platform | None = None) -> list[ReplicaSlot]:
    """Where each of ``cfg.replicas`` replicas runs on this machine (ConfigError if they do not fit)."""
    platform = platform if platform is not None else vllm_platform()
    gpus = visible_gpus() if platform is Platform.GPU else []
    return plan_replicas(cfg.replicas, cfg.engine.tensor_parallel_size, platform,
                         allowed_core_ids(), gpus)


def log_dir_for(cfg: ServeConfig) -> Path:
    """Where the replicas' configuration files and logs go: beside --engine-log, else $TMPDIR."""
    if cfg.engine_log:
        p = Path(cfg.engine_log)
        return p.with_name(p.stem + "-replicas")
    return Path(tempfile.gettempdir()) / f"edgeserve-replicas-{cfg.port}-{os.getpid()}"


def run(cfg: ServeConfig, slots: list[ReplicaSlot], workers_given: int | None) -> int:
    """Serve ``cfg`` as ``len(slots)`` replicas until stopped; the exit status."""
    import asyncio

    from edgeserve.replicas.replica import make_replicas
    from edgeserve.replicas.router import serve_replicas

    # a worker count not given is each replica's own default, from its share of the cores
    child = dataclasses.replace(cfg, workers=workers_given)
    log_dir = log_dir_for(cfg)
    replicas = make_replicas(child, slots, log_dir)
    return asyncio.run(serve_replicas(cfg, replicas, START_TIMEOUT_S, log_dir))
