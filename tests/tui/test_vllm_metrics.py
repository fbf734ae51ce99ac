"""Reading a stock vLLM server's /metrics (V1 metric names, labels summed)."""

from __future__ import annotations

import pytest

from tests.tui.vllm_metrics_text import VLLM_METRICS
from tui.sources.vllm_metrics import bucket_delta, histogram_quantile, parse_metrics


def test_parse_reads_queues_counters_and_histograms():
    m = parse_metrics(VLLM_METRICS, t_s=12.0)
    assert (m.t_s, m.running, m.waiting, m.kv_cache_usage) == (12.0, 3.0, 7.0, 0.125)
    assert (m.requests_total, m.requests_ok_total) == (100.0, 95.0)  # abort is not ok
    assert m.generation_tokens_total == 3200.0
    assert m.ttft_buckets == ((0.1, 20.0), (0.5, 80.0), (float("inf"), 100.0))
    assert m.itl_buckets[-1] == (float("inf"), 3100.0)


def test_quantiles_interpolate_within_a_bucket_like_prometheus():
    b = ((0.1, 20.0), (0.5, 80.0), (float("inf"), 100.0))
    assert histogram_quantile(0.5, b) == pytest.approx(0.1 + 0.4 * (50 - 20) / 60)
    assert histogram_quantile(0.1, b) == pytest.approx(0.05)
    assert histogram_quantile(0.99, b) == 0.5  # in +Inf: the highest finite bound
    assert histogram_quantile(0.5, ((1.0, 0.0), (float("inf"), 0.0))) is None


def test_bucket_delta_is_what_fell_between_two_scrapes():
    old = ((0.1, 20.0), (float("inf"), 30.0))
    new = ((0.1, 25.0), (float("inf"), 45.0))
    assert bucket_delta(new, old) == ((0.1, 5.0), (float("inf"), 15.0))


def test_text_that_is_not_prometheus_is_an_error():
    with pytest.raises(ValueError):
        parse_metrics("<html>not metrics</html>\n", 0.0)
