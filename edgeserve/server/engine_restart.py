"""An engine that comes back: a dead vLLM engine is replaced without restarting the server.

vLLM's EngineCore is a process of its own; the kernel's OOM killer, a SIGKILL or a fatal error
in a kernel ends it, and vLLM cannot restart it in place: its ``AsyncLLM`` client stays
``errored`` for good. The frontend, the preprocessing workers and the listener are still fine,
so the server replaces only the engine::

    serving ──EngineCore dies──▶ restarting ──new engine up, warmed──▶ serving
                                   │ the dead engine's requests: 503 with the reason
                                   │ new requests: 503 + Retry-After; /health 503
                                   │ the dead engine's processes and /dev/shm queues removed

A new engine that cannot start (the machine out of memory, say) ends the server with status 1,
as a dead engine did before; a supervisor then restarts the whole server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import psutil

from edgeserve.config import EngineCorePlacement
from edgeserve.console import say
from edgeserve.placement import colocate_engine_core
from edgeserve.server.context import ServerContext
from edgeserve.tracing import engine_pids
from edgeserve.warmup import warm_up

log = logging.getLogger("edgeserve.serve")

ENGINE_CHECK_INTERVAL_S = 0.5
HELD_REQUESTS_GRACE_S = 10.0  # for the dead engine's requests to be answered before shutdown
LEFTOVER_GRACE_S = 5.0  # for the dead engine's processes to exit before they are killed


def engine_processes(ctx: ServerContext) -> list[psutil.Process]:
    """vLLM's processes of the current engine (EngineCore, its model worker), not the workers."""
    workers = {p for p in ctx.preproc.worker_pids() if p is not None}
    out = []
    for pid in engine_pids(workers).values():
        with contextlib.suppress(psutil.Error):
            out.append(psutil.Process(pid))
    return out


async def watch_engine(ctx: ServerContext) -> None:
    """Replace the engine whenever it dies, until the server stops."""
    ctx.engine_processes = engine_processes(ctx)
    while not ctx.stop.is_set():
        if ctx.engine.errored and not ctx.draining:
            await restart_engine(ctx)
        await asyncio.sleep(ENGINE_CHECK_INTERVAL_S)


async def restart_engine(ctx: ServerContext) -> None:
    """Fail what the dead engine held, clean up after it, start and warm a new one."""
    start = time.monotonic()
    ctx.engine_restarting = True
    ctx.engine_restarts += 1
    say(f"the vLLM engine has died (restart {ctx.engine_restarts}); its requests get 503, a new "
        "engine is starting", error=True)
    # the requests the dead engine held fail with EngineDeadError in their handlers (503)
    deadline = time.monotonic() + HELD_REQUESTS_GRACE_S
    while ctx.engine_waiters > 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.to_thread(ctx.engine.shutdown)  # removes vLLM's /dev/shm queues
    await asyncio.to_thread(_end_leftovers, ctx.engine_processes)
    try:
        await asyncio.to_thread(ctx.engine.start)
        if ctx.config.warmup:
            await warm_up(ctx.config, ctx.engine, ctx.preproc)
    except Exception as e:
        log.error("a new vLLM engine could not start (%s: %s); shutting down",
                  type(e).__name__, e)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(ctx.engine.shutdown)
        ctx.engine_has_died()
        return
    if ctx.config.engine_core_placement is EngineCorePlacement.WITH_WORKER:
        moved = colocate_engine_core({p for p in ctx.preproc.worker_pids() if p is not None})
        if moved is not None:
            say(moved.line())
    ctx.engine_processes = engine_processes(ctx)
    ctx.engine_restarting = False
    say(f"a new vLLM engine serves (restart {ctx.engine_restarts}, "
        f"{time.monotonic() - start:.1f} s after the old one died)")


def _end_leftovers(processes: list[psutil.Process]) -> None:
    """The dead engine's processes that outlived it (its model worker, orphaned when EngineCore
    was killed) get ``LEFTOVER_GRACE_S`` to exit, then SIGKILL."""
    alive = [p for p in processes if _running(p)]
    _, alive = psutil.wait_procs(alive, timeout=LEFTOVER_GRACE_S)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=LEFTOVER_GRACE_S)


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
