"""Throughputs side by side, cache hit rates from real Prometheus text, the direction warning."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

from edgeserve.bench.report import format_summary, summarize
from edgeserve.bench.server_metrics import parse_metrics
from edgeserve.bench.throughput import cache_figures, cache_line, direction_warning, throughput_line


def _scrape(prefix_q: float, prefix_h: float, mm_q: float | None = None,
            mm_h: float | None = None) -> str:
    """/metrics text with vLLM 0.32's cache counters (same names, labels and types)."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    q = Counter("vllm:prefix_cache_queries", "queried tokens", labels, registry=reg)
    h = Counter("vllm:prefix_cache_hits", "cached tokens", labels, registry=reg)
    q.labels("m", "0").inc(prefix_q)
    h.labels("m", "0").inc(prefix_h)
    if mm_q is not None and mm_h is not None:
        mq = Counter("vllm:mm_cache_queries", "queried items", labels, registry=reg)
        mh = Counter("vllm:mm_cache_hits", "cached items", labels, registry=reg)
        mq.labels("m", "0").inc(mm_q)
        mh.labels("m", "0").inc(mm_h)
    return generate_latest(reg).decode()


def test_hit_rates_are_deltas_over_the_run() -> None:
    before = parse_metrics(_scrape(1000, 100, 4, 0))
    after = parse_metrics(_scrape(3000, 1300, 10, 3))
    f = cache_figures(before, after)
    assert (f["prefix_cache_queries"], f["prefix_cache_hits"]) == (2000, 1200)
    assert f["prefix_cache_hit_rate"] == 0.6
    assert f["mm_cache_hit_rate"] == 0.5
    assert cache_line(f) == ("cache hits: prefix cache 60.0% of 2000 tokens, "
                             "multimodal cache 50.0% of 6 items")


def test_a_server_without_the_counters_or_without_lookups_has_no_rate() -> None:
    snap = parse_metrics(_scrape(500, 0))
    f = cache_figures(snap, snap)
    assert f["prefix_cache_hit_rate"] is None and f["prefix_cache_queries"] == 0
    assert f["mm_cache_queries"] is None and f["mm_cache_hit_rate"] is None
    assert cache_line(f) == "cache hits: prefix cache no lookups, multimodal cache n/a"


def _run(total: float, output: float) -> dict[str, float]:
    return {"total_token_throughput": total, "output_throughput": output,
            "request_throughput": 1.0}


def test_opposite_moves_of_total_and_output_throughput_warn_in_one_line() -> None:
    w = direction_warning(_run(500, 200), _run(1100, 190), "chat", "prefix")
    assert w is not None and "\n" not in w
    assert "total token throughput goes up (500.0 → 1100.0" in w
    assert "output token throughput goes down (200.0 → 190.0" in w
    assert direction_warning(_run(500, 200), _run(1100, 250)) is None  # both up
    assert direction_warning(_run(500, 200), _run(400, 150)) is None  # both down
    assert direction_warning(_run(500, 200), _run(1100, 199)) is None  # −0.5 %: no change


def test_the_summary_always_ends_with_the_three_throughputs() -> None:
    from edgeserve.bench.client import RequestResult

    done = RequestResult(index=0, ok=True, ttft_s=0.1, e2e_s=0.5, itl_s=[0.1] * 4,
                         prompt_tokens=300, output_tokens=5)
    m = summarize([done, done], duration_s=2.0)
    assert throughput_line(m) == ("throughput: requests 1.00 req/s | output 5.0 tok/s | "
                                  "total 305.0 tok/s (total/output 61.00×)")
    assert format_summary(m).splitlines()[-1] == throughput_line(m)
