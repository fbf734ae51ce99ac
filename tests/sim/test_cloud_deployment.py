"""Cloud deployments: prefix caching, checkpoint size, tensor parallelism — exact timelines."""

from __future__ import annotations

import pytest

from edgeserve.records import RequestRecord
from sim.core.cloud import CloudServer, Roofline, kv_bytes_per_token, kv_capacity_tokens
from sim.core.job import Job
from sim.core.loop import EventLoop
from sim.scenario.deployment import Deployment, Interconnect, InterconnectKind, load_box_profile
from sim.scenario.profiles import CloudProfile, Dtype, GpuConfig, ModelShape, ServerConfig

# A toy replica with round numbers: 1 GB of bf16 weights read in 1 ms, 1 ms of compute per token,
# 1024 KV bytes per token, room for 1000 tokens of KV (and half a token)
TOY = CloudProfile(
    name="toy",
    gpu=GpuConfig(name="toy", memory_gb=1.0010245, mem_bandwidth_gb_s=1000, compute_tflops=1),
    model=ModelShape(name="toy", params_b=0.5, layers=2, kv_heads=2, head_dim=64),
    server=ServerConfig(gpu_memory_utilization=1.0, step_overhead_s=0.0, compute_efficiency=1.0,
                        bandwidth_efficiency=1.0, activation_reserve_gb=0.0),
)
LLAMA2_7B = ModelShape(name="llama-2-7b", params_b=6.74, layers=32, kv_heads=32, head_dim=128)
A100 = GpuConfig(name="A100 80GB", memory_gb=80, mem_bandwidth_gb_s=2039, compute_tflops=312)
NVLINK = Interconnect(InterconnectKind.NVLINK, bandwidth_gb_s=300, latency_s=5e-6)
PCIE = Interconnect(InterconnectKind.PCIE, bandwidth_gb_s=25, latency_s=20e-6)


def run_prefixed(arrivals: list[tuple[str, float, int, int]], deployment: Deployment,
                 profile: CloudProfile = TOY) -> tuple[list[tuple[str, float, float]], CloudServer]:
    """Requests (name, arrival s, prefix id, prompt tokens) with 400-token prefixes and 1 output
    token; the log is (name, arrival, first token) in finishing order."""
    loop = EventLoop()
    log: list[tuple[str, float, float]] = []

    def done(j: Job) -> None:
        log.append((j.rec.id, j.rec.arrived_s, round(float(j.rec.first_token_s or 0), 9)))

    server = CloudServer(loop, "c", profile, 1, done, deployment=deployment)

    def arrive(arg: tuple[Job, int]) -> None:
        server.submit_prefixed(arg[0], arg[1], 400)

    for name, t, prefix, prompt in arrivals:
        job = Job(RequestRecord(id=name, arrived_s=t), None, 0, 0, 0, prompt, 1)
        loop.at(t, arrive, (job, prefix))
    loop.run_until(100.0)
    return log, server


def test_toy_replica_numbers() -> None:
    assert kv_capacity_tokens(TOY) == 1000
    # 500 prompt tokens: compute-bound, 0.5 s (reading 1 GB + 0.5 MB takes 1.0005 ms)
    assert Roofline(TOY).prefill_tokens_s(500) == pytest.approx(0.5)


def test_a_prefix_hit_shortens_the_prefill_by_the_cached_tokens() -> None:
    arrivals = [("a1", 0.0, 7, 500), ("a2", 1.0, 7, 500), ("b", 2.0, 8, 500)]
    log, server = run_prefixed(arrivals, Deployment(prefix_caching=True))
    # a2 finds a1's 400-token prefix: it computes 100 tokens, 0.1 s instead of 0.5
    assert log == [("a1", 0.0, 0.5), ("a2", 1.0, 1.1), ("b", 2.0, 2.5)]
    cache = server.prefix_caches[0]
    assert (cache.hits, cache.misses, cache.hit_tokens) == (1, 2, 400)
    # without prefix caching every prefill is the whole prompt
    log, server = run_prefixed(arrivals, Deployment())
    assert log == [("a1", 0.0, 0.5), ("a2", 1.0, 1.5), ("b", 2.0, 2.5)]
    assert server.prefix_caches == []


def test_an_evicted_prefix_is_recomputed() -> None:
    # 1000 KV tokens, a request reserves 501: 499 are left for cached prefixes, room for one.
    # b's prefix evicts a's at 2 s; a's third request computes all 500 tokens again.
    log, server = run_prefixed(
        [("a1", 0.0, 7, 500), ("a2", 1.0, 7, 500), ("b", 2.0, 8, 500), ("a3", 3.0, 7, 500)],
        Deployment(prefix_caching=True))
    assert log == [("a1", 0.0, 0.5), ("a2", 1.0, 1.1), ("b", 2.0, 2.5), ("a3", 3.0, 3.5)]
    cache = server.prefix_caches[0]
    assert (cache.hits, cache.misses, cache.evictions) == (1, 3, 2)
    assert 7 in cache and 8 not in cache


def test_prefixes_held_by_running_requests_leave_less_room() -> None:
    # a1 runs (501 tokens reserved) when a2 arrives: a2's budget is 1000 − 501 − 501 < 400,
    # so the cached prefix is evicted and a2 computes everything (after a1: 0.5 → 1.0)
    log, server = run_prefixed([("a1", 0.0, 7, 500), ("a2", 0.1, 7, 500)],
                               Deployment(prefix_caching=True))
    assert log == [("a1", 0.0, 0.5), ("a2", 0.1, 1.0)]
    assert server.prefix_caches[0].hits == 0


def test_ring_allreduce_closed_form() -> None:
    link = Interconnect(InterconnectKind.PCIE, bandwidth_gb_s=10, latency_s=10e-6)
    # 4 GPUs: 2·3 hops of latency and 2·3/4 of the message over the link
    assert link.allreduce_s(1e6, 4) == pytest.approx(6 * 10e-6 + 1.5 * 1e6 / 10e9)
    assert link.allreduce_s(1e6, 1) == 0.0


def test_tp_step_time_is_the_per_gpu_roofline_plus_two_allreduces_per_layer() -> None:
    p = CloudProfile(name="a100", gpu=A100, model=LLAMA2_7B)
    d = Deployment(tp_size=2, interconnect=NVLINK, hidden_size=4096)
    r = Roofline(p, d)
    weights_s = 6.74e9 * 2 / 2 / (2039e9 * 0.8)  # half the weights per GPU
    ar_s = 2 * 32 * (2 * 5e-6 + 2 * 1 / 2 * 8 * 4096 * 2 / 300e9)  # 8 tokens of activations
    assert r.step_s(8, 0) == pytest.approx(weights_s + 0.003 + ar_s, rel=1e-12)
    compute_s = 2 * 6.74e9 / 2 * 2048 / (312e12 * 0.5)  # half the FLOPs per GPU
    ar_s = 2 * 32 * (2 * 5e-6 + 2048 * 4096 * 2 / 300e9)
    assert r.prefill_tokens_s(2048) == pytest.approx(compute_s + 0.003 + ar_s, rel=1e-12)
    # the same replica over PCIe pays more for the same all-reduces
    assert Roofline(p, Deployment(tp_size=2, interconnect=PCIE, hidden_size=4096)).step_s(8, 0) \
        > r.step_s(8, 0)


def test_tp_timeline_of_one_request() -> None:
    p = CloudProfile(name="a100", gpu=A100, model=LLAMA2_7B)
    d = Deployment(tp_size=4, interconnect=PCIE, hidden_size=4096)
    r = Roofline(p, d)
    loop = EventLoop()
    log = []
    server = CloudServer(loop, "c", p, 1, lambda j: log.append(
        (j.rec.first_token_s, j.rec.last_token_s)), deployment=d)
    server.arrive(Job(RequestRecord(id="x", arrived_s=0.0), None, 0, 0, 0, 1000, 3))
    loop.run_until(10.0)
    first = r.prefill_tokens_s(1000)
    assert log == [pytest.approx((first, first + 2 * r.step_s(1, 1000)), rel=1e-9)]


def test_kv_capacity_with_tp_splits_weights_and_kv_heads() -> None:
    p = CloudProfile(name="a100", gpu=A100, model=LLAMA2_7B,
                     server=ServerConfig(gpu_memory_utilization=0.9, activation_reserve_gb=0.0))
    d = Deployment(tp_size=2, interconnect=NVLINK, hidden_size=4096)
    per_gpu_token = 2 * 32 * 16 * 128 * 2  # 16 of the 32 KV heads on each GPU
    assert kv_bytes_per_token(LLAMA2_7B, d) == per_gpu_token
    assert kv_capacity_tokens(p, d) == int((72e9 - 6.74e9) // per_gpu_token) == 248_947
    assert kv_capacity_tokens(p, d) > 2 * kv_capacity_tokens(p)  # more than two replicas' worth
    # 4 KV heads over 8 GPUs: each GPU still holds one head (replicated)
    gqa = ModelShape(name="q", params_b=8.3, layers=28, kv_heads=4, head_dim=128)
    assert kv_bytes_per_token(gqa, d.with_tp(8)) == 2 * 28 * 1 * 128 * 2


def test_kv_capacity_with_a_weights_gb_override() -> None:
    awq = ModelShape(name="awq", params_b=8.3, layers=28, kv_heads=4, head_dim=128,
                     weight_dtype=Dtype.INT4)
    p = CloudProfile(name="l4", gpu=GpuConfig(name="L4", memory_gb=24, mem_bandwidth_gb_s=300,
                                              compute_tflops=121),
                     model=awq, server=ServerConfig(activation_reserve_gb=0.0))
    per_token = 2 * 28 * 4 * 128 * 2
    # 8.3 B × 0.5 byte = 4.15 GB by the dtype; the real checkpoint (16-bit tower, head) is 6.9 GB
    assert kv_capacity_tokens(p) == int((21.6e9 - 4.15e9) // per_token)
    d = Deployment(weights_gb=6.9)
    assert kv_capacity_tokens(p, d) == int((21.6e9 - 6.9e9) // per_token)
    # and the roofline reads what is really there
    assert Roofline(p, d).weights_b == 6.9e9


def test_fp8_kv_halves_kv_bytes_and_doubles_kv_tokens() -> None:
    fp8 = ModelShape(name="q", params_b=6.74, layers=32, kv_heads=32, head_dim=128,
                     kv_dtype=Dtype.FP8)
    assert kv_bytes_per_token(fp8) == kv_bytes_per_token(LLAMA2_7B) / 2
    base = CloudProfile(name="a", gpu=A100, model=LLAMA2_7B)
    assert kv_capacity_tokens(CloudProfile(name="b", gpu=A100, model=fp8)) == pytest.approx(
        2 * kv_capacity_tokens(base), abs=2)


def test_tp_needs_an_interconnect_and_a_hidden_size() -> None:
    with pytest.raises(ValueError, match="interconnect"):
        Deployment(tp_size=2, hidden_size=4096)
    with pytest.raises(ValueError, match="hidden_size"):
        Deployment(tp_size=2, interconnect=NVLINK)


@pytest.mark.parametrize("name", ["l40s-x4-pcie-qwen2-vl-7b", "a100-x8-nvlink-qwen2-vl-7b"])
def test_shipped_box_profiles_load_with_sources(name: str) -> None:
    box = load_box_profile(name)
    assert box.deployment.gpus in (4, 8) and box.deployment.interconnect is not None
    assert box.profile.sources and kv_capacity_tokens(box.profile, box.deployment) > 0
