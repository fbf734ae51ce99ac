"""Where records go: the trace file, the live event stream and the metrics — all three at once.

:class:`Recorder` takes every finished :class:`~edgeserve.records.RequestRecord` and every
:class:`~edgeserve.records.ResourceSample` and (1) appends it to the ``--trace`` JSON Lines file,
(2) publishes the same encoded line to every ``GET /v1/events`` subscriber and (3) updates the
Prometheus metrics. :class:`ResourceSampler` produces a sample every ``--sample-interval``:
queue depths, per-worker busy fraction, engine busy and stall seconds (settled by the
:class:`~edgeserve.stalls.StallMeter`), and psutil CPU/RSS per process (NVML GPU utilization
where a GPU and ``pynvml`` are present).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import psutil

from edgeserve import records
from edgeserve.metrics import Metrics
from edgeserve.records import RequestRecord, ResourceSample, TraceHeader, TraceWriter
from edgeserve.stalls import StallMeter

EVENT_QUEUE_LIMIT = 1000  # per subscriber; a subscriber that falls further behind loses events


class EventHub:
    """Fan-out of encoded record lines to live subscribers (bounded, never blocks the server)."""

    def __init__(self) -> None:
        self._subs: set[asyncio.Queue[bytes | None]] = set()
        self.dropped = 0

    def subscribe(self) -> asyncio.Queue[bytes | None]:
        q: asyncio.Queue[bytes | None] = asyncio.Queue(EVENT_QUEUE_LIMIT)
        self._subs.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[bytes | None]) -> None:
        self._subs.discard(q)

    def publish(self, line: bytes) -> None:
        for q in self._subs:
            try:
                q.put_nowait(line)
            except asyncio.QueueFull:
                self.dropped += 1

    def close(self) -> None:
        for q in self._subs:
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(None)

    @property
    def subscribers(self) -> int:
        return len(self._subs)


class Recorder:
    """Writes, publishes and counts every record."""

    def __init__(self, trace_path: str | None, metrics: Metrics, meta: dict[str, object]) -> None:
        self.metrics = metrics
        self.hub = EventHub()
        self.header = TraceHeader(
            producer="edgeserve serve", clock="monotonic",
            wall_offset_s=time.time() - time.monotonic(), meta=meta,
        )
        self.writer = TraceWriter(trace_path, self.header) if trace_path else None

    def request(self, rec: RequestRecord) -> None:
        self.metrics.observe_record(rec)
        self._emit(rec)

    def step(self, s: records.EngineStep) -> None:
        """An engine step goes to the trace file only (tens per second: not to live viewers)."""
        if self.writer is not None:
            self.writer.write(s)

    def sample(self, s: ResourceSample) -> None:
        self._emit(s)
        if self.writer is not None:
            self.writer.flush()

    def _emit(self, item: records.TraceItem) -> None:
        line = records.encode(item)
        if self.writer is not None:
            self.writer.write(item)
        self.hub.publish(line)

    def close(self) -> None:
        self.hub.close()
        if self.writer is not None:
            self.writer.close()


class ProcessWatch:
    """psutil CPU (percent of one core) and RSS per named process, with cached handles."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def _proc(self, pid: int) -> psutil.Process | None:
        p = self._procs.get(pid)
        if p is None:
            try:
                p = psutil.Process(pid)
                p.cpu_percent(None)  # prime: the first call returns 0
            except psutil.Error:
                return None
            self._procs[pid] = p
        return p

    def sample(self, named: dict[str, int]) -> tuple[dict[str, float], dict[str, int]]:
        cpu: dict[str, float] = {}
        rss: dict[str, int] = {}
        alive = set()
        for name, pid in named.items():
            p = self._proc(pid)
            if p is None:
                continue
            try:
                with p.oneshot():
                    cpu[name] = p.cpu_percent(None)
                    rss[name] = p.memory_info().rss
                alive.add(pid)
            except psutil.Error:
                continue
        for pid in list(self._procs):
            if pid not in alive:
                del self._procs[pid]
        return cpu, rss


def process_layout(worker_pids: list[int | None]) -> dict[str, dict[str, object]]:
    """Which process of the server may run on which cores (its CPU affinity), by role: the
    frontend, each preprocessing worker and vLLM's engine processes. Recorded in the trace header
    so that a simulator can model the cores they share."""
    named: dict[str, int] = {"frontend": os.getpid()}
    named.update({f"worker{i}": pid for i, pid in enumerate(worker_pids) if pid is not None})
    named.update(engine_pids({p for p in worker_pids if p is not None}))
    out: dict[str, dict[str, object]] = {}
    for name, pid in named.items():
        try:
            out[name] = {"pid": pid, "cpu_affinity": sorted(psutil.Process(pid).cpu_affinity())}
        except (psutil.Error, AttributeError):
            continue
    return out


def engine_pids(exclude: set[int]) -> dict[str, int]:
    """The frontend's other child processes (vLLM's EngineCore and its other processes), named."""
    out: dict[str, int] = {}
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return out
    for c in children:
        if c.pid in exclude:
            continue
        try:
            name = c.name()
        except psutil.Error:
            continue
        if "resource_tracker" in " ".join(_cmdline(c)):
            continue
        if "EngineCore" in name and "engine" not in out:
            out["engine"] = c.pid
        elif "Worker" in name and "engine_worker" not in out:
            out["engine_worker"] = c.pid  # vLLM's model-runner process
        else:
            out[f"{name}-{c.pid}"] = c.pid
    return out


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


class _Nvml:
    """GPU utilization and memory through NVML (``pynvml``), one entry per visible GPU."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                            for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no NVML, no GPU: nothing to sample
            self.handles = []

    def sample(self) -> tuple[list[float], list[int]]:
        util, mem = [], []
        for h in self.handles:
            try:
                u = float(self.nv.nvmlDeviceGetUtilizationRates(h).gpu) / 100.0
                m = int(self.nv.nvmlDeviceGetMemoryInfo(h).used)
            except Exception:  # a GPU that fell off the bus: report the others
                continue
            util.append(u)
            mem.append(m)
        return util, mem


class ResourceSampler:
    """Every ``interval_s``: settle the stall meter, read queues and processes, emit a sample."""

    def __init__(self, interval_s: float, recorder: Recorder, meter: StallMeter,
                 snapshot: Callable[[], dict[str, Any]]) -> None:
        self.interval_s = interval_s
        self.recorder = recorder
        self.meter = meter
        self.snapshot = snapshot  # queue depths, worker busy/stage/pids, engine queue lengths
        self.procs = ProcessWatch()
        self.nvml = _Nvml()
        self._task: asyncio.Task[None] | None = None
        self._last_cpu_s = time.process_time()
        self._last_t_s = time.monotonic()
        self.last: ResourceSample | None = None

    def start(self) -> None:
        psutil.cpu_percent(None)
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.recorder.sample(self.take())

    def take(self) -> ResourceSample:
        now = time.monotonic()
        window = self.meter.settle(now)
        snap = self.snapshot()
        named: dict[str, int] = {"frontend": os.getpid()}
        worker_pids = [p for p in snap["worker_pids"] if p is not None]
        for i, pid in enumerate(snap["worker_pids"]):
            if pid is not None:
                named[f"worker{i}"] = pid
        named.update(engine_pids(set(worker_pids)))
        cpu, rss = self.procs.sample(named)
        gpu_util, gpu_mem = self.nvml.sample()
        cpu_s = time.process_time()
        m = self.recorder.metrics
        m.frontend_cpu.inc(cpu_s - self._last_cpu_s)
        self._last_cpu_s = cpu_s
        m.observe_window(window)
        for name in ("preproc_queue", "preproc_running", "engine_waiting", "engine_running",
                     "inflight"):
            m.queue_depth.labels(queue=name).set(snap[name])
        for i, frac in enumerate(snap["worker_busy"]):
            m.worker_busy.labels(worker=str(i)).set(frac)
        interval_s, self._last_t_s = now - self._last_t_s, now
        for i, (util, used) in enumerate(zip(gpu_util, gpu_mem, strict=True)):
            m.gpu_utilization.labels(gpu=str(i)).set(util)
            m.gpu_memory_used.labels(gpu=str(i)).set(used)
            m.gpu_busy.labels(gpu=str(i)).inc(util * interval_s)
        sample = ResourceSample(
            t_s=now,
            preproc_queue=snap["preproc_queue"],
            preproc_running=snap["preproc_running"],
            engine_waiting=snap["engine_waiting"],
            engine_running=snap["engine_running"],
            engine_busy=window.busy_fraction,
            stall_s=window.stall_s,
            worker_busy=snap["worker_busy"],
            worker_stage=snap["worker_stage"],
            process_cpu=cpu,
            process_rss_bytes=rss,
            system_cpu_percent=psutil.cpu_percent(None),
            system_mem_percent=psutil.virtual_memory().percent,
            gpu_util=gpu_util,
            gpu_mem_bytes=gpu_mem,
            engine_busy_spans=window.busy_spans,
            stall_spans=window.stall_spans,
        )
        self.last = sample
        return sample


def host_name() -> str:
    return socket.gethostname()
