"""The server's shared state, built once at start-up and handed to every route."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from edgeserve.config import ServeConfig
from edgeserve.engine import Engine
from edgeserve.preproc_pool.inline import InlinePreproc
from edgeserve.preproc_pool.pool import PreprocPool
from edgeserve.server.admission import Admission
from edgeserve.server.media import MediaPolicy
from edgeserve.stalls import StallMeter
from edgeserve.tracing import Recorder

log = logging.getLogger("edgeserve.serve")


@dataclass(slots=True)
class ServerContext:
    config: ServeConfig
    engine: Engine
    preproc: PreprocPool | InlinePreproc
    meter: StallMeter
    recorder: Recorder
    media: MediaPolicy
    host: str
    admission: Admission
    inflight: int = 0
    draining: bool = False
    stop: asyncio.Event = field(default_factory=asyncio.Event)  # set: drain and shut down
    engine_died: bool = False  # the shutdown was caused by the engine's death (exit status 1)
    engine_restarting: bool = False  # a dead engine is being replaced (engine_restart)
    engine_restarts: int = 0
    engine_waiters: int = 0  # requests handed to the engine and not yet answered
    engine_processes: list[Any] = field(default_factory=list)  # psutil.Process of vLLM's
    handler_tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    started_s: float = field(default_factory=time.monotonic)
    _last_busy: list[float] = field(default_factory=list)
    _last_busy_t: float = field(default_factory=time.monotonic)

    def engine_has_died(self) -> None:
        """Stop the server without a drain (no new engine could start); it exits with status 1
        (see ``app.serve``)."""
        if not self.engine_died:
            log.error("no vLLM engine can serve; shutting down (exit status 1)")
        self.engine_died = True
        self.stop.set()

    def snapshot(self) -> dict[str, Any]:
        """Queue depths and worker state for the resource sampler."""
        now = time.monotonic()
        p = self.preproc
        if isinstance(p, PreprocPool):
            busy_now = [s.busy_s(now) for s in p.slots]
            stage = [s.stage for s in p.slots]
        else:
            busy_now = [p.busy_total_s]
            stage = ["preproc" if p.running else "idle"]
        dt = now - self._last_busy_t
        if len(self._last_busy) != len(busy_now):
            self._last_busy = [0.0] * len(busy_now)
        fractions = [min(1.0, max(0.0, (b - a) / dt)) if dt > 0 else 0.0
                     for a, b in zip(self._last_busy, busy_now, strict=True)]
        self._last_busy, self._last_busy_t = busy_now, now
        return {
            "preproc_queue": p.queued + self.admission.waiting,  # waiting for a slot, too
            "preproc_running": p.running,
            "engine_waiting": self.engine.state.waiting,
            "engine_running": self.engine.state.running,
            "inflight": self.inflight,
            "worker_busy": fractions,
            "worker_stage": stage,
            "worker_pids": p.worker_pids(),
        }
