"""The pipeline timeline: per time bucket, was each CPU worker and the engine busy, idle or stalled?

One row per preprocessing worker (CPU) and one for the engine; one column per bucket (1 s by
default). A worker cell is busy or idle. An engine cell can also be a *stall*: the engine had
nothing to do while admitted work still sat in a CPU stage (``CPU_STAGES``: waiting for a worker,
decode, resize, normalize) — the time the split between CPU and accelerator is meant to remove.

Two ways to fill it, preferring the first:

* From :class:`~edgeserve.records.ResourceSample`: the runtime measures per interval each worker's
  busy fraction, the engine's busy fraction and the stall seconds. Exact, and available at once.
* From :class:`~edgeserve.records.RequestRecord` timestamps alone (a simulation, or a trace without
  samples): a worker is busy while one of its requests is in decode/resize/normalize/encode; the
  engine is busy from a request's ``engine_queued_s`` to its last token; a stall is engine-idle time
  during which some request was in a CPU stage. Records arrive when a request finishes, so the
  newest columns fill in as their requests complete.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from edgeserve.records import CPU_STAGES, RequestRecord, ResourceSample, Stage, stage_spans
from tui.intervals import BucketRanges, measure, subtract, union

WORKER_STAGES = frozenset({Stage.DECODE, Stage.RESIZE, Stage.NORMALIZE, Stage.ENCODE})
ENGINE_ROW = "engine"


class CellState(enum.StrEnum):
    """What one row did during one bucket."""

    NO_DATA = "none"
    IDLE = "idle"
    BUSY = "busy"
    STALL = "stall"  # engine idle while work waited in a CPU stage


@dataclass(slots=True, frozen=True)
class Cell:
    """One row in one bucket: its state and the fractions of the bucket behind it."""

    state: CellState
    busy: float = 0.0
    stall: float = 0.0


@dataclass(slots=True, frozen=True)
class TimelineRow:
    name: str
    cells: tuple[Cell, ...]


@dataclass(slots=True)
class _SampleBucket:
    covered_s: float = 0.0
    worker_busy_s: list[float] = field(default_factory=list)
    engine_busy_s: float = 0.0
    stall_s: float = 0.0


@dataclass(slots=True)
class _RecordBucket:
    worker_busy_s: dict[int, float] = field(default_factory=dict)
    engine: list[tuple[float, float]] = field(default_factory=list)
    cpu_wait: list[tuple[float, float]] = field(default_factory=list)
    # spans that cover whole buckets go to Timeline._engine_full / _cpu_full instead


class Timeline:
    """Buckets of busy/idle/stall time for the CPU workers and the engine.

    Args:
        bucket_s: Width of one column.
        keep: How many buckets to keep (older ones are dropped).
        stall_threshold: An engine cell is a stall when at least this fraction of it was stall
            time, even if the engine was busy for part of it: stalls are what the view is for.
        busy_threshold: A cell is busy when at least this fraction of it was busy.
    """

    def __init__(
        self,
        bucket_s: float = 1.0,
        keep: int = 300,
        stall_threshold: float = 0.25,
        busy_threshold: float = 0.5,
    ) -> None:
        self.bucket_s = bucket_s
        self.keep = keep
        self.stall_threshold = stall_threshold
        self.busy_threshold = busy_threshold
        self.from_samples = False
        self.workers = 0
        self._samples: dict[int, _SampleBucket] = {}
        self._records: dict[int, _RecordBucket] = {}
        self._engine_full = BucketRanges()
        self._cpu_full = BucketRanges()
        self._newest = -(1 << 62)
        self._oldest = 1 << 62

    # ---- folding -------------------------------------------------------------------------
    def add_sample(self, s: ResourceSample, interval_s: float) -> None:
        """Fold a resource sample covering ``(s.t_s - interval_s, s.t_s]``."""
        if not self.from_samples:
            self.from_samples = True
            self._records.clear()
        self.workers = max(self.workers, len(s.worker_busy))
        k = math.floor((s.t_s - interval_s / 2) / self.bucket_s)
        if not self._touch(k):
            return
        b = self._samples.setdefault(k, _SampleBucket())
        b.covered_s += interval_s
        if len(b.worker_busy_s) < len(s.worker_busy):
            b.worker_busy_s.extend([0.0] * (len(s.worker_busy) - len(b.worker_busy_s)))
        for i, f in enumerate(s.worker_busy):
            b.worker_busy_s[i] += f * interval_s
        b.engine_busy_s += s.engine_busy * interval_s
        b.stall_s += s.stall_s

    def add_record(self, r: RequestRecord) -> None:
        """Fold a finished request's stage spans (ignored once samples are seen).

        A worker's CPU work counts whatever the request's placement (an offloaded request is still
        decoded and resized here first); the engine row and its stalls count only requests that
        ran on the local engine.
        """
        if self.from_samples:
            return
        local = r.placement is None or r.placement == "local"
        for stage, a, b in stage_spans(r):
            if stage in WORKER_STAGES and r.worker is not None:
                self.workers = max(self.workers, r.worker + 1)
                for k, lo, hi in self._split(a, b):
                    wb = self._records.setdefault(k, _RecordBucket()).worker_busy_s
                    wb[r.worker] = wb.get(r.worker, 0.0) + (hi - lo)
            if local and stage in CPU_STAGES:
                self._add_span(a, b, self._cpu_full, "cpu_wait")
        if local and r.engine_queued_s is not None:
            end = r.last_token_s or r.first_token_s or r.finished_s
            if end is not None and end > r.engine_queued_s:
                self._add_span(r.engine_queued_s, end, self._engine_full, "engine")

    def _add_span(self, a: float, b: float, full: BucketRanges, field_: str) -> None:
        """``[a, b)``: whole buckets into ``full``, the partial ends into the buckets' lists."""
        bs, eps = self.bucket_s, 1e-9
        k0, k1 = math.floor(a / bs), math.ceil(b / bs) - 1
        first, last = k0, k1
        if a > k0 * bs + eps:
            first = k0 + 1
            self._partial(k0, a, min(b, (k0 + 1) * bs), field_)
        if b < (k1 + 1) * bs - eps and k1 >= first:
            last = k1 - 1
            self._partial(k1, max(a, k1 * bs), b, field_)
        if first <= last and self._touch(last):
            full.add(max(first, self._newest - self.keep + 1), last)
            self._oldest = min(self._oldest, first)

    def _partial(self, k: int, lo: float, hi: float, field_: str) -> None:
        if hi > lo and self._touch(k):
            rb = self._records.setdefault(k, _RecordBucket())
            getattr(rb, field_).append((lo, hi))

    def _split(self, a: float, b: float) -> list[tuple[int, float, float]]:
        """``[a, b)`` cut at bucket boundaries, as ``(bucket, lo, hi)``; dropped buckets skipped."""
        out = []
        k = math.floor(a / self.bucket_s)
        while a < b:
            edge = (k + 1) * self.bucket_s
            hi = min(b, edge)
            if self._touch(k):
                out.append((k, a, hi))
            a, k = hi, k + 1
        return out

    def _touch(self, k: int) -> bool:
        """Note bucket ``k`` as seen; False if it is already older than what is kept."""
        self._oldest = min(self._oldest, k)
        if k > self._newest:
            self._newest = k
            oldest = k - self.keep
            for store in (self._samples, self._records):
                for old in [j for j in store if j <= oldest]:
                    del store[old]
            self._engine_full.trim(oldest)
            self._cpu_full.trim(oldest)
        return k > self._newest - self.keep

    def clear(self) -> None:
        self._samples.clear()
        self._records.clear()
        self._engine_full.clear()
        self._cpu_full.clear()
        self._newest = -(1 << 62)
        self._oldest = 1 << 62
        self.workers = 0
        self.from_samples = False

    # ---- reading -------------------------------------------------------------------------
    def rows(self, end_s: float, n: int) -> list[TimelineRow]:
        """``n`` columns ending with the bucket that holds ``end_s``: workers first, engine last."""
        last = math.floor(end_s / self.bucket_s)
        ks = range(last - n + 1, last + 1)
        workers = [
            TimelineRow(f"cpu{w}", tuple(self._worker_cell(k, w) for k in ks))
            for w in range(self.workers)
        ]
        return [*workers, TimelineRow(ENGINE_ROW, tuple(self._engine_cell(k) for k in ks))]

    def _busy_cell(self, busy: float) -> Cell:
        state = CellState.BUSY if busy >= self.busy_threshold else CellState.IDLE
        return Cell(state, busy=busy)

    def _worker_cell(self, k: int, w: int) -> Cell:
        if self.from_samples:
            s = self._samples.get(k)
            if s is None or s.covered_s <= 0:
                return Cell(CellState.NO_DATA)
            busy = s.worker_busy_s[w] / s.covered_s if w < len(s.worker_busy_s) else 0.0
            return self._busy_cell(min(1.0, busy))
        r = self._records.get(k)
        if r is None:
            return self._gap(k)
        return self._busy_cell(min(1.0, r.worker_busy_s.get(w, 0.0) / self.bucket_s))

    def _gap(self, k: int) -> Cell:
        """A bucket no record touched: idle between the first and last seen, else unknown."""
        return (
            Cell(CellState.IDLE) if self._oldest <= k <= self._newest else Cell(CellState.NO_DATA)
        )

    def _busy_and_stall(self, k: int) -> tuple[float, float]:
        """Engine-busy and stall seconds of bucket ``k``, from the record intervals."""
        if k in self._engine_full:
            return self.bucket_s, 0.0
        r = self._records.get(k)
        engine = union(r.engine) if r else []
        busy = measure(engine)
        if k in self._cpu_full:
            return busy, self.bucket_s - busy
        return busy, measure(subtract(union(r.cpu_wait), engine)) if r else 0.0

    def _engine_cell(self, k: int) -> Cell:
        if self.from_samples:
            s = self._samples.get(k)
            if s is None or s.covered_s <= 0:
                return Cell(CellState.NO_DATA)
            busy, stall = s.engine_busy_s / s.covered_s, s.stall_s / s.covered_s
        else:
            if k not in self._records and k not in self._engine_full and k not in self._cpu_full:
                return self._gap(k)
            busy_s, stall_s = self._busy_and_stall(k)
            busy, stall = busy_s / self.bucket_s, stall_s / self.bucket_s
        busy, stall = min(1.0, busy), min(1.0, stall)
        if stall > 0 and stall >= self.stall_threshold:
            return Cell(CellState.STALL, busy=busy, stall=stall)
        cell = self._busy_cell(busy)
        return Cell(cell.state, busy=busy, stall=stall)
