"""The vision encoder on a unit of its own (an NPU, a GPU): ``servers`` encoders and one queue.

A request whose image stages are done on a CPU core waits here in arrival order for a free
encoder, runs its ``encode`` stage (drawn from the fitted model, stretched by the unit's clock
``scale`` at its start) and goes on to the engine. An ``encode`` stage on the CPU stages' own unit
is not this: it runs inside the worker (:mod:`sim.core.cpu_pool`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.core.service import ServiceTime


class EncoderUnit:
    """``servers`` encoders; ``on_busy(unit, ±1)`` when one starts or stops working, ``on_done(job)``
    when a job's image is encoded (its ``encode_end_s`` and ``preproc_end_s`` stamped)."""

    def __init__(self, loop: EventLoop, servers: int, unit: int, encode: ServiceTime,
                 on_busy: Callable[[int, int], None], on_done: Callable[[Job], None]) -> None:
        self.loop = loop
        self.servers = servers
        self.unit = unit  # the unit whose power the encoders draw (a migration may change it)
        self.encode = encode
        self.on_busy = on_busy
        self.on_done = on_done
        self.scale = 1.0  # the unit's clock stretch of work started now (DVFS)
        self.free = servers
        self.queue: deque[Job] = deque()
        self.mean_s = 0.0  # running mean of encode times at nominal clock (the queue estimate)
        self._done_cb: Callable[[Any], None] = self._done  # bound once

    @property
    def busy(self) -> int:
        """Encoders at work."""
        return self.servers - self.free

    def submit(self, job: Job) -> None:
        """Encode ``job`` on a free encoder, or queue it."""
        if self.free:
            self._start(job, True)
        else:
            self.queue.append(job)

    def _start(self, job: Job, newly_busy: bool) -> None:
        if newly_busy:
            self.free -= 1
            self.on_busy(self.unit, 1)
        d = self.encode.sample(job)
        m = self.mean_s
        self.mean_s = m + 0.05 * (d - m)
        loop = self.loop
        loop.at(loop.now + d * self.scale, self._done_cb, job)

    def _done(self, arg: Any) -> None:
        job: Job = arg
        if self.queue:  # the encoder goes straight to the next job: power unchanged
            self._start(self.queue.popleft(), False)
        else:
            self.free += 1
            self.on_busy(self.unit, -1)
        now = self.loop.now
        job.rec.encode_end_s = now
        job.rec.preproc_end_s = now
        self.on_done(job)
