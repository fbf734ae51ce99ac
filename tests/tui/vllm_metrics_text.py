"""A stock vLLM V1 server's /metrics, abridged (the metric families the UI reads)."""

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
