"""The engine's cache sizes follow from the model and the machine, not from a fraction that goes
negative on a small NUMA node.

The node's memory is an input, so each case stands in for a machine: a 4 GiB edge board, the
11 GiB node 0 of a freshly started cloud machine, a 24 GiB workstation, a 128 GiB server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeserve.engine_memory import (
    GiB,
    KVCacheTooSmall,
    KVGeometry,
    MiB,
    NodeMemory,
    mm_cache_gb,
    plan_kv_cache,
)

TINY = KVGeometry(num_layers=2, num_kv_heads=2, head_dim=32, dtype_bytes=2)
# Qwen2-VL-7B's language model: 28 layers, 4 KV heads of 128, bf16
QWEN2_VL_7B = KVGeometry(num_layers=28, num_kv_heads=4, head_dim=128, dtype_bytes=2)


def node(total_gib: float, available_gib: float | None = None) -> NodeMemory:
    avail = total_gib * 0.9 if available_gib is None else available_gib
    return NodeMemory(0, int(total_gib * GiB), int(avail * GiB))


def test_bytes_per_token_is_k_and_v_over_every_layer_and_kv_head() -> None:
    assert TINY.bytes_per_token == 2 * 2 * 2 * 32 * 2 == 512
    assert QWEN2_VL_7B.bytes_per_token == 57344


@pytest.mark.parametrize("total_gib", [4, 11, 24, 128])
def test_the_tiny_model_gets_its_full_budget_on_every_node(total_gib: float) -> None:
    plan = plan_kv_cache(TINY, max_num_seqs=16, max_model_len=4096, node=node(total_gib))
    assert plan.bytes_ == 16 * 4096 * 512 == 32 * MiB
    assert plan.tokens == 16 * 4096
    assert "budget" in plan.explanation and "512 B/token" in plan.explanation


@pytest.mark.parametrize(("total_gib", "expect_capped"), [(11, True), (24, True), (128, False)])
def test_a_large_model_is_capped_by_half_the_nodes_memory_after_weights(
    total_gib: float, expect_capped: bool
) -> None:
    weights = 15 * GiB if total_gib > 16 else 2 * GiB
    n = node(total_gib)
    plan = plan_kv_cache(QWEN2_VL_7B, max_num_seqs=16, max_model_len=32768, node=n,
                         weights_bytes=weights)
    budget = 16 * 32768 * QWEN2_VL_7B.bytes_per_token  # 28 GiB
    cap = 0.5 * (n.available_bytes - weights)
    assert plan.budget_bytes == budget
    if expect_capped:
        assert cap - 128 * QWEN2_VL_7B.bytes_per_token <= plan.bytes_ <= cap
        assert "capped by the node" in plan.explanation
    else:
        assert plan.bytes_ == budget
    assert plan.bytes_ >= plan.floor_bytes
    assert plan.bytes_ % (128 * QWEN2_VL_7B.bytes_per_token) == 0  # whole KV blocks


def test_a_node_too_small_for_one_request_is_a_clear_error_naming_the_flags() -> None:
    with pytest.raises(KVCacheTooSmall) as e:
        plan_kv_cache(QWEN2_VL_7B, max_num_seqs=4, max_model_len=131072, node=node(4),
                      weights_bytes=3 * GiB)
    msg = str(e.value)
    assert "--max-model-len 131072" in msg and "--kv-cache-memory-bytes" in msg
    assert "NUMA node 0" in msg and "\n" not in msg


def test_the_floor_holds_one_request_when_the_node_is_just_big_enough() -> None:
    one_request = (32768 // 128 + 1) * 128 * QWEN2_VL_7B.bytes_per_token
    n = NodeMemory(0, 8 * GiB, 2 * one_request + GiB)
    plan = plan_kv_cache(QWEN2_VL_7B, max_num_seqs=64, max_model_len=32768, node=n,
                         weights_bytes=GiB)
    assert plan.floor_bytes == one_request
    assert one_request <= plan.bytes_ <= 0.5 * (n.available_bytes - GiB)


def test_geometry_is_read_from_the_tiny_models_config(tiny_model_dir: Path) -> None:
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    g = KVGeometry.from_model_dir(tiny_model_dir)
    heads = text["num_attention_heads"]
    assert (g.num_layers, g.num_kv_heads, g.head_dim) == (
        text["num_hidden_layers"], text["num_key_value_heads"], text["hidden_size"] // heads)
    assert KVGeometry.from_model_dir(tiny_model_dir, kv_cache_dtype="fp8").dtype_bytes == 1
    assert KVGeometry.from_model_dir(tiny_model_dir, dtype="float32").dtype_bytes == 4


def test_a_folder_without_a_model_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"config\.json"):
        KVGeometry.from_model_dir(tmp_path)


@pytest.mark.parametrize(("total_gib", "expected_gb"), [
    (4, 0.25),         # 1/16 of a 4 GiB board
    (24, 1.5),         # 1/16 of 24 GiB
    (128, 4.0),        # vLLM's own default is the ceiling
])
def test_the_multimodal_cache_is_capped_by_the_machine(total_gib: int, expected_gb: float) -> None:
    gb = mm_cache_gb(machine_total_bytes=total_gib * GiB, max_pixels=1280 * 28 * 28,
                     max_num_seqs=64)
    assert gb == expected_gb


def test_the_multimodal_cache_holds_four_images_per_sequence_when_memory_allows() -> None:
    px = 1280 * 28 * 28
    gb = mm_cache_gb(machine_total_bytes=128 * GiB, max_pixels=px, max_num_seqs=4)
    assert gb == round(16 * px * 24 / GiB, 3)  # 16 images of 24 MB float32 pixel_values
