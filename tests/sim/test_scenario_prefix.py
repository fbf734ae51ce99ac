"""Prefix ids on the scenario path: workloads and replayed traces name a request's shared prefix,
the device→cloud offload looks it up in the server's prefix cache — exact timelines."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from edgeserve.records import RequestRecord, TraceHeader, TraceWriter, read_trace
from sim.core.simulation import Simulation
from sim.core.workload import arrivals
from sim.scenario.config import PrefixConfig, WorkloadConfig, scenario_from_raw
from sim.scenario.schema import ConfigError

# The toy replica of test_cloud_deployment: 1 ms of compute per prompt token, room for 1000 KV
# tokens; the link has no latency to speak of, so the server's times are round numbers
TOY_CLOUD: dict[str, Any] = {
    "name": "toy",
    "gpu": {"name": "toy", "memory_gb": 1.0010245, "mem_bandwidth_gb_s": 1000,
            "compute_tflops": 1},
    "model": {"name": "toy", "params_b": 0.5, "layers": 2, "kv_heads": 2, "head_dim": 64},
    "server": {"gpu_memory_utilization": 1.0, "step_overhead_s": 0.0, "compute_efficiency": 1.0,
               "bandwidth_efficiency": 1.0, "activation_reserve_gb": 0.0,
               "preprocess_s_per_mpixel": 0.0, "encode_s_per_image_token": 0.0},
}


def replay_scenario(trace: Path, prefix_caching: bool = True) -> dict[str, Any]:
    """One device offloading every request of ``trace`` to the toy server."""
    return {
        "name": "prefix-replay", "duration_s": 1000, "sample_interval_s": 1000,
        "policy": {"kind": "always_cloud"},
        "devices": [{"name": "app", "profile": "jetson-orin-nano",
                     "workload": {"kind": "replay", "trace": str(trace)},
                     "link": {"rtt_ms": 0, "jitter_ms": 0, "loss": 0,
                              "request_overhead_bytes": 0}}],
        "cloud": [{"name": "toy", "profile": TOY_CLOUD,
                   "deployment": {"prefix_caching": prefix_caching}}],
    }


def write_trace(path: Path, rows: list[tuple[str, float, str]]) -> None:
    """Text-only requests of 500 prompt tokens opening with a 400-token prefix, 1 output token."""
    with TraceWriter(path, TraceHeader(producer="edgeserve serve")) as w:
        for name, t, prefix in rows:
            w.write(RequestRecord(id=name, arrived_s=t, prompt_tokens=500, output_tokens=1,
                                  prefix_id=prefix, prefix_tokens=400))


def server_timeline(raw: dict[str, Any], tmp_path: Path) -> tuple[list[tuple[Any, ...]], Any]:
    """(arrival, prefix, cached tokens, prefill seconds on the server) per request, and the
    summary; the prefill is first token − arrival at the server (uplink end)."""
    out = tmp_path / "sim.jsonl"
    summary = Simulation(scenario_from_raw(raw), trace_path=out).run()
    recs = sorted((r for r in read_trace(out) if isinstance(r, RequestRecord)),
                  key=lambda r: r.arrived_s)
    return [(r.arrived_s, r.prefix_id, r.cached_tokens,
             round((r.first_token_s or 0) - (r.uplink_end_s or 0), 9)) for r in recs], summary


def test_a_replayed_prefix_hits_on_its_second_arrival_and_skips_the_cached_tokens(
        tmp_path: Path) -> None:
    write_trace(tmp_path / "run.jsonl", [("a1", 100.0, "sys-a"), ("a2", 110.0, "sys-a")])
    log, summary = server_timeline(replay_scenario(tmp_path / "run.jsonl"), tmp_path)
    # a1 computes all 500 tokens (0.5 s); a2 finds the 400 cached ones and computes 100 (0.1 s)
    assert log == [(0.0, "sys-a", 0, 0.5), (10.0, "sys-a", 400, 0.1)]
    (cloud,) = summary.clouds
    assert (cloud.prefix_lookups, cloud.prefix_hits, cloud.prefix_hit_tokens) == (2, 1, 400)
    assert cloud.prefix_hit_rate == 0.5


def test_an_evicted_prefix_is_recomputed_on_the_scenario_path(tmp_path: Path) -> None:
    # 1000 KV tokens, a request reserves 501: 499 are left for cached prefixes, room for one;
    # b's prefix evicts a's, so a3 computes its whole prompt again
    write_trace(tmp_path / "run.jsonl", [("a1", 0.0, "a"), ("a2", 10.0, "a"), ("b", 20.0, "b"),
                                         ("a3", 30.0, "a")])
    log, summary = server_timeline(replay_scenario(tmp_path / "run.jsonl"), tmp_path)
    assert log == [(0.0, "a", 0, 0.5), (10.0, "a", 400, 0.1), (20.0, "b", 0, 0.5),
                   (30.0, "a", 0, 0.5)]
    (cloud,) = summary.clouds
    assert (cloud.prefix_hits, cloud.prefix_lookups, cloud.prefix_evictions) == (1, 4, 2)


def test_without_prefix_caching_every_prefill_is_the_whole_prompt(tmp_path: Path) -> None:
    write_trace(tmp_path / "run.jsonl", [("a1", 0.0, "a"), ("a2", 10.0, "a")])
    log, summary = server_timeline(replay_scenario(tmp_path / "run.jsonl", False), tmp_path)
    assert log == [(0.0, "a", 0, 0.5), (10.0, "a", 0, 0.5)]
    assert summary.clouds[0].prefix_caching is False and summary.clouds[0].prefix_lookups == 0


def synthetic_scenario(prefix: dict[str, Any] | None, caching: bool = True) -> dict[str, Any]:
    wl: dict[str, Any] = {"kind": "poisson", "rate_hz": 2.0, "text_tokens": 500,
                          "output_tokens": [1, 1], "image": {"sizes": [{"width": 56,
                                                                         "height": 56}]}}
    if prefix is not None:
        wl["prefix"] = prefix
    return {**replay_scenario(Path("unused")), "requests": 400,
            "devices": [{"name": "app", "profile": "jetson-orin-nano", "count": 2,
                         "workload": wl, "link": {"rtt_ms": 0, "jitter_ms": 0, "loss": 0}}],
            # room for 10,000 KV tokens: the one prefix is never evicted
            "cloud": [{"name": "toy", "profile": {**TOY_CLOUD, "gpu": {
                **TOY_CLOUD["gpu"], "memory_gb": 1.0102405}},
                       "deployment": {"prefix_caching": caching}}]}


def test_a_workload_prefix_spec_is_shared_by_the_entrys_devices_and_leaves_arrivals_alone(
        tmp_path: Path) -> None:
    plain = tmp_path / "plain.jsonl"
    Simulation(scenario_from_raw(synthetic_scenario(None)), trace_path=plain).run()
    out = tmp_path / "prefixed.jsonl"
    summary = Simulation(scenario_from_raw(synthetic_scenario(
        {"count": 1, "tokens": 400})), trace_path=out).run()
    recs = [r for r in read_trace(out) if isinstance(r, RequestRecord)]
    before = [r for r in read_trace(plain) if isinstance(r, RequestRecord)]
    # the prefixes come from a stream of their own: the same arrivals and sizes as without
    assert sorted((r.id, r.arrived_s, r.prompt_tokens) for r in recs) == \
        sorted((r.id, r.arrived_s, r.prompt_tokens) for r in before)
    assert {r.prefix_id for r in recs} == {"app:0"} and {r.prefix_tokens for r in recs} == {400}
    # both devices of the entry share the one prefix: only the very first request misses
    (cloud,) = summary.clouds
    assert (cloud.prefix_lookups, cloud.prefix_hits, cloud.prefix_evictions) == (400, 399, 0)
    assert sum(r.cached_tokens for r in recs) == cloud.prefix_hit_tokens == 400 * cloud.prefix_hits
    # the cached prefill is shorter: mean TTFT drops against the same arrivals without caching
    nocache = Simulation(scenario_from_raw(synthetic_scenario(
        {"count": 1, "tokens": 400}, caching=False))).run()
    assert summary.fleet.ttft_p50_s < nocache.fleet.ttft_p50_s


def test_prefix_popularity_follows_its_zipf_law() -> None:
    cfg = WorkloadConfig(text_tokens=100, prefix=PrefixConfig(count=4, tokens=50, zipf_s=1.0))
    got = [a[7] for a in itertools.islice(arrivals(cfg, random.Random(3), "cam"), 40_000)]
    weights = [1, 1 / 2, 1 / 3, 1 / 4]
    for k, w in enumerate(weights):
        share = sum(1 for p in got if p == (f"cam:{k}", 50)) / len(got)
        assert share == pytest.approx(w / sum(weights), abs=0.01)
    uniform = WorkloadConfig(text_tokens=100, prefix=PrefixConfig(count=4, tokens=50))
    got = [a[7] for a in itertools.islice(arrivals(uniform, random.Random(3), "cam"), 40_000)]
    assert sum(1 for p in got if p[0] == "cam:3") / len(got) == pytest.approx(0.25, abs=0.01)
    # off by default: no prefix at all
    assert next(arrivals(WorkloadConfig(), random.Random(0)))[7] is None


@pytest.mark.parametrize(("prefix", "message"), [
    ({"count": 2, "tokens": 600}, "workload.prefix.tokens: a prefix opens the prompt's text: at "
                                  "most text_tokens (500), got 600"),
    ({"count": 2}, "workload.prefix.tokens: prefixes (count > 0) need tokens > 0"),
    ({"count": -1, "tokens": 10}, "workload.prefix.count: must be >= 0"),
    ({"count": 2, "tokens": 10, "zipf": 1}, "workload.prefix.zipf: unknown field"),
])
def test_a_bad_prefix_spec_is_named(prefix: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        scenario_from_raw(synthetic_scenario(prefix))
    assert message in str(e.value)
