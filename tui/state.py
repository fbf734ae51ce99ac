"""Everything the panels show, folded from records and samples; no Textual in here.

:class:`PipelineState` is fed the items a source delivers (:meth:`~PipelineState.fold`) and told
the source's clock (:meth:`~PipelineState.advance`); :meth:`~PipelineState.snapshot` returns an
immutable :class:`Snapshot` that the widgets render. All time is the source's clock: trace or
simulated seconds, or the server's monotonic clock for a live server, so a replay at 10× speed
shows the same rates as the original run.

What is computed, and over which window:

* requests/s: finished requests in the last ``rate_window_s``;
* TTFT and inter-token latency p50/p99 and errors: over the last ``window_s``;
* history sparklines: those values sampled every ``history_step_s`` of source time;
* queues, per-worker busy/stage, engine busy: the newest :class:`ResourceSample`
  (or, for a stock vLLM server, the newest scrape of its ``/metrics``);
* the pipeline timeline: :mod:`tui.timeline`;
* the waterfall: the most recent finished requests;
* devices: the newest :class:`DeviceSample` per simulated device, with its temperature history.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from edgeserve.records import (
    DeviceSample,
    MigrationDecision,
    Outcome,
    RequestRecord,
    ResourceSample,
)
from tui.gateway import GatewayHistory, GatewayView, is_gateway
from tui.histogram import WindowedHistogram
from tui.sources.base import Item
from tui.sources.devices import DeviceInfo
from tui.sources.vllm_metrics import EngineMetrics, bucket_delta, histogram_quantile
from tui.timeline import Timeline, TimelineRow

RECORD_WORKERS_S = 10.0
GATEWAY_SECONDS = 60  # seconds of gateway decisions the devices panel can draw
"""Without resource samples, the workers panel shows busy shares over this much source time."""

_QUEUE_KEYS = ("preproc_queue", "preproc_running", "engine_waiting", "engine_running")


@dataclass(slots=True, frozen=True)
class StateConfig:
    """Windows and sizes of the aggregation.

    Attributes:
        window_s: Percentiles and error counts cover this much source time.
        rate_window_s: requests/s is counted over this much source time.
        history_step_s: One sparkline point per this much source time.
        history_len: Sparkline points kept.
        timeline_bucket_s: Width of one timeline column.
        timeline_keep: Timeline columns kept.
        recent_requests: Finished requests kept for the waterfall.
    """

    window_s: float = 60.0
    rate_window_s: float = 10.0
    history_step_s: float = 1.0
    history_len: int = 120
    timeline_bucket_s: float = 1.0
    timeline_keep: int = 300
    recent_requests: int = 500

    def __post_init__(self) -> None:
        for name in ("window_s", "rate_window_s", "history_step_s", "timeline_bucket_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("history_len", "timeline_keep", "recent_requests"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(slots=True, frozen=True)
class Overview:
    """Headline numbers; ``None`` where nothing is known yet."""

    requests_per_s: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    errors: int  # non-OK outcomes within the window
    errors_by_outcome: dict[str, int]
    finished_total: int
    last_errors: tuple[str, ...]
    history: dict[str, tuple[float, ...]]  # keys: rps, ttft_p50, ttft_p99, itl_p50, itl_p99


@dataclass(slots=True, frozen=True)
class Queues:
    preproc_queue: int | None
    preproc_running: int | None
    engine_waiting: int | None
    engine_running: int | None
    kv_cache_usage: float | None
    history: dict[str, tuple[float, ...]]  # same keys as the fields above, the counts only


@dataclass(slots=True, frozen=True)
class Workers:
    busy: tuple[float, ...]
    stage: tuple[str, ...]
    engine_busy: float | None
    stall_s: float | None  # in the newest sample's interval


@dataclass(slots=True, frozen=True)
class DeviceView:
    sample: DeviceSample
    info: DeviceInfo | None
    temp_history: tuple[float, ...]


@dataclass(slots=True, frozen=True)
class Snapshot:
    """What the panels render at one refresh."""

    now_s: float | None
    overview: Overview
    queues: Queues
    workers: Workers
    timeline: tuple[TimelineRow, ...]
    timeline_bucket_s: float
    timeline_from_samples: bool
    pipeline_device: str | None
    recent: tuple[RequestRecord, ...]  # newest last
    devices: tuple[DeviceView, ...]
    migrations: tuple[MigrationDecision, ...]  # simulated stage moves, newest last
    gateway: GatewayView | None  # a gateway's decisions per second, when its records come
    resources: ResourceSample | None  # the newest, for the system panel
    items_total: int


def event_time(item: Item) -> float:
    """When an item happened on the source's clock: a sample's time, a request's last stamp."""
    if isinstance(item, RequestRecord):
        for t in (
            item.finished_s,
            item.last_token_s,
            item.first_token_s,
            item.engine_queued_s,
            item.preproc_end_s,
            item.preproc_start_s,
            item.preproc_queued_s,
        ):
            if t is not None:
                return t
        return item.arrived_s
    if isinstance(item, DeviceInfo):
        return -math.inf
    return item.t_s


def matches(rec: RequestRecord, query: str) -> bool:
    """Whether a request passes the waterfall filter.

    The query is split on spaces; every word must occur (case-insensitive) in the request's id,
    outcome, device, placement, error or ``w<worker>``. ``slow>2`` keeps requests whose end-to-end
    latency exceeds 2 s.
    """
    hay = " ".join(
        str(x)
        for x in (
            rec.id,
            rec.outcome.value,
            rec.device,
            rec.placement,
            rec.error,
            f"w{rec.worker}" if rec.worker is not None else None,
        )
        if x is not None
    ).lower()
    for word in query.lower().split():
        if word.startswith("slow>"):
            try:
                limit = float(word[5:])
            except ValueError:
                return False
            if rec.e2e_s is None or rec.e2e_s <= limit:
                return False
        elif word not in hay:
            return False
    return True


@dataclass(slots=True)
class _StepCounts:
    finished: int = 0
    errors: dict[str, int] = field(default_factory=dict)


class PipelineState:
    """Folds records and samples into what the panels show (see the module docstring)."""

    def __init__(self, config: StateConfig | None = None) -> None:
        self.config = config or StateConfig()
        self.reset()

    def reset(self) -> None:
        c = self.config
        keep = math.ceil(max(c.window_s, c.rate_window_s) / c.history_step_s) + 2
        self._ttft = WindowedHistogram(c.history_step_s, keep)
        self._itl = WindowedHistogram(c.history_step_s, keep)
        self._steps: dict[int, _StepCounts] = {}
        self._keep_steps = keep
        self.timeline = Timeline(c.timeline_bucket_s, c.timeline_keep)
        self._recent: deque[RequestRecord] = deque(maxlen=c.recent_requests)
        self.pipeline_device: str | None = None  # whose records feed the timeline
        self.devices_seen: list[str] = []
        self._last_errors: deque[str] = deque(maxlen=5)
        self._pending_ttft: dict[int, list[float]] = {}  # per history step, until fold ends
        self._pending_itl: dict[int, list[float]] = {}
        self._resources: ResourceSample | None = None
        self._metrics: deque[EngineMetrics] = deque()
        self._devices: dict[str, DeviceSample] = {}
        self._device_info: dict[str, DeviceInfo] = {}
        self._migrations: deque[MigrationDecision] = deque(maxlen=c.recent_requests)
        self._gateway = GatewayHistory()
        self._temp_hist: dict[str, deque[float]] = {}
        self._hist: dict[str, deque[float]] = {}
        self._hist_step: int | None = None
        self.now_s: float | None = None
        self._first_s: float | None = None
        self.finished_total = 0
        self.items_total = 0

    # ---- folding -------------------------------------------------------------------------
    def fold(self, items: Iterable[Item]) -> None:
        """Take in new items; ``now_s`` follows the newest event time seen."""
        try:
            self._fold(items)
        finally:
            self._flush_latencies()

    def _flush_latencies(self) -> None:
        """Latencies are binned per second in one numpy call each (not one per request)."""
        step = self.config.history_step_s
        for pending, hist in ((self._pending_ttft, self._ttft), (self._pending_itl, self._itl)):
            for k, values in pending.items():
                hist.add((k + 0.5) * step, values)
            pending.clear()

    def _fold(self, items: Iterable[Item]) -> None:
        for item in items:
            self.items_total += 1
            if isinstance(item, RequestRecord):
                self._fold_request(item)
            elif isinstance(item, ResourceSample):
                self._fold_resources(item)
            elif isinstance(item, DeviceSample):
                self._devices[item.device] = item
                h = self._temp_hist.setdefault(item.device, deque(maxlen=self.config.history_len))
                h.append(item.temp_c)
            elif isinstance(item, MigrationDecision):
                self._migrations.append(item)
            elif isinstance(item, DeviceInfo):
                self._device_info[item.device] = item
            elif isinstance(item, EngineMetrics):
                self._fold_metrics(item)
            t = event_time(item)
            if isinstance(item, EngineMetrics) and (self.finished_total or self._resources):
                continue  # scraped on the UI's clock: does not move a server-clocked "now"
            if math.isfinite(t):
                if self.now_s is None or t > self.now_s:
                    self.now_s = t
                if self._first_s is None or t < self._first_s:
                    self._first_s = t

    def _fold_request(self, r: RequestRecord) -> None:
        t = event_time(r)
        self.finished_total += 1
        self._recent.append(r)
        if is_gateway(r):
            self._gateway.add(r)
        k = math.floor(t / self.config.history_step_s)
        step = self._steps.get(k)
        if step is None:
            step = self._steps[k] = _StepCounts()
            for old in [j for j in self._steps if j <= k - self._keep_steps]:
                del self._steps[old]
        step.finished += 1
        if r.outcome is not Outcome.OK:
            step.errors[r.outcome.value] = step.errors.get(r.outcome.value, 0) + 1
            self._last_errors.append(
                f"{r.id}: {r.outcome.value}" + (f" ({r.error})" if r.error else "")
            )
        if r.ttft_s is not None:
            self._pending_ttft.setdefault(k, []).append(r.ttft_s)
        itl = r.itl_s()
        if not itl and r.tpot_s is not None:
            itl = [r.tpot_s] * (r.output_tokens - 1)
        if itl:
            self._pending_itl.setdefault(k, []).extend(itl)
        if self.pipeline_device is None and r.device is not None:
            self.pipeline_device = r.device
        if r.device is not None and r.device not in self.devices_seen:
            self.devices_seen.append(r.device)
        if r.device is None or r.device == self.pipeline_device:
            self.timeline.add_record(r)

    def select_device(self, device: str) -> None:
        """Show the pipeline (timeline, workers) of ``device``; rebuilt from the recent requests."""
        self.pipeline_device = device
        if self.timeline.from_samples:
            return
        self.timeline.clear()
        for r in self._recent:
            if r.device is None or r.device == device:
                self.timeline.add_record(r)

    def _fold_resources(self, s: ResourceSample) -> None:
        prev = self._resources
        interval = 1.0
        if prev is not None and 0 < s.t_s - prev.t_s <= 10:
            interval = s.t_s - prev.t_s
        self._resources = s
        self.timeline.add_sample(s, interval)
        self._push_queues(s.preproc_queue, s.preproc_running, s.engine_waiting, s.engine_running)

    def _push_queues(self, *depths: float | None) -> None:
        """Queue histories get one point per sample (they are sampled, not derived from records)."""
        for key, v in zip(_QUEUE_KEYS, depths, strict=True):
            h = self._hist.setdefault(key, deque(maxlen=self.config.history_len))
            h.append(0.0 if v is None else float(v))

    def _fold_metrics(self, m: EngineMetrics) -> None:
        self._metrics.append(m)
        if self._resources is None:
            self._push_queues(None, None, m.waiting, m.running)
        while len(self._metrics) > 2 and self._metrics[1].t_s <= m.t_s - self.config.window_s:
            self._metrics.popleft()

    # ---- time ----------------------------------------------------------------------------
    def advance(self, now_s: float | None) -> None:
        """Move the source clock to ``now_s`` and record history points for the steps passed."""
        if now_s is not None and (self.now_s is None or now_s > self.now_s):
            self.now_s = now_s
        if self.now_s is None:
            return
        step = self.config.history_step_s
        k = math.floor(self.now_s / step)
        if self._hist_step is None:
            # first look (or after a seek): rebuild the history the kept windows still allow
            first = max(
                k - min(self.config.history_len, self._keep_steps) + 1,
                math.floor(self._first_s / step) if self._first_s is not None else k,
            )
        else:
            first = max(self._hist_step + 1, k - self.config.history_len + 1)
        for j in range(first, k + 1):
            self._record_history((j + 1) * step - 1e-9)
        self._hist_step = k

    def _record_history(self, t: float) -> None:
        o = self._overview_at(t, with_history=False)
        points = {
            "rps": o.requests_per_s,
            "ttft_p50": o.ttft_p50_s,
            "ttft_p99": o.ttft_p99_s,
            "itl_p50": o.itl_p50_s,
            "itl_p99": o.itl_p99_s,
        }
        for key, v in points.items():
            h = self._hist.setdefault(key, deque(maxlen=self.config.history_len))
            h.append(0.0 if v is None else float(v))

    # ---- reading -------------------------------------------------------------------------
    def _overview_at(self, t: float, with_history: bool) -> Overview:
        c = self.config
        hist = {k: tuple(v) for k, v in self._hist.items()} if with_history else {}
        if self._steps or not self._metrics:
            k = math.floor(t / c.history_step_s)
            rate_steps = max(1, round(c.rate_window_s / c.history_step_s))
            win_steps = max(1, round(c.window_s / c.history_step_s))
            finished = sum(s.finished for j, s in self._steps.items() if k - rate_steps < j <= k)
            errors: dict[str, int] = {}
            for j, s in self._steps.items():
                if k - win_steps < j <= k:
                    for name, n in s.errors.items():
                        errors[name] = errors.get(name, 0) + n
            ttft = self._ttft.quantiles(t, c.window_s, (0.5, 0.99))
            itl = self._itl.quantiles(t, c.window_s, (0.5, 0.99))
            seen = self.finished_total > 0
            return Overview(
                requests_per_s=finished / c.rate_window_s if seen else None,
                ttft_p50_s=ttft[0],
                ttft_p99_s=ttft[1],
                itl_p50_s=itl[0],
                itl_p99_s=itl[1],
                errors=sum(errors.values()),
                errors_by_outcome=errors,
                finished_total=self.finished_total,
                last_errors=tuple(self._last_errors),
                history=hist,
            )
        return self._overview_from_metrics(hist)

    def _overview_from_metrics(self, hist: dict[str, tuple[float, ...]]) -> Overview:
        """A stock vLLM server: rates and percentiles from two scrapes of its /metrics."""
        new, old = self._metrics[-1], self._metrics[0]
        rps = None
        errors = 0
        if new.requests_total is not None and old is not new and new.t_s > old.t_s:
            rate_old = next(
                (
                    m
                    for m in reversed(self._metrics)
                    if m.t_s <= new.t_s - self.config.rate_window_s
                ),
                old,
            )
            if rate_old is not new and rate_old.requests_total is not None:
                rps = (new.requests_total - rate_old.requests_total) / (new.t_s - rate_old.t_s)
            if old.requests_total is not None and new.requests_ok_total is not None:
                all_d = new.requests_total - old.requests_total
                ok_d = new.requests_ok_total - (old.requests_ok_total or 0.0)
                errors = max(0, round(all_d - ok_d))
        ttft = bucket_delta(new.ttft_buckets, old.ttft_buckets if old is not new else ())
        itl = bucket_delta(new.itl_buckets, old.itl_buckets if old is not new else ())
        return Overview(
            requests_per_s=rps,
            ttft_p50_s=histogram_quantile(0.5, ttft),
            ttft_p99_s=histogram_quantile(0.99, ttft),
            itl_p50_s=histogram_quantile(0.5, itl),
            itl_p99_s=histogram_quantile(0.99, itl),
            errors=errors,
            errors_by_outcome={"error/abort": errors} if errors else {},
            finished_total=round(new.requests_total or 0),
            last_errors=(),
            history=hist,
        )

    def _queues_now(self) -> Queues:
        hist = {k: tuple(v) for k, v in self._hist.items()}
        s = self._resources
        if s is not None:
            kv = self._metrics[-1].kv_cache_usage if self._metrics else None
            return Queues(
                s.preproc_queue, s.preproc_running, s.engine_waiting, s.engine_running, kv, hist
            )
        if self._metrics:
            m = self._metrics[-1]
            return Queues(
                None,
                None,
                None if m.waiting is None else round(m.waiting),
                None if m.running is None else round(m.running),
                m.kv_cache_usage,
                hist,
            )
        return Queues(None, None, None, None, None, hist)

    def snapshot(self, timeline_columns: int = 120) -> Snapshot:
        """Everything the panels show, as of the current source time."""
        now = self.now_s
        overview = self._overview_at(now if now is not None else 0.0, with_history=True)
        s = self._resources
        if s is not None:
            workers = Workers(tuple(s.worker_busy), tuple(s.worker_stage), s.engine_busy, s.stall_s)
        else:
            # from records: the mean of the last RECORD_WORKERS_S columns (records come late)
            n = max(1, round(RECORD_WORKERS_S / self.config.timeline_bucket_s))
            rows = self.timeline.rows(now - 1e-9, n) if now is not None else []
            means = [sum(c.busy for c in r.cells) / n for r in rows]
            workers = Workers(tuple(means[:-1]), (), means[-1] if means else None, None)
        devices = tuple(
            DeviceView(d, self._device_info.get(name), tuple(self._temp_hist.get(name, ())))
            for name, d in sorted(self._devices.items())
        )
        # a bucket ends at its upper bound: at now = 2.0 the newest full column is [1, 2)
        rows = self.timeline.rows(now - 1e-9, timeline_columns) if now is not None else []
        return Snapshot(
            now_s=now,
            overview=overview,
            queues=self._queues_now(),
            workers=workers,
            timeline=tuple(rows),
            timeline_bucket_s=self.config.timeline_bucket_s,
            timeline_from_samples=self.timeline.from_samples,
            pipeline_device=self.pipeline_device if len(self.devices_seen) > 1 else None,
            recent=tuple(self._recent),
            devices=devices,
            migrations=tuple(self._migrations),
            gateway=self._gateway.view(now, GATEWAY_SECONDS) if now is not None else None,
            resources=s,
            items_total=self.items_total,
        )
