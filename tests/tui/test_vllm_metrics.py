"""Reading a stock vLLM server's /metrics (V1 metric names, labels summed)."""

from __future__ import annotations

import pytest

from tui.sources.vllm_metrics import bucket_delta, histogram_quantile, parse_metrics

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 7.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.125
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 40.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 55.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 5.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 3200.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="tiny"} 20.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="tiny"} 80.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 100.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 100.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 31.0
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="tiny"} 1000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.025",model_name="tiny"} 3000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 3100.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="tiny"} 3100.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="tiny"} 50.0
"""


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
