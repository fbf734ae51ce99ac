"""A vLLM server's Prometheus ``/metrics``, reduced to what the UI's panels show.

A stock vLLM server publishes no request records, only counters, gauges and histograms. From two
scrapes the UI can still show requests/s (the success counter's rate), TTFT and inter-token latency
percentiles (the difference of two cumulative histograms, interpolated within a bucket the way
Prometheus' ``histogram_quantile`` does) and the engine's waiting/running queues.

Metric names are vLLM V1's (``vllm:num_requests_waiting``, ``vllm:time_to_first_token_seconds``,
…); series are summed over their labels (model, engine, finish reason).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Buckets = tuple[tuple[float, float], ...]
"""A cumulative histogram: ``(upper_bound_s, count)`` pairs, ascending, the last bound ``inf``."""


@dataclass(slots=True, frozen=True)
class EngineMetrics:
    """One scrape of a vLLM ``/metrics`` endpoint, taken at ``t_s`` on the UI's clock."""

    t_s: float
    waiting: float | None = None
    running: float | None = None
    kv_cache_usage: float | None = None  # fraction 0..1
    requests_ok_total: float | None = None  # finished for any reason except abort/error
    requests_total: float | None = None  # all finish reasons
    generation_tokens_total: float | None = None
    ttft_buckets: Buckets = ()
    itl_buckets: Buckets = ()


_OK_REASONS = frozenset({"stop", "length"})


def parse_metrics(text: str, t_s: float) -> EngineMetrics:
    """Parse the Prometheus text exposition of a vLLM server.

    Raises:
        ValueError: The text is not Prometheus exposition format.
    """
    gauges: dict[str, float] = {}
    success_ok = success_all = 0.0
    have_success = False
    gen_tokens: float | None = None
    hists: dict[str, dict[float, float]] = {}
    for fam in text_string_to_metric_families(text):
        name = fam.name
        if name in (
            "vllm:num_requests_waiting",
            "vllm:num_requests_running",
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
        ):
            gauges[name] = gauges.get(name, 0.0) + sum(s.value for s in fam.samples)
        elif name == "vllm:request_success":
            for s in fam.samples:
                if s.name.endswith("_total"):
                    have_success = True
                    success_all += s.value
                    if s.labels.get("finished_reason", "stop") in _OK_REASONS:
                        success_ok += s.value
        elif name == "vllm:generation_tokens":
            gen_tokens = sum(s.value for s in fam.samples if s.name.endswith("_total"))
        elif name in (
            "vllm:time_to_first_token_seconds",
            "vllm:inter_token_latency_seconds",
            "vllm:time_per_output_token_seconds",
        ):
            h = hists.setdefault(name, {})
            for s in fam.samples:
                if s.name.endswith("_bucket"):
                    le = float(s.labels["le"])
                    h[le] = h.get(le, 0.0) + s.value
    itl = hists.get("vllm:inter_token_latency_seconds") or hists.get(
        "vllm:time_per_output_token_seconds", {}
    )
    kv = gauges.get("vllm:kv_cache_usage_perc", gauges.get("vllm:gpu_cache_usage_perc"))
    return EngineMetrics(
        t_s=t_s,
        waiting=gauges.get("vllm:num_requests_waiting"),
        running=gauges.get("vllm:num_requests_running"),
        kv_cache_usage=kv,
        requests_ok_total=success_ok if have_success else None,
        requests_total=success_all if have_success else None,
        generation_tokens_total=gen_tokens,
        ttft_buckets=tuple(sorted(hists.get("vllm:time_to_first_token_seconds", {}).items())),
        itl_buckets=tuple(sorted(itl.items())),
    )


def bucket_delta(new: Buckets, old: Buckets) -> Buckets:
    """Observations that fell between two scrapes of one cumulative histogram."""
    if not old:
        return new
    before = dict(old)
    return tuple((le, max(0.0, c - before.get(le, 0.0))) for le, c in new)


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The ``q``-quantile of a cumulative histogram, linear within the bucket (as Prometheus).

    Returns ``None`` when the histogram is empty. A quantile in the ``+Inf`` bucket reports the
    highest finite bound.
    """
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if math.isinf(le):
                return prev_le
            if c == prev_c:
                return le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    return prev_le
