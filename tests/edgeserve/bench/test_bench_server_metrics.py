"""Server figures from two real Prometheus scrapes: per-run means and stall fraction."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from edgeserve.bench.server_metrics import has_settling_counters, parse_metrics, server_figures


def test_histogram_means_and_stall_fraction_cover_only_the_run() -> None:
    reg = CollectorRegistry()
    stage = Histogram("edgeserve_stage_seconds", "per stage", ["stage"], registry=reg)
    ttft = Histogram("vllm:time_to_first_token_seconds", "ttft", ["model_name"], registry=reg)
    http = Histogram("http_request_duration_seconds", "framework", registry=reg)
    stall = Counter("edgeserve_engine_stall_seconds", "stall", registry=reg)
    busy = Counter("edgeserve_engine_busy_seconds", "busy", registry=reg)
    stage.labels(stage="decode").observe(10.0)  # before the run: must not count
    stall.inc(100.0)
    before = parse_metrics(generate_latest(reg).decode())

    for s in (0.1, 0.3):
        stage.labels(stage="decode").observe(s)
    stage.labels(stage="resize").observe(0.05)
    ttft.labels(model_name="a").observe(0.2)
    ttft.labels(model_name="b").observe(0.4)
    http.observe(1.0)
    stall.inc(1.5)
    busy.inc(6.0)
    after = parse_metrics(generate_latest(reg).decode())

    fig = server_figures(before, after, duration_s=10.0)
    assert fig["stage_mean_ms"] == pytest.approx({
        "edgeserve_stage[decode]": 200.0,
        "edgeserve_stage[resize]": 50.0,
        "vllm:time_to_first_token": 300.0,  # summed over model_name labels
    })
    assert list(fig["stage_mean_ms"])[:2] == ["edgeserve_stage[decode]", "edgeserve_stage[resize]"]
    assert fig["stall_fraction"] == pytest.approx(0.15)
    assert fig["engine_busy_fraction"] == pytest.approx(0.6)
    assert has_settling_counters(after)


def test_a_server_without_stall_counters_reports_none() -> None:
    text = (
        "# HELP vllm:request_queue_time_seconds q\n# TYPE vllm:request_queue_time_seconds histogram\n"
        'vllm:request_queue_time_seconds_bucket{le="+Inf"} 2.0\n'
        "vllm:request_queue_time_seconds_sum 0.5\nvllm:request_queue_time_seconds_count 2.0\n"
    )
    snap = parse_metrics(text)
    fig = server_figures(parse_metrics(""), snap, duration_s=1.0)
    assert fig["stage_mean_ms"] == {"vllm:request_queue_time": 250.0}
    assert fig["stall_fraction"] is None
    assert not has_settling_counters(snap)


def test_gpu_busy_counts_apart_from_the_engines_step_spans() -> None:
    reg = CollectorRegistry()
    busy = Counter("edgeserve_engine_busy_seconds", "busy", registry=reg)
    gpu = Counter("edgeserve_gpu_busy_seconds", "nvml", ["gpu"], registry=reg)
    before = parse_metrics(generate_latest(reg).decode())
    busy.inc(4.0)
    gpu.labels(gpu="0").inc(3.0)
    gpu.labels(gpu="1").inc(1.0)
    fig = server_figures(before, parse_metrics(generate_latest(reg).decode()), duration_s=10.0)
    assert fig["engine_busy_fraction"] == pytest.approx(0.4)
    assert fig["gpu_busy_fraction"] == pytest.approx(0.4)  # 3 s + 1 s over 10 s
    assert server_figures(before, before, 10.0)["gpu_busy_fraction"] is None
