"""Report maths against hand-computed values, and the vLLM key names of the JSON."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from edgeserve.bench.client import RequestResult
from edgeserve.bench.report import (
    client_stall_fraction,
    latency_stats,
    parse_goodput,
    per_second_peaks,
    summarize,
)


def done(index: int, start: float, ttft: float, e2e: float, out: int = 3, prompt: int = 10,
         itl: list[float] | None = None) -> RequestResult:
    return RequestResult(index=index, ok=True, start_s=start, ttft_s=ttft, e2e_s=e2e,
                         output_tokens=out, prompt_tokens=prompt, itl_s=itl or [])


def test_latency_stats_are_numpy_linear_percentiles_in_milliseconds() -> None:
    stats = latency_stats("ttft", [0.1, 0.2, 0.3, 0.4], percentiles=(50, 99, 99.9))
    assert stats["mean_ttft_ms"] == pytest.approx(250.0)
    assert stats["median_ttft_ms"] == pytest.approx(250.0)
    # rank (n-1)·p = 3·0.99 = 2.97 → 300 + 0.97·100
    assert stats["p99_ttft_ms"] == pytest.approx(397.0)
    assert stats["p99.9_ttft_ms"] == pytest.approx(399.7)
    assert stats["std_ttft_ms"] == pytest.approx(111.803, rel=1e-4)


def test_metrics_with_no_samples_are_null_not_zero() -> None:
    stats = latency_stats("itl", [])
    assert set(stats.values()) == {None}


def test_summary_counts_tokens_throughput_and_tpot() -> None:
    results = [
        done(0, 0.0, 0.5, 1.5, out=5, prompt=100, itl=[0.25] * 4),  # TPOT (1.5-0.5)/4 = 0.25
        done(1, 1.0, 1.0, 2.0, out=3, prompt=50, itl=[0.5, 0.5]),  # TPOT 0.5
        RequestResult(index=2, ok=False, error="HTTP 429: busy", start_s=1.5),
    ]
    m = summarize(results, duration_s=4.0)
    assert (m["completed"], m["failed"]) == (2, 1)
    assert (m["total_input_tokens"], m["total_output_tokens"]) == (150, 8)
    assert m["request_throughput"] == pytest.approx(0.5)
    assert m["output_throughput"] == pytest.approx(2.0)
    assert m["total_token_throughput"] == pytest.approx(158 / 4)
    assert m["mean_tpot_ms"] == pytest.approx(375.0)
    assert m["mean_ttft_ms"] == pytest.approx(750.0)
    assert m["mean_e2el_ms"] == pytest.approx(1750.0)
    assert m["mean_itl_ms"] == pytest.approx((4 * 250 + 2 * 500) / 6)
    assert m["error_counts"] == {"HTTP 429: busy": 1}
    assert m["request_goodput"] is None


def test_goodput_counts_requests_that_meet_every_slo() -> None:
    results = [done(0, 0, 0.1, 0.5), done(1, 0, 0.3, 0.6), done(2, 0, 0.1, 2.0)]
    m = summarize(results, 2.0, goodput_slo_ms=parse_goodput(["ttft:200", "e2el:1000"]))
    assert m["request_goodput"] == pytest.approx(1 / 2.0)  # only request 0 meets both


@pytest.mark.parametrize("spec", ["ttft", "latency:100", "ttft:abc", "ttft:-5"])
def test_bad_slo_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="bad SLO"):
        parse_goodput([spec])


def test_stall_is_time_someone_waits_for_a_first_token_while_nobody_generates() -> None:
    # A waits [0,1) and generates [1,2); B waits [1.5,3) and generates [3,4).
    # Waiting and nobody generating: [0,1) and [2,3) → 2 s of a 4 s run.
    results = [done(0, 0.0, 1.0, 2.0), done(1, 1.5, 1.5, 2.5)]
    assert client_stall_fraction(results, 4.0) == pytest.approx(0.5)


def test_no_stall_while_the_engine_is_always_generating_for_someone() -> None:
    # A generates [0.1, 10); B and C wait inside that span.
    results = [done(0, 0.0, 0.1, 10.0), done(1, 2.0, 1.0, 3.0), done(2, 5.0, 2.0, 3.0)]
    assert client_stall_fraction(results, 10.0) == pytest.approx(0.01)


def test_per_second_peaks_bin_tokens_and_active_requests_by_whole_seconds_like_vllm() -> None:
    # A: sent 0.0, tokens at 0.2, 0.4, 1.6; active in seconds 0-1.
    # B: sent 0.5, tokens at 0.7, 0.9;      active in second 0.
    # C: sent 2.5, token at 2.6;            active in second 2.
    results = [
        done(0, 0.0, 0.2, 1.6, itl=[0.2, 1.2]),
        done(1, 0.5, 0.2, 0.4, itl=[0.2]),
        done(2, 2.5, 0.1, 0.1),
    ]
    assert per_second_peaks(results) == (4.0, 2)  # second 0: 4 tokens, A and B active


def _vllm_result_keys() -> set[str]:
    """Keys `vllm bench serve --save-result` writes, read from vLLM's source (not imported)."""
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None
    src = (Path(spec.origin).parent / "benchmarks" / "serve.py").read_text()
    keys = set(re.findall(r'^\s+"(\w+)": metrics\.', src, flags=re.M))
    keys |= set(re.findall(r'result_json\["(\w+)"\]', src))
    for metric in ("ttft", "tpot", "itl", "e2el"):  # process_one_metric(f"mean_{name}_ms", …)
        keys |= {f"mean_{metric}_ms", f"median_{metric}_ms", f"std_{metric}_ms", f"p99_{metric}_ms"}
    assert "request_throughput" in keys and "burstiness" in keys  # the source still reads so
    return keys


def test_json_uses_vllm_bench_serve_key_names_where_they_overlap() -> None:
    from edgeserve.bench.report import run_header

    m = summarize([done(0, 0, 0.1, 0.5)], 1.0, goodput_slo_ms={"ttft": 100.0})
    m |= run_header(label="x", model_id="m", num_prompts=1, request_rate=float("inf"),
                    burstiness=1.0, max_concurrency=None, base_url="http://h", workload="w")
    expected = _vllm_result_keys() - {
        "rtfx",  # audio benchmarks only
        "total_input_sequences", "input_sequence_throughput",  # embedding benchmarks only
        "metadata",
    }
    expected = {k for k in expected if not k.startswith(("spec_decode", "ramp_up", "diffusion"))}
    assert expected - m.keys() == set()
    assert m["request_rate"] == "inf"


def test_the_engine_prefill_is_not_counted_as_stall_when_known() -> None:
    # A: sent 0, first token 1.0, last 2.0; B: sent 2.5, first token 3.0, last 4.0. Prefill 0.5 s:
    # A is in the engine from 0.5, B from 2.5 → upstream waiting without engine work: [0, 0.5).
    results = [done(0, 0.0, 1.0, 2.0), done(1, 2.5, 0.5, 1.5)]
    assert client_stall_fraction(results, 4.0) == pytest.approx(1.5 / 4)  # [0,1) and [2.5,3)
    assert client_stall_fraction(results, 4.0, prefill_s=0.5) == pytest.approx(0.5 / 4)
