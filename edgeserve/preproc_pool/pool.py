"""The frontend's side of the preprocessing pool: N worker processes, a bounded queue, respawn.

Picture a deli counter with N clerks. Each clerk serves one ticket at a time; tickets wait in a
line of bounded length; when the line is full, new customers are told to come back later (HTTP
429). Here a clerk is a worker process with its own pipe, so the frontend always knows which job
each worker holds. When a worker dies — even by SIGKILL — the frontend sees its process sentinel
become readable, unlinks what the dead attempt wrote (the job's output segment; the input segment
stays for the next attempt), puts that job back at the head of the queue and starts a
replacement; the other jobs go on. A job is retried once (``MAX_ATTEMPTS``): the retry runs on
whichever worker is free first, another one or the replacement, and the client sees only a
slower answer. If the retry's worker dies too, the job fails (HTTP 500, with both exit reasons):
an image that kills every worker it reaches (a decoder crash, an allocation the kernel's OOM
killer answers) takes down two workers, never more.

Everything here runs on the frontend's asyncio loop: pipes and sentinels are watched with
``loop.add_reader``, so no thread is involved and the frontend never blocks on a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import numpy as np

from edgeserve.preproc_pool import shm
from edgeserve.preproc_pool.messages import (
    Encoding,
    ErrorKind,
    Job,
    JobResult,
    PreprocParams,
    Ready,
    SourceKind,
    encoder,
    reply_decoder,
)
from edgeserve.preproc_pool.worker import worker_main

MAX_EARLY_DEATHS = 3
MAX_ATTEMPTS = 2  # a job whose worker dies is run once more; a second death fails it
PIPELINE_DEPTH = 2  # jobs in flight per worker: one running, one waiting in its pipe


class PoolFull(Exception):
    """The bounded queue is full; the caller should answer 429."""


class PreprocFailed(Exception):
    """A job failed; ``kind`` tells whether the client's input (400) or the server (500) is at fault.

    ``retries``: how many times the job was run again after its worker died (0 or 1).
    """

    def __init__(self, kind: ErrorKind, message: str, retries: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.retries = retries


@dataclass(slots=True)
class ImageInput:
    """An image as the frontend received it: bytes (raw or base64 text) or a checked local path."""

    source: SourceKind
    data: bytes | None = None
    path: str | None = None

    @property
    def size_bytes(self) -> int:
        if self.data is not None:
            return len(self.data)
        return os.path.getsize(self.path) if self.path else 0


@dataclass(slots=True)
class Preprocessed:
    """A job's outcome: the array for the engine plus what the record needs."""

    pixels: np.ndarray  # target_h × target_w × 3 uint8; with an encoder: image_embeds, float32
    result: JobResult
    worker: int  # worker slot index, -1 for inline
    queued_s: float  # when the job entered the queue
    retries: int = 0  # runs after a worker died holding the job (at most MAX_ATTEMPTS - 1)


@dataclass(slots=True)
class _Pending:
    job_id: int
    image: ImageInput
    future: asyncio.Future[Preprocessed]
    queued_s: float
    in_name: str
    out_name: str
    in_bytes: int = 0
    # why each earlier attempt ended: its worker's death (one line per attempt)
    deaths: list[str] = field(default_factory=list)


@dataclass(slots=True)
class WorkerSlot:
    """One worker process and its bookkeeping; the slot survives respawns."""

    index: int
    process: BaseProcess | None = None
    conn: Connection | None = None
    ready: bool = False
    # jobs sent to this worker, oldest first: the first is in progress, the rest wait in its
    # pipe (at most PIPELINE_DEPTH in all) so the worker never idles between jobs
    jobs: deque[_Pending] = field(default_factory=deque)
    busy_since_s: float | None = None
    encoding: bool = False  # its job in progress has reached the encoder
    busy_total_s: float = 0.0  # completed busy time since start
    restarts: int = 0
    early_deaths: int = 0  # consecutive deaths before becoming ready (a broken environment)
    jobs_done: int = 0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def busy(self) -> bool:
        return bool(self.jobs)

    @property
    def stage(self) -> str:
        """What the worker does now: ``encode``, ``preproc`` (before the encoder), ``idle`` or
        ``starting``."""
        if self.jobs:
            return "encode" if self.encoding else "preproc"
        return "idle" if self.ready else "starting"

    def busy_s(self, now: float) -> float:
        """Total busy time up to ``now``, including the job in progress."""
        extra = now - self.busy_since_s if self.busy_since_s is not None else 0.0
        return self.busy_total_s + extra


@dataclass(slots=True)
class PoolStats:
    queued: int
    running: int
    workers: list[dict[str, object]] = field(default_factory=list)


class PreprocPool:
    """N worker processes behind a bounded FIFO queue."""

    def __init__(self, workers: int, params: PreprocParams, max_pending: int) -> None:
        self.params = params
        self.max_pending = max_pending
        self.slots = [WorkerSlot(i) for i in range(workers)]
        self._queue: deque[_Pending] = deque()
        self._ctx = mp.get_context("spawn")
        self._next_job = 0
        self._pid = os.getpid()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self.deaths = 0
        self.retries = 0  # jobs run again after their worker died
        self.broken: str | None = None  # why the pool cannot work, if it cannot

    # ---- lifecycle ---------------------------------------------------------------------
    async def start(self, timeout_s: float = 60.0) -> None:
        """Start every worker and wait until each has imported its libraries."""
        self._loop = asyncio.get_running_loop()
        for slot in self.slots:
            self._spawn(slot)
        deadline = time.monotonic() + timeout_s
        while not all(s.ready for s in self.slots):
            if self.broken:
                raise RuntimeError(self.broken)
            if time.monotonic() > deadline:
                raise RuntimeError("preprocessing workers did not start in time")
            await asyncio.sleep(0.02)

    def _spawn(self, slot: WorkerSlot) -> None:
        assert self._loop is not None
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=worker_main, args=(child, self.params), name=f"edgeserve-preproc-{slot.index}",
            daemon=True,
        )
        proc.start()
        child.close()
        slot.process, slot.conn, slot.ready = proc, parent, False
        self._loop.add_reader(parent.fileno(), self._on_readable, slot)
        self._loop.add_reader(proc.sentinel, self._on_death, slot)

    async def close(self) -> None:
        """Stop the workers, fail what is queued, release every segment."""
        self._closing = True
        for p in list(self._queue):
            self._finish(p, error=PreprocFailed(ErrorKind.INTERNAL, "server shutting down"))
        self._queue.clear()
        for slot in self.slots:
            self._detach(slot)
            if slot.conn is not None:
                slot.conn.close()
        for slot in self.slots:
            if slot.process is not None:
                slot.process.join(2.0)
                if slot.process.is_alive():
                    slot.process.kill()
                    slot.process.join(1.0)
            while slot.jobs:
                self._finish(slot.jobs.popleft(),
                             error=PreprocFailed(ErrorKind.INTERNAL, "server shutting down"))
        shm.sweep(self._pid)

    def _detach(self, slot: WorkerSlot) -> None:
        assert self._loop is not None
        if slot.conn is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(slot.conn.fileno())
        if slot.process is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(slot.process.sentinel)

    # ---- submitting --------------------------------------------------------------------
    def has_room(self) -> bool:
        idle = sum(1 for s in self.slots if s.ready and not s.jobs)
        return self.queued < self.max_pending + idle

    async def submit(self, image: ImageInput) -> Preprocessed:
        """Queue one image; raises :class:`PoolFull` or :class:`PreprocFailed`.

        Cancelling the awaiting task drops the job if it is still queued; if a worker already
        holds it, its result is discarded (and its segments released) when it arrives.
        """
        if self.broken and not any(s.ready for s in self.slots):
            raise PreprocFailed(ErrorKind.INTERNAL, self.broken)
        if not self.has_room():
            raise PoolFull()
        loop = asyncio.get_running_loop()
        job_id = self._next_job
        self._next_job += 1
        in_name, out_name = shm.segment_names(self._pid, job_id)
        pending = _Pending(job_id, image, loop.create_future(), time.monotonic(), in_name, out_name)
        if image.data is not None:
            pending.in_bytes = len(image.data)
            m = shm.create(in_name, len(image.data))
            m[: len(image.data)] = image.data
            m.close()
            image.data = None  # the segment holds it now
        self._queue.append(pending)
        self._dispatch()
        try:
            return await asyncio.shield(pending.future)
        except asyncio.CancelledError:
            pending.future.cancel()  # a worker's late answer is then only released
            if pending in self._queue:
                self._queue.remove(pending)
                self._release(pending)
            raise

    def _dispatch(self) -> None:
        """Idle workers first; then a second job into each busy worker's pipe."""
        for depth in range(PIPELINE_DEPTH):
            for slot in self.slots:
                if not self._queue:
                    return
                if slot.ready and slot.conn is not None and len(slot.jobs) == depth:
                    self._send(slot, self._queue.popleft())

    def _send(self, slot: WorkerSlot, p: _Pending) -> None:
        assert slot.conn is not None
        src = p.image.path if p.image.source is SourceKind.FILE else p.in_name
        job = Job(p.job_id, p.image.source, src or "", p.out_name, p.in_bytes)
        if not slot.jobs:
            slot.busy_since_s = time.monotonic()
        slot.jobs.append(p)
        # on failure the sentinel reports the death and fails or requeues the job
        with contextlib.suppress(OSError):
            slot.conn.send_bytes(encoder.encode(job))

    # ---- replies and deaths ------------------------------------------------------------
    def _on_readable(self, slot: WorkerSlot) -> None:
        self._on_readable_no_dispatch(slot)
        self._dispatch()

    def _on_readable_no_dispatch(self, slot: WorkerSlot) -> None:
        conn = slot.conn
        if conn is None:
            return
        try:
            while conn.poll():
                msg = reply_decoder.decode(conn.recv_bytes())
                if isinstance(msg, Ready):
                    slot.ready, slot.early_deaths = True, 0
                elif isinstance(msg, Encoding):
                    slot.encoding = bool(slot.jobs) and msg.job_id == slot.jobs[0].job_id
                elif slot.jobs and msg.job_id == slot.jobs[0].job_id:
                    self._complete(slot, msg)
        except (EOFError, OSError):
            self._detach_reader(slot)  # the sentinel handler does the rest

    def _detach_reader(self, slot: WorkerSlot) -> None:
        if slot.conn is not None and self._loop is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(slot.conn.fileno())

    def _complete(self, slot: WorkerSlot, result: JobResult) -> None:
        p = slot.jobs.popleft()
        slot.encoding = False
        now = time.monotonic()
        if slot.busy_since_s is not None:
            slot.busy_total_s += now - slot.busy_since_s
        slot.busy_since_s = now if slot.jobs else None
        slot.jobs_done += 1
        if not result.ok:
            kind = result.error_kind or ErrorKind.INTERNAL
            self._finish(p, error=PreprocFailed(kind, result.error or "preprocessing failed"))
            return
        if p.future.done():  # cancelled meanwhile: drop the pixels
            self._release(p)
            return
        try:
            pixels = shm.take_array(p.out_name, tuple(result.shape), result.dtype)
        except OSError as e:
            self._finish(p, error=PreprocFailed(ErrorKind.INTERNAL, f"lost result segment: {e}"))
            return
        self._release(p)
        p.future.set_result(Preprocessed(pixels, result, slot.index, p.queued_s, len(p.deaths)))

    def _on_death(self, slot: WorkerSlot) -> None:
        proc = slot.process
        if proc is None:
            return
        self._on_readable_no_dispatch(slot)  # results it sent before dying still count
        self._detach(slot)
        proc.join(0.5)
        code = proc.exitcode
        if not slot.ready:
            slot.early_deaths += 1
        if slot.conn is not None:
            slot.conn.close()
        slot.conn, slot.ready, slot.encoding = None, False, False
        if slot.busy_since_s is not None:
            slot.busy_total_s += time.monotonic() - slot.busy_since_s
        slot.busy_since_s = None
        self.deaths += 1
        if slot.jobs:
            # jobs run in order: the first was in progress and is retried or fails; the rest
            # never started and go back to the head of the queue, in their order
            held = slot.jobs.popleft()
            while slot.jobs:
                self._queue.appendleft(slot.jobs.pop())
            self._retry_or_fail(held, _exit_reason(slot.index, proc.pid, code))
        if self._closing:
            return
        if slot.early_deaths >= MAX_EARLY_DEATHS:
            self.broken = (f"preprocessing worker {slot.index} died {slot.early_deaths} times "
                           f"before it was ready (last exit code {code})")
            if not any(s.process is not None and s.process.is_alive() for s in self.slots):
                for p in list(self._queue):  # nobody will ever take them
                    self._finish(p, error=PreprocFailed(ErrorKind.INTERNAL, self.broken,
                                                        retries=len(p.deaths)))
                self._queue.clear()
            self._dispatch()  # a job taken back goes to a worker still alive
            return
        slot.restarts += 1
        self._spawn(slot)
        self._dispatch()  # jobs taken back from the dead worker go to the others

    def _retry_or_fail(self, p: _Pending, death: str) -> None:
        """The worker holding ``p`` died: queue ``p`` first for one more attempt, or fail it."""
        p.deaths.append(death)
        if p.future.done():  # cancelled: nobody waits for it any more
            self._release(p)
            return
        if self._closing:
            self._finish(p, error=PreprocFailed(ErrorKind.WORKER_DIED, death))
            return
        if len(p.deaths) >= MAX_ATTEMPTS:
            earlier = "; ".join(p.deaths[:-1])
            message = (f"{death}. It was the image's attempt {len(p.deaths)}; the earlier ended "
                       f"the same way ({earlier}). An image whose workers die {MAX_ATTEMPTS} "
                       f"times is not tried again")
            self._finish(p, error=PreprocFailed(ErrorKind.WORKER_DIED, message,
                                                retries=len(p.deaths) - 1))
            return
        # the dead attempt may have created its output segment; the next one creates it anew
        shm.unlink(p.out_name)
        self.retries += 1
        self._queue.appendleft(p)

    def _finish(self, p: _Pending, error: PreprocFailed) -> None:
        self._release(p)
        if not p.future.done():
            p.future.set_exception(error)

    def _release(self, p: _Pending) -> None:
        shm.unlink(p.in_name)
        shm.unlink(p.out_name)

    # ---- observation -------------------------------------------------------------------
    @property
    def queued(self) -> int:
        """Jobs not yet started: in the pool's queue or waiting in a worker's pipe."""
        return len(self._queue) + sum(max(0, len(s.jobs) - 1) for s in self.slots)

    @property
    def running(self) -> int:
        return sum(1 for s in self.slots if s.jobs)

    def worker_pids(self) -> list[int | None]:
        return [s.pid for s in self.slots]


def _exit_reason(index: int, pid: int | None, code: int | None) -> str:
    if code is not None and code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    return f"preprocessing worker {index} (pid {pid}) died while processing this image: {how}"
