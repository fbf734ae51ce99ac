"""How much memory the engine's caches get, derived from the model and the machine.

vLLM's CPU build sizes its KV cache as ``gpu_memory_utilization × MemTotal of the NUMA node`` the
engine's first core sits on, minus the engine worker's own RSS. On a machine whose node is small
— a freshly started cloud machine whose node 0 holds 11 GiB of 23.5 GiB, or an edge board — that
number goes negative and the engine refuses to start; on a large one it reserves gigabytes a tiny
model never touches. edgeserve instead asks for what the engine can actually hold:

    budget  = max_num_seqs × max_model_len tokens × KV bytes per token
    floor   = one request of max_model_len (rounded up to whole KV blocks) + one block
    cap     = half of what the node has available, after the model's weights
    size    = min(budget, cap), refused (:class:`KVCacheTooSmall`) when below the floor

KV bytes per token = 2 (K and V) × layers × KV heads × head dim × bytes of the KV dtype. The
tiny default model needs 512 B per token, so its full budget (16 × 4096 tokens) is 32 MiB.

The multimodal processor cache (an LRU of processed images in vLLM's EngineCore, 4 GiB by
default) is capped the same way: room for ``4 × max_num_seqs`` images of the model's largest
size, at most 1/16 of the machine's memory and never above vLLM's own default.

The functions here are pure: the node's memory and the model's shape are inputs, so the sizing
is tested for any machine (:func:`node_memory` reads the real one, with vLLM's own helpers so
that it is the node vLLM will check).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GiB = 1 << 30
MiB = 1 << 20

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2,
               "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1}
CPU_BLOCK_SIZE_TOKENS = 128  # vLLM's CPU attention backend's default block size
KV_CAP_FRACTION = 0.5  # of the node's available memory after the weights
MM_CACHE_ITEMS_PER_SEQ = 4
MM_CACHE_MACHINE_FRACTION = 1 / 16
VLLM_MM_CACHE_DEFAULT_GB = 4.0


class KVCacheTooSmall(ValueError):
    """Not even one request of ``max_model_len`` fits in the memory the node has."""


@dataclass(slots=True, frozen=True)
class KVGeometry:
    """What one token costs in the KV cache."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    dtype: str = "bfloat16"

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    def describe(self) -> str:
        return (f"{self.bytes_per_token} B/token = K,V × {self.num_layers} layers × "
                f"{self.num_kv_heads} KV heads × {self.head_dim} head dim × "
                f"{self.dtype_bytes} B ({self.dtype})")

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, dtype: str = "auto",
                       kv_cache_dtype: str = "auto") -> KVGeometry:
        """Read the language model's shape from ``config.json`` (``text_config`` when nested).

        ``dtype``/``kv_cache_dtype`` as given to vLLM; ``auto`` means the checkpoint's dtype.
        """
        path = Path(model_dir) / "config.json"
        try:
            cfg = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read the model's config {path}: {e}") from None
        text = cfg.get("text_config") or {}

        def get(key: str) -> Any:
            return text.get(key, cfg.get(key))

        try:
            layers = int(get("num_hidden_layers"))
            heads = int(get("num_attention_heads"))
            kv_heads = int(get("num_key_value_heads") or heads)
            head_dim = int(get("head_dim") or int(get("hidden_size")) // heads)
        except (TypeError, ValueError):
            raise ValueError(f"{path} does not give the language model's layers, heads and "
                             "hidden size") from None
        name = kv_cache_dtype if kv_cache_dtype != "auto" else dtype
        if name == "auto":
            name = str(get("torch_dtype") or get("dtype") or "bfloat16")
        name = name.removeprefix("torch.")
        return cls(layers, kv_heads, head_dim, DTYPE_BYTES.get(name, 2), name)


@dataclass(slots=True, frozen=True)
class NodeMemory:
    """The memory of the NUMA node the engine allocates on (bytes)."""

    node: int
    total_bytes: int
    available_bytes: int


@dataclass(slots=True, frozen=True)
class KVPlan:
    """The chosen KV-cache size and how it was derived (printed at start-up)."""

    bytes_: int
    budget_bytes: int
    floor_bytes: int
    cap_bytes: int
    tokens: int
    explanation: str


def plan_kv_cache(geometry: KVGeometry, *, max_num_seqs: int, max_model_len: int,
                  node: NodeMemory, weights_bytes: int = 0,
                  block_size: int = CPU_BLOCK_SIZE_TOKENS) -> KVPlan:
    """The KV-cache size for vLLM's CPU build (see the module docstring for the rule)."""
    per_token = geometry.bytes_per_token
    block_bytes = block_size * per_token
    budget = max_num_seqs * max_model_len * per_token
    floor = (math.ceil(max_model_len / block_size) + 1) * block_bytes
    free_after_weights = max(0, node.available_bytes - weights_bytes)
    cap = int(KV_CAP_FRACTION * free_after_weights)
    if cap < floor:
        raise KVCacheTooSmall(
            f"the KV cache for one request of --max-model-len {max_model_len} needs "
            f"{_fmt(floor)} ({geometry.describe()}), but NUMA node {node.node} has "
            f"{_fmt(node.available_bytes)} available of {_fmt(node.total_bytes)}"
            + (f" and the weights take {_fmt(weights_bytes)}" if weights_bytes else "")
            + f"; edgeserve uses at most half of what remains ({_fmt(cap)}). Lower "
            "--max-model-len, free memory on that node, or set --kv-cache-memory-bytes."
        )
    size = max(floor, min(budget, cap))
    size -= size % block_bytes  # whole blocks; floor and cap are at least one request's worth
    tokens = size // per_token
    why = "budget" if size >= budget - block_bytes else "capped by the node"
    explanation = (
        f"KV cache {_fmt(size)} ({tokens} tokens, {why}): budget {max_num_seqs} seqs × "
        f"{max_model_len} tokens × {geometry.describe()} = {_fmt(budget)}; cap "
        f"{KV_CAP_FRACTION:g} × (node {node.node} available {_fmt(node.available_bytes)} of "
        f"{_fmt(node.total_bytes)} − weights {_fmt(weights_bytes)}) = {_fmt(cap)}; floor one "
        f"request = {_fmt(floor)}"
    )
    return KVPlan(size, budget, floor, cap, tokens, explanation)


def mm_cache_gb(*, machine_total_bytes: int, max_pixels: int, max_num_seqs: int,
                temporal_patch_size: int = 2) -> float:
    """A cap for vLLM's multimodal processor cache (``mm_processor_cache_gb``).

    One processed image of ``max_pixels`` is float32 ``pixel_values``: 3 channels × temporal
    patch × 4 bytes per pixel (24 MB for Qwen2-VL at 1280 tokens).
    """
    item = max_pixels * 3 * temporal_patch_size * 4
    want = MM_CACHE_ITEMS_PER_SEQ * max_num_seqs * item
    cap = min(want, MM_CACHE_MACHINE_FRACTION * machine_total_bytes, VLLM_MM_CACHE_DEFAULT_GB * GiB)
    return round(cap / GiB, 3)


def weights_bytes(model_dir: str | Path) -> int:
    """The size of the checkpoint's weight files (what loading the model will take)."""
    d = Path(model_dir)
    return sum(p.stat().st_size for pattern in ("*.safetensors", "*.bin", "*.pt")
               for p in d.glob(pattern))


def node_memory() -> NodeMemory:
    """The memory of the NUMA node vLLM's CPU worker will allocate on: the node of this
    process's first allowed core, read as vLLM reads it (free + file pages + reclaimable)."""
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info

    cpus = get_allowed_cpu_list()
    node = cpus[0].numa_node if cpus else 0
    info = get_memory_node_info(node)
    return NodeMemory(node, int(info.total_memory), int(info.available_memory))


def _fmt(n: float) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / MiB:.1f} MiB"
