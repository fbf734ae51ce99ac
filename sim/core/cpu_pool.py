"""The preprocessing workers: a pool of CPU cores, each taking one request's image stages at a time.

A request takes a free core (the lowest-numbered one freed last goes first) or waits in arrival
order; on its core it runs image decode → resize → normalize (and, when the profile's ``encode``
stage is on the same unit, the encoder after them, as the runtime's ``--encoder onnx`` does inside
the worker). Every stage's time is drawn from its fitted model and stretched by the clock's
``scale`` (DVFS) at the moment the job starts.

**Shared cores** (a profile's ``host:``): on a CPU-only server the workers and the engine's
threads share ``host_cores`` cores. Processor sharing is approximated at the start of each service:
a job started while ``busy`` workers (itself included) and, if the engine is mid-step,
``engine_threads`` want the cores takes ``max(1, demand / host_cores)`` times as long. An engine
step started while workers are busy is lengthened by :meth:`CpuPool.step_stretch` (the engine's
``stretch`` hook); a job started during a step lengthens the step by ``κ`` seconds per second of
overlap (:meth:`~sim.core.step_engine.StepEngine.extend`) — ``κ₊`` instead for a worker beyond
the ``free_cores`` the engine leaves (:class:`~sim.scenario.profiles.HostConfig`). The factors
are frozen when a service starts; they are not re-priced when demand changes during it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from sim.core.batching import Engine
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.core.service import ServiceTime
from sim.core.step_engine import StepEngine
from sim.scenario.profiles import HostConfig


class CpuPool:
    """``cores`` workers; ``on_busy(unit, ±1)`` when a core starts or stops working,
    ``on_done(job)`` when a job's image stages are done."""

    def __init__(self, loop: EventLoop, cores: int, unit: int, decode: ServiceTime,
                 resize: ServiceTime, normalize: ServiceTime, encode: ServiceTime | None,
                 host: HostConfig | None, on_busy: Callable[[int, int], None],
                 on_done: Callable[[Job], None]) -> None:
        self.loop = loop
        self.cores = cores
        self.unit = unit  # the unit whose power the workers draw (a migration may change it)
        self.decode = decode
        self.resize = resize
        self.normalize = normalize
        self.encode = encode  # the encoder inside the worker, after normalize (or None)
        self.on_busy = on_busy
        self.on_done = on_done
        self.scale = 1.0  # the clock's stretch of work started now (DVFS)
        self.free_cores = list(range(cores - 1, -1, -1))
        self.queue: deque[Job] = deque()
        self.mean_s = 0.0  # running mean of a job's time at nominal clock (the queue estimate)
        self.shared = host is not None
        self.host_cores = host.cores if host is not None else 0
        self.engine_threads = host.engine_threads if host is not None else 0
        self.step_kappa = host.step_extra_s_per_worker_s if host is not None else 0.0
        self.step_kappa_over = host.kappa_over if host is not None else 0.0
        self.spare_cores = host.free_cores if host is not None else 1  # beside a step
        self.worker_end = [0.0] * cores  # when each worker's present job ends
        self.engine: Engine | None = None  # the engine sharing the cores (host:)
        self.step_engine: StepEngine | None = None  # the same, when it runs vLLM V1 steps
        self._done_cb: Callable[[Any], None] = self._done  # bound once

    def share_with(self, engine: Engine) -> None:
        """The engine whose threads share the cores (a ``host:`` profile)."""
        self.engine = engine
        if isinstance(engine, StepEngine):
            self.step_engine = engine
            engine.stretch = self.step_stretch

    @property
    def busy(self) -> int:
        """Workers at work."""
        return self.cores - len(self.free_cores)

    def submit(self, job: Job) -> None:
        """Start ``job`` on a free core, or queue it."""
        if self.free_cores:
            self._start(job, True)
        else:
            self.queue.append(job)

    def step_stretch(self, step_s: float) -> float:
        """An engine step of ``step_s`` starting now, lengthened for sharing the host's cores with
        the ``b`` busy workers: the larger of the cores' share,
        ``step_s × (engine_threads + b) / host_cores``, and the measured slowdown,
        ``step_s + κ × (the seconds of the step during which each worker is still busy)``, at
        ``κ₊`` for the seconds beyond ``spare_cores`` busy workers (the host's ``free_cores``;
        the overlaps all start now, so those are the seconds of all but the longest few)."""
        now = self.loop.now
        overlaps = []
        for end in self.worker_end:
            if end > now:
                overlaps.append(end - now if end - now < step_s else step_s)
        busy = len(overlaps)
        demand = self.engine_threads + busy
        share = step_s * demand / self.host_cores if demand > self.host_cores else step_s
        if busy > self.spare_cores:
            overlaps.sort(reverse=True)
            inside = sum(overlaps[:self.spare_cores])
            measured = (step_s + self.step_kappa * inside
                        + self.step_kappa_over * (sum(overlaps) - inside))
        else:
            measured = step_s + self.step_kappa * sum(overlaps)
        return measured if measured > share else share

    def _start(self, job: Job, newly_busy: bool) -> None:
        now = self.loop.now
        rec = job.rec
        rec.worker = self.free_cores.pop()
        clock = s = self.scale
        if self.shared:  # busy workers (this one included) and a stepping engine share the cores
            demand = self.cores - len(self.free_cores)
            engine = self.engine
            if engine is not None and engine.busy:
                demand += self.engine_threads
            if demand > self.host_cores:
                s *= demand / self.host_cores
        t1 = now + self.decode.sample(job) * s
        t2 = t1 + self.resize.sample(job) * s
        t3 = t2 + self.normalize.sample(job) * s
        end = t3
        enc = self.encode
        if enc is not None:
            end = t3 + enc.sample(job) * s
            rec.encode_end_s = end
        m = self.mean_s
        self.mean_s = m + 0.05 * ((end - now) / clock - m)
        rec.preproc_start_s = now
        rec.decode_end_s = t1
        rec.resize_end_s = t2
        rec.normalize_end_s = t3
        if self.shared:
            self.worker_end[rec.worker] = end
            e = self.step_engine
            if e is not None and e.stepping:
                # the running step shares the cores with this job from now; beyond the free
                # cores (this worker and the others busy) at κ₊
                kappa = (self.step_kappa_over if self.cores - len(self.free_cores)
                         > self.spare_cores else self.step_kappa)
                if kappa > 0.0:
                    left = e.step_end_s - now
                    e.extend(kappa * (left if left < end - now else end - now))
        if newly_busy:
            self.on_busy(self.unit, 1)
        self.loop.at(end, self._done_cb, job)

    def _done(self, arg: Any) -> None:
        job: Job = arg
        self.free_cores.append(job.rec.worker)  # type: ignore[arg-type]
        queue = self.queue
        if queue:  # the core goes straight to the next job: power unchanged
            self._start(queue.popleft(), False)
        else:
            self.on_busy(self.unit, -1)
        self.on_done(job)
