"""Where vLLM's EngineCore process runs: on its model worker's cores, not on the pool's.

vLLM's CPU build binds the model worker (the process that runs the steps, ``VLLM::Worker``) to the
cores its OMP threads use — on a 2-core host core 0 — and leaves the EngineCore process (the
scheduler, ``VLLM::EngineCore``) free to run anywhere. While a step runs, the EngineCore waits for
the worker's result on a shared-memory queue by spinning: ``SpinCondition.wait`` in vLLM's
``shm_broadcast.py`` calls ``sched_yield`` in a loop for a second after each read. On an idle core
that costs nothing; on the core the preprocessing workers and the frontend use it is a competitor.
Measured on the 2-core dev machine (12 MP photos at 2 req/s, docs/runtime.md "Where the
EngineCore runs"): the EngineCore used 42 % of a core; moved onto the model worker's core, where
the worker is always runnable while a step runs and ``sched_yield`` hands it the core, 3 %, with
the worker's own CPU and the step times unchanged (within 2 %). A first probe had also seen
preprocessing jobs beside a step take 40-53 % longer with vLLM's placement; a later run only 7-9 %.

Nothing is lost by the move: the EngineCore and the model worker take turns (the worker computes a
step, the EngineCore reads the result and schedules the next one), so they never need a core at the
same time. :func:`colocate_engine_core` does it once the engine is up, for every thread of the
EngineCore (threads it starts later inherit the mask), and only where the model worker's cores are
a strict subset of the EngineCore's — a GPU host, where the worker may run anywhere, is left as it
is. ``edgeserve serve --engine-core-placement any`` leaves vLLM's placement alone.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import psutil

from edgeserve.tracing import engine_pids


@dataclass(frozen=True, slots=True)
class Moved:
    """What :func:`colocate_engine_core` did."""

    pid: int
    cores_before: tuple[int, ...]
    cores_after: tuple[int, ...]
    threads: int

    def line(self) -> str:
        def cores(c: tuple[int, ...]) -> str:
            return ",".join(map(str, c))

        return (f"vLLM's EngineCore (pid {self.pid}, {self.threads} threads) moved from cores "
                f"{cores(self.cores_before)} to {cores(self.cores_after)}, its model worker's, off "
                "the preprocessing workers' (--engine-core-placement any keeps vLLM's placement)")


def colocate_engine_core(exclude: set[int]) -> Moved | None:
    """Pin every thread of the server's EngineCore to its model worker's cores.

    ``exclude``: pids that are not vLLM's (the preprocessing workers). Returns what moved, or
    None when there is nothing to do: no EngineCore or model worker process (vLLM's uniprocess
    executor runs the model inside the EngineCore), or a worker allowed on at least every core
    the EngineCore may use.
    """
    pids = engine_pids(exclude)
    if "engine" not in pids or "engine_worker" not in pids:
        return None
    try:
        core = psutil.Process(pids["engine"])
        before = frozenset(core.cpu_affinity() or [])
        target = frozenset(psutil.Process(pids["engine_worker"]).cpu_affinity() or [])
        if not target or not target < before:
            return None
        threads = core.threads()
    except psutil.Error:
        return None
    moved = 0
    for t in threads:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(t.id, target)
            moved += 1
    if not moved:
        return None
    return Moved(pids["engine"], tuple(sorted(before)), tuple(sorted(target)), moved)
