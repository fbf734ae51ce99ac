"""The runtime's admission limits on a simulated device (a profile's ``admission:``).

A local request takes one of ``slots`` engine slots before the CPU queue and gives it back at its
first token (or when it leaves without one); while none is free it waits in arrival order in front
of preprocessing (``preproc_queue`` time in its record). Beyond ``max_inflight`` admitted, or
``max_pending`` waiting for a slot, or ``max_pending`` waiting for a preprocessing worker, it is
rejected (``Outcome.REJECTED``, an error starting ``429``, the runtime's checks in its order).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from edgeserve.records import Outcome
from sim.core.cpu_pool import CpuPool
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.scenario.profiles import AdmissionConfig


class Admission:
    """Engine slots and the 429 limits in front of ``pool``; ``on_finished(job)`` for a rejected
    request and for an admitted one that left its engine (:meth:`done`)."""

    def __init__(self, loop: EventLoop, cfg: AdmissionConfig, max_num_seqs: int, pool: CpuPool,
                 on_finished: Callable[[Job], Any]) -> None:
        self.loop = loop
        self.pool = pool
        self.on_finished = on_finished
        self.max_pending = cfg.max_pending
        self.max_inflight = cfg.max_inflight
        self.slots = cfg.max_engine_queue if cfg.max_engine_queue is not None \
            else 2 * max_num_seqs
        self.slots_held = 0  # admitted requests between their slot and their first token
        self.slot_queue: deque[Job] = deque()  # admitted, waiting for a slot (FIFO)
        self.admitted = 0  # admitted requests that have not left (the runtime's inflight)

    def admit(self, job: Job) -> None:
        """Reject ``job`` (429) beyond the limits, else give it a slot and send it to the pool,
        or queue it for a slot."""
        rec = job.rec
        now = self.loop.now
        pool = self.pool
        why = ""
        if self.admitted >= self.max_inflight:
            why = f"max_inflight {self.max_inflight} requests admitted"
        elif self.slots_held >= self.slots and len(self.slot_queue) >= self.max_pending:
            why = f"max_pending {self.max_pending} requests wait for one of {self.slots} " \
                  f"engine slots"
        elif rec.num_images and not pool.free_cores and len(pool.queue) >= self.max_pending:
            why = f"{len(pool.queue)} requests wait for a preprocessing worker " \
                  f"(max_pending {self.max_pending})"
        if why:
            rec.outcome = Outcome.REJECTED
            rec.error = f"429 server is at capacity: {why}; retry later"
            rec.finished_s = now
            self.on_finished(job)
            return
        self.admitted += 1
        rec.preproc_queued_s = now
        if self.slots_held < self.slots:  # (a free slot means nobody waits for one)
            self.slots_held += 1
            pool.submit(job)
        else:
            self.slot_queue.append(job)

    def release_slot(self) -> None:
        """A slot is given back: it passes straight to the first request waiting for one."""
        if self.slot_queue:
            self.pool.submit(self.slot_queue.popleft())
        else:
            self.slots_held -= 1

    def first_token(self, job: Job) -> None:
        """The engine's first-token hook: the request's slot is free."""
        self.release_slot()

    def done(self, job: Job) -> None:
        """An admitted request left its engine, finished or failed."""
        if job.rec.first_token_s is None:  # failed before its first token: its slot is free
            self.release_slot()
        self.admitted -= 1
        self.on_finished(job)
