"""KV-cache capacity, maximum concurrency and roofline step times of cloud servers."""

from __future__ import annotations

import pytest

from sim.core.cloud import (
    Roofline,
    kv_bytes_per_token,
    kv_capacity_tokens,
    max_concurrency,
    weight_bytes,
)
from sim.scenario.config import load_cloud_profile
from sim.scenario.profiles import CloudProfile, Dtype, GpuConfig, ModelShape, ServerConfig

# Llama-2-7B: 32 layers, 32 KV heads (no GQA), head_dim 128, 6.74 B parameters
LLAMA2_7B = ModelShape(name="llama-2-7b", params_b=6.74, layers=32, kv_heads=32, head_dim=128)
A100_80G = GpuConfig(name="A100 80GB", memory_gb=80, mem_bandwidth_gb_s=2039, compute_tflops=312)


def test_kv_bytes_per_token_counts_keys_and_values_of_every_layer_and_kv_head() -> None:
    assert kv_bytes_per_token(LLAMA2_7B) == 2 * 32 * 32 * 128 * 2 == 524_288  # 0.5 MiB


def test_kv_capacity_is_memory_share_minus_weights_over_bytes_per_token() -> None:
    p = CloudProfile(name="a100", gpu=A100_80G, model=LLAMA2_7B,
                     server=ServerConfig(gpu_memory_utilization=0.9, activation_reserve_gb=0.0))
    free_bytes = 80e9 * 0.9 - 6.74e9 * 2  # 58.52 GB for KV
    assert kv_capacity_tokens(p) == int(free_bytes // 524_288) == 111_618
    # 2048-token sequences: 54 at once; short ones hit max_batch first
    assert max_concurrency(p, 2048) == 54
    assert max_concurrency(p, 100) == p.server.max_batch == 256


def test_4_bit_weights_leave_more_room_for_kv() -> None:
    bf16 = CloudProfile(name="a", gpu=A100_80G, model=LLAMA2_7B)
    int4 = CloudProfile(name="b", gpu=A100_80G,
                        model=ModelShape(name="q", params_b=6.74, layers=32, kv_heads=32,
                                         head_dim=128, weight_dtype=Dtype.INT4))
    assert weight_bytes(int4.model) == weight_bytes(bf16.model) / 4
    extra_tokens = (weight_bytes(bf16.model) - weight_bytes(int4.model)) / 524_288
    assert kv_capacity_tokens(int4) - kv_capacity_tokens(bf16) == pytest.approx(extra_tokens, abs=1)


def test_shipped_h100_profile_capacity() -> None:
    p = load_cloud_profile("h100-qwen2-vl-7b")  # 28 layers, 4 KV heads (GQA), head_dim 128
    per_token = 2 * 28 * 4 * 128 * 2
    assert kv_capacity_tokens(p) == int((80e9 * 0.9 - 8.3e9 * 2) // per_token)


def test_roofline_decode_is_memory_bound_for_small_batches_and_compute_bound_for_large() -> None:
    p = load_cloud_profile("h100-qwen2-vl-7b")
    r = Roofline(p)
    weights_s = 8.3e9 * 2 / (3350e9 * 0.8)
    assert r.step_s(1, 0) == pytest.approx(weights_s + 0.003)
    assert r.step_s(64, 0) == r.step_s(1, 0)  # reading the weights dominates
    flops_s = 989e12 * 0.5
    assert r.step_s(1024, 0) == pytest.approx(2 * 8.3e9 * 1024 / flops_s + 0.003)
    assert r.step_s(1, 100_000) > r.step_s(1, 0)  # a long context adds KV reads
