"""Prometheus metrics of ``edgeserve serve`` (served at ``GET /metrics``).

All names start with ``edgeserve_``. vLLM's own ``vllm:*`` metrics live in the same registry and
are served alongside, so one scrape sees both the pipeline around the engine and the engine.

Histograms are filled from finished :class:`~edgeserve.records.RequestRecord` s, so metrics,
traces and the event stream always agree. Gauges and the busy/stall counters are set by the
resource sampler at every ``--sample-interval``.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from edgeserve.records import Outcome, RequestRecord, stage_spans
from edgeserve.stalls import WindowStats

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                     10.0, 30.0, 60.0)
ITL_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    """The server's metric objects, registered once per process."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        r = registry
        self.stage_seconds = Histogram(
            "edgeserve_stage_seconds", "Time requests spent per pipeline stage",
            ["stage"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.ttft_seconds = Histogram(
            "edgeserve_time_to_first_token_seconds", "Arrival to first output token",
            buckets=LATENCY_BUCKETS_S, registry=r)
        self.itl_seconds = Histogram(
            "edgeserve_inter_token_latency_seconds", "Time between consecutive output tokens",
            buckets=ITL_BUCKETS_S, registry=r)
        self.e2e_seconds = Histogram(
            "edgeserve_e2e_request_latency_seconds", "Arrival to last byte of the response",
            buckets=LATENCY_BUCKETS_S, registry=r)
        self.requests = Counter(
            "edgeserve_requests", "Finished requests by outcome", ["outcome"], registry=r)
        self.images = Counter("edgeserve_images", "Images preprocessed successfully", registry=r)
        self.queue_depth = Gauge(
            "edgeserve_queue_depth", "Requests per queue/stage at the last sample", ["queue"],
            registry=r)
        self.worker_busy = Gauge(
            "edgeserve_worker_busy_fraction",
            "Fraction of the last sample interval each preprocessing worker was busy",
            ["worker"], registry=r)
        self._restarts_seen = 0
        self.worker_restarts = Counter(
            "edgeserve_worker_restarts", "Preprocessing workers replaced after dying", registry=r)
        self.preproc_retries = Counter(
            "edgeserve_preproc_retries",
            "Images preprocessed again because the worker holding them died", registry=r)
        self.engine_busy = Counter(
            "edgeserve_engine_busy_seconds",
            "Time the engine spent in model steps (vLLM stat logger)", registry=r)
        self.engine_stall = Counter(
            "edgeserve_engine_stall_seconds",
            "Time the engine was idle while an admitted request sat in a CPU stage", registry=r)
        self.gpu_utilization = Gauge(
            "edgeserve_gpu_utilization",
            "NVML GPU utilization (0-1) at the last sample, per GPU index", ["gpu"], registry=r)
        self.gpu_busy = Counter(
            "edgeserve_gpu_busy_seconds",
            "NVML-sampled GPU busy time (utilization x sample interval), per GPU", ["gpu"],
            registry=r)
        self.gpu_memory_used = Gauge(
            "edgeserve_gpu_memory_used_bytes", "NVML memory in use at the last sample, per GPU",
            ["gpu"], registry=r)
        self.engine_busy_fraction = Gauge(
            "edgeserve_engine_busy_fraction", "Engine busy fraction in the last settled window",
            registry=r)
        self.frontend_cpu = Counter(
            "edgeserve_frontend_cpu_seconds",
            "CPU time of the frontend process (HTTP, vLLM input processing, detokenizing)",
            registry=r)
        for o in Outcome:
            if o is not Outcome.DROPPED:
                self.requests.labels(outcome=o.value)

    def observe_record(self, rec: RequestRecord) -> None:
        self.requests.labels(outcome=rec.outcome.value).inc()
        self.preproc_retries.inc(rec.preproc_retries)
        for stage, a, b in stage_spans(rec):
            self.stage_seconds.labels(stage=stage.value).observe(b - a)
        if rec.outcome is Outcome.OK:
            if rec.ttft_s is not None:
                self.ttft_seconds.observe(rec.ttft_s)
            if rec.e2e_s is not None:
                self.e2e_seconds.observe(rec.e2e_s)
            for gap in rec.itl_s():
                self.itl_seconds.observe(gap)
            self.images.inc(rec.num_images)

    def observe_worker_restarts(self, total: int) -> None:
        """Bring the restarts counter up to the pool's running ``total`` (read at each scrape)."""
        if total > self._restarts_seen:
            self.worker_restarts.inc(total - self._restarts_seen)
            self._restarts_seen = total

    def observe_window(self, w: WindowStats) -> None:
        self.engine_busy.inc(w.busy_s)
        self.engine_stall.inc(w.stall_s)
        self.engine_busy_fraction.set(w.busy_fraction)
