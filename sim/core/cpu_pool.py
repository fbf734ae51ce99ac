"""The preprocessing workers: a pool of CPU cores, each taking one request's image stages at a time.

A request takes a free core (the lowest-numbered one freed last goes first) or waits in arrival
order; on its core it runs image decode → resize → normalize (and, when the profile's ``encode``
stage is on the same unit, the encoder after them, as the runtime's ``--encoder onnx`` does inside
the worker). Every stage's time is drawn from its fitted model and stretched by the clock's
``scale`` (DVFS) at the moment the job starts.

**Shared cores** (a profile's ``host:``): on a CPU-only server the workers and the engine's
threads share ``host_cores`` cores, and each slows the other down. A job runs ``max(1, busy /
host_cores)`` times its time (``busy`` workers, itself included, as it starts) while the engine
is between steps, and ``max(1, (busy + D) / host_cores)`` times while a step runs (``D`` the
host's ``in_step_demand``: the engine's threads, or the demand the calibration measured):
its time is ``W`` (the stages' drawn times) stretched over the seconds it overlaps the engine's
steps, the steps that start during it included. It is scheduled to end as if no further step
started, and put back when the steps it overlapped say it has work left (at most once per step).
An engine step started while workers are busy is lengthened by :meth:`CpuPool.step_stretch` (the
engine's ``stretch`` hook); a job started during a step lengthens the step by ``κ`` seconds per
second of overlap (:meth:`~sim.core.step_engine.StepEngine.extend`) — ``κ₊`` instead for a worker
beyond the ``free_cores`` the engine leaves (:class:`~sim.scenario.profiles.HostConfig`). The
busy-worker counts are those at a service's start. The calibration takes the same stretch out
of the measured stage times (:func:`sim.fit.host_effects.worker_stretch`).
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
        self.engine_demand = host.in_step_demand if host is not None else 0.0  # inside a step
        self.step_kappa = host.step_extra_s_per_worker_s if host is not None else 0.0
        self.step_kappa_over = host.kappa_over if host is not None else 0.0
        self.spare_cores = host.free_cores if host is not None else 1  # beside a step
        self.worker_end = [0.0] * cores  # when each worker's present job ends
        # shared cores, each worker's present job: its start, its work at its clock, its stretch
        # between and inside steps, the clock, and the engine's step-seconds at its start (when
        # it was first due is its record's end until it is put back)
        self._start_s = [0.0] * cores
        self._work_s = [0.0] * cores
        self._s_out = [1.0] * cores
        self._s_in = [1.0] * cores
        self._clock = [1.0] * cores
        self._stepped0 = [0.0] * cores
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
        e = self.step_engine
        for w, end in enumerate(self.worker_end):
            if end > now:
                # the job's time left if this step covers it (it runs at its in-step stretch)
                wall = self._todo(w, e) * self._s_in[w] if e is not None else end - now
                overlaps.append(wall if wall < step_s else step_s)
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
        w = self.free_cores.pop()
        rec.worker = w
        clock = self.scale
        d1 = self.decode.sample(job) * clock
        d2 = self.resize.sample(job) * clock
        d3 = self.normalize.sample(job) * clock
        enc = self.encode
        d4 = enc.sample(job) * clock if enc is not None else 0.0
        work = d1 + d2 + d3 + d4  # at the clock, before sharing the cores
        rec.preproc_start_s = now
        if not self.shared:
            t1 = now + d1
            t2 = t1 + d2
            t3 = t2 + d3
            end = t3 + d4
        else:
            busy = self.cores - len(self.free_cores)  # this worker included
            hc = self.host_cores
            s_out = busy / hc if busy > hc else 1.0
            demand = busy + self.engine_demand
            s_in = demand / hc if demand > hc else 1.0
            e = self.step_engine
            left = e.step_end_s - now if e is not None and e.in_step else 0.0
            t1 = now + _shared_wall(d1, left, s_in, s_out)
            t2 = now + _shared_wall(d1 + d2, left, s_in, s_out)
            t3 = now + _shared_wall(d1 + d2 + d3, left, s_in, s_out)
            end = now + _shared_wall(work, left, s_in, s_out)
            self.worker_end[w] = end
            self._start_s[w] = now
            self._work_s[w] = work
            self._s_out[w] = s_out
            self._s_in[w] = s_in
            self._clock[w] = clock
            self._stepped0[w] = e.stepped_until(now) if e is not None else 0.0
            if e is not None and left > 0.0:
                # the running step shares the cores with this job from now; beyond the free
                # cores (this worker and the others busy) at κ₊
                kappa = self.step_kappa_over if busy > self.spare_cores else self.step_kappa
                if kappa > 0.0:
                    e.extend(kappa * (left if left < end - now else end - now))
        if enc is not None:
            rec.encode_end_s = end
        rec.decode_end_s = t1
        rec.resize_end_s = t2
        rec.normalize_end_s = t3
        if not self.shared:
            self._ran(job, clock)
        if newly_busy:
            self.on_busy(self.unit, 1)
        self.loop.at(end, self._done_cb, job)

    def _ran(self, job: Job, clock: float) -> None:
        """``job``'s end is final: the running mean of a job's time at nominal clock."""
        rec = job.rec
        m = self.mean_s
        self.mean_s = m + 0.05 * ((self._end_of(job) - rec.preproc_start_s) / clock  # type: ignore[operator]
                                  - m)

    def _end_of(self, job: Job) -> float:
        """The end its record gives ``job`` (the encoder's, when the pool runs it)."""
        rec = job.rec
        return rec.encode_end_s if self.encode is not None else rec.normalize_end_s  # type: ignore[return-value]

    def _todo(self, w: int, e: StepEngine) -> float:
        """Shared cores: the work worker ``w``'s job has left now, given the engine's steps it
        has overlapped (0 when it is done)."""
        now = self.loop.now
        overlap = e.stepped_until(now) - self._stepped0[w]
        todo = (self._work_s[w] - (now - self._start_s[w] - overlap) / self._s_out[w]
                - overlap / self._s_in[w])
        return todo if todo > 1e-9 * (1.0 + self._work_s[w]) else 0.0

    def _left(self, w: int) -> float:
        """Shared cores: the seconds worker ``w``'s job still needs (0 when it is done)."""
        e = self.step_engine
        if e is None:
            return 0.0
        todo = self._todo(w, e)
        if todo <= 0.0:
            return 0.0
        now = self.loop.now
        left = e.step_end_s - now if e.in_step else 0.0
        return _shared_wall(todo, left, self._s_in[w], self._s_out[w])

    def _stretch_stages(self, job: Job) -> None:
        """The job ended later than first scheduled (its record's end): its stage ends move in
        proportion."""
        rec = job.rec
        start: float = rec.preproc_start_s  # type: ignore[assignment]
        first = self._end_of(job) - start
        f = (self.loop.now - start) / first if first > 0.0 else 1.0
        rec.decode_end_s = start + (rec.decode_end_s - start) * f  # type: ignore[operator]
        rec.resize_end_s = start + (rec.resize_end_s - start) * f  # type: ignore[operator]
        rec.normalize_end_s = start + (rec.normalize_end_s - start) * f  # type: ignore[operator]
        if self.encode is not None:  # the encoder ends the job
            rec.encode_end_s = self.loop.now

    def _done(self, arg: Any) -> None:
        job: Job = arg
        if self.shared:
            now = self.loop.now
            w: int = job.rec.worker  # type: ignore[assignment]
            more = self._left(w)
            if more > 0.0:  # steps it overlapped slowed it: put back
                self.worker_end[w] = now + more
                self.loop.at(now + more, self._done_cb, job)
                return
            if now > self._end_of(job):
                self._stretch_stages(job)
            self._ran(job, self._clock[w])
        self.free_cores.append(job.rec.worker)  # type: ignore[arg-type]
        queue = self.queue
        if queue:  # the core goes straight to the next job: power unchanged
            self._start(queue.popleft(), False)
        else:
            self.on_busy(self.unit, -1)
        self.on_done(job)


def _shared_wall(work_s: float, in_step_s: float, s_in: float, s_out: float) -> float:
    """The seconds ``work_s`` of a job's work take when the next ``in_step_s`` seconds run beside
    an engine step (stretched ``s_in``) and the rest without one (``s_out``)."""
    inside = work_s * s_in
    if inside <= in_step_s:
        return inside
    return in_step_s + (work_s - in_step_s / s_in) * s_out
