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
    HybridLayout,
    KVCacheTooSmall,
    KVGeometry,
    MiB,
    NodeMemory,
    cpu_ssm_dtype,
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


# Hybrid models: Qwen3.5's Gated DeltaNet layers keep a fixed state per request, no KV per token.

def _tiny_qwen3_5() -> Path:
    from mm_preproc.spec import Family
    from models.tiny_qwen_vl import build_family

    return build_family(Family.QWEN3_5)


def test_only_the_full_attention_layers_of_the_tiny_qwen3_5_cost_kv_per_token() -> None:
    model = _tiny_qwen3_5()
    text = json.loads((model / "config.json").read_text())["text_config"]
    assert text["layer_types"] == ["linear_attention", "full_attention"]
    g = KVGeometry.from_model_dir(model, ssm_dtype="float32")
    assert (g.num_layers, g.num_kv_heads, g.head_dim) == (
        1, text["num_key_value_heads"], text["head_dim"])
    assert g.bytes_per_token == 2 * 1 * 2 * 32 * 2 == 256  # half of counting both layers
    assert g.recurrent is not None and g.recurrent.num_layers == 1
    # conv window: (q, k channels 2·k_heads·k_dim + v channels v_heads·v_dim) × (kernel − 1), bf16
    k_heads, v_heads = text["linear_num_key_heads"], text["linear_num_value_heads"]
    k_dim, v_dim = text["linear_key_head_dim"], text["linear_value_head_dim"]
    conv = (2 * k_heads * k_dim + v_heads * v_dim) * (text["linear_conv_kernel_dim"] - 1) * 2
    ssm = v_heads * v_dim * k_dim * 4  # float32, as vLLM's CPU build stores it with AVX-512 BF16
    assert (g.recurrent.conv_bytes, g.recurrent.ssm_bytes) == (conv, ssm) == (6144, 262144)
    assert KVGeometry.from_model_dir(model).recurrent.ssm_bytes == ssm // 2  # type: ignore[union-attr]


def test_the_tiny_qwen3_5_plan_follows_vllms_hybrid_pages() -> None:
    """By hand: vLLM grows the 128-token block until one layer's page (256 B per token) holds
    the 268288 B state: 128·⌈268288 / (128·256)⌉ = 1152 tokens, 294912 B; a 4096-token request
    takes ⌈4096/1152⌉ = 4 attention blocks and 2 state blocks (prefix caching: align mode);
    16 requests and the null block make 97 blocks. vLLM reported, for this size, 'Maximum
    concurrency for 4,096 tokens per request: 16.17x' (test_serve_families)."""
    g = KVGeometry.from_model_dir(_tiny_qwen3_5(), ssm_dtype="float32")
    layout = HybridLayout.of(g)
    assert (layout.block_tokens, layout.block_bytes, layout.blocks_per_request(4096)) == (
        1152, 1152 * 256, 6)
    plan = plan_kv_cache(g, max_num_seqs=16, max_model_len=4096, node=node(11))
    assert plan.bytes_ == plan.budget_bytes == (16 * 6 + 1) * 294912  # 27.3 MiB, not 32 MiB
    assert plan.tokens == int(97 / 6 * 4096)  # vLLM's "KV cache size: N tokens"
    assert plan.floor_bytes == 7 * 294912
    assert "1 linear-attention layers × 268288 B of state per request" in plan.explanation
    without_prefix_cache = plan_kv_cache(g, max_num_seqs=16, max_model_len=4096, node=node(11),
                                         prefix_caching=False)
    assert without_prefix_cache.bytes_ == (16 * 5 + 1) * 294912  # one state block per request


def test_a_full_size_qwen3_5_config_derives_its_layer_kinds_from_the_interval(
    tmp_path: Path
) -> None:
    """transformers 5.19's Qwen3_5TextConfig defaults (32 layers, 4 KV heads of 256, linear
    heads 16 k / 32 v of 128) with ``full_attention_interval`` 4 instead of ``layer_types``:
    layers 3, 7, … 31 are full attention. vLLM groups the 8 full and 24 linear layers in groups
    of 8 (one attention group, three state groups)."""
    text = {"num_hidden_layers": 32, "num_attention_heads": 16, "num_key_value_heads": 4,
            "head_dim": 256, "hidden_size": 4096, "full_attention_interval": 4,
            "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "qwen3_5", "text_config": text}))
    g = KVGeometry.from_model_dir(tmp_path, ssm_dtype="float32")
    assert g.num_layers == 8 and g.recurrent is not None and g.recurrent.num_layers == 24
    assert g.bytes_per_token == 2 * 8 * 4 * 256 * 2
    state = (2 * 16 * 128 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 4
    assert g.recurrent.bytes_per_layer == state == 2146304
    layout = HybridLayout.of(g)
    tokens = 128 * -(-state // (128 * 2 * 4 * 256 * 2))  # 640
    assert (layout.block_tokens, layout.group_size, layout.attention_groups,
            layout.state_groups) == (tokens, 8, 1, 3)
    assert layout.block_bytes == 8 * tokens * 4096
    assert layout.blocks_per_request(32768) == -(-32768 // tokens) + 3 * 2


def test_the_state_dtype_follows_vllms_cpu_platform() -> None:
    assert cpu_ssm_dtype("auto", avx512_bf16=True) == "float32"
    assert cpu_ssm_dtype("bfloat16", avx512_bf16=True) == "bfloat16"
    assert cpu_ssm_dtype("auto", avx512_bf16=False) == "auto"


def test_a_folder_without_weights_counts_the_random_weights_vllm_will_allocate(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    from edgeserve.engine_memory import weights_bytes
    from models.random_shapes import build

    model = build("qwen2-vl-2b", tmp_path / "q2b")
    assert weights_bytes(model) == pytest.approx(2 * 2.21e9, rel=0.01)  # bf16
    on_disk = sum(p.stat().st_size for p in tiny_model_dir.glob("*.safetensors"))
    assert weights_bytes(tiny_model_dir) == on_disk
    assert weights_bytes(tmp_path) == 0  # not a model folder
