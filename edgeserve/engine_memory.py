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

**Hybrid models** (Qwen3.5: Gated DeltaNet linear-attention layers between full-attention ones,
``layer_types`` in ``config.json``) hold no KV for a linear-attention layer: it keeps a fixed
recurrent state per request (a short convolution window and a heads × v × k matrix), whatever
the request's length. vLLM 0.32 puts both kinds in one pool of equal pages, and the sizing
follows its layout (:class:`HybridLayout`) so that ``max_num_seqs`` requests of
``max_model_len`` fit exactly: an attention block grows to the smallest multiple of the block
size whose page holds one layer's state (1152 tokens for the tiny Qwen3.5); layers are grouped
as vLLM groups them; a request takes ``⌈max_model_len / block⌉`` blocks per attention group and
one state block per linear group — two with prefix caching (vLLM's ``mamba_cache_mode`` align).

The multimodal processor cache (an LRU of processed images in vLLM's EngineCore, 4 GiB by
default) is capped the same way: room for ``4 × max_num_seqs`` images of the model's largest
size, at most 1/16 of the machine's memory and never above vLLM's own default.

The functions here are pure: the node's memory and the model's shape are inputs, so the sizing
is tested for any machine (:func:`node_memory` reads the real one, with vLLM's own functions so
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
class RecurrentState:
    """What one request's state costs in a model's linear-attention (Gated DeltaNet) layers.

    Per layer, as vLLM's ``MambaStateShapeCalculator.gated_delta_net_state_shape``: a conv
    window of ``kernel − 1`` positions over the q, k and v channels (``2·k_heads·k_dim +
    v_heads·v_dim``) in the model's dtype, and the recurrent matrix ``v_heads × v_dim × k_dim``
    in the SSM state dtype.
    """

    num_layers: int
    conv_bytes: int  # per layer
    ssm_bytes: int  # per layer
    ssm_dtype: str

    @property
    def bytes_per_layer(self) -> int:
        return self.conv_bytes + self.ssm_bytes


@dataclass(slots=True, frozen=True)
class KVGeometry:
    """What one token costs in the KV cache (and, for a hybrid model, one request's state)."""

    num_layers: int  # layers with a KV cache (full attention)
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    dtype: str = "bfloat16"
    recurrent: RecurrentState | None = None  # linear-attention layers, if any

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def bytes_per_token_per_layer(self) -> int:
        return 2 * self.num_kv_heads * self.head_dim * self.dtype_bytes

    def describe(self) -> str:
        kv = (f"{self.bytes_per_token} B/token = K,V × {self.num_layers} "
              f"{'full-attention ' if self.recurrent else ''}layers × "
              f"{self.num_kv_heads} KV heads × {self.head_dim} head dim × "
              f"{self.dtype_bytes} B ({self.dtype})")
        if self.recurrent is None:
            return kv
        r = self.recurrent
        return (f"{kv}, and {r.num_layers} linear-attention layers × {r.bytes_per_layer} B of "
                f"state per request (conv {r.conv_bytes} B + recurrent {r.ssm_bytes} B "
                f"{r.ssm_dtype})")

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, dtype: str = "auto",
                       kv_cache_dtype: str = "auto", ssm_dtype: str = "auto") -> KVGeometry:
        """Read the language model's shape from ``config.json`` (``text_config`` when nested).

        ``dtype``/``kv_cache_dtype`` as given to vLLM; ``auto`` means the checkpoint's dtype.
        ``ssm_dtype``: the linear-attention layers' recurrent state (vLLM's
        ``mamba_ssm_cache_dtype``); ``auto``: the config's ``mamba_ssm_dtype``, else the model's
        dtype. Layer kinds come from ``layer_types`` or, as transformers 5.19's Qwen3.5 and
        Qwen3-Next configs derive it when that is absent, from ``full_attention_interval``
        (default 4: every 4th layer full attention) for a config with linear-attention fields.
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
        model_dtype = dtype if dtype != "auto" else str(
            get("torch_dtype") or get("dtype") or "bfloat16")
        model_dtype = model_dtype.removeprefix("torch.")
        name = kv_cache_dtype if kv_cache_dtype != "auto" else model_dtype
        name = name.removeprefix("torch.")
        types = _layer_types(get, layers, path)
        linear = types.count(LINEAR_ATTENTION)
        recurrent = None
        if linear:
            ssm = ssm_dtype if ssm_dtype != "auto" else str(get("mamba_ssm_dtype") or model_dtype)
            ssm = ssm.removeprefix("torch.")
            try:
                k_heads, v_heads = int(get("linear_num_key_heads")), int(get("linear_num_value_heads"))
                k_dim, v_dim = int(get("linear_key_head_dim")), int(get("linear_value_head_dim"))
                kernel = int(get("linear_conv_kernel_dim"))
            except (TypeError, ValueError):
                raise ValueError(f"{path} has linear-attention layers but not their "
                                 "linear_num_key_heads, linear_num_value_heads, "
                                 "linear_key_head_dim, linear_value_head_dim and "
                                 "linear_conv_kernel_dim") from None
            conv = (2 * k_heads * k_dim + v_heads * v_dim) * (kernel - 1)
            recurrent = RecurrentState(linear, conv * DTYPE_BYTES.get(model_dtype, 2),
                                       v_heads * v_dim * k_dim * DTYPE_BYTES.get(ssm, 4), ssm)
        return cls(layers - linear, kv_heads, head_dim, DTYPE_BYTES.get(name, 2), name, recurrent)


LINEAR_ATTENTION = "linear_attention"


def _layer_types(get: Any, layers: int, path: Path) -> list[str]:
    """Each layer's kind, as transformers 5.19 reads it (``Qwen3_5TextConfig.__post_init__``)."""
    types = get("layer_types")
    if types is None and get("linear_num_value_heads") is not None:
        interval = int(get("full_attention_interval") or 4)
        types = [LINEAR_ATTENTION if (i + 1) % interval else "full_attention"
                 for i in range(layers)]
    if types is None:
        return ["full_attention"] * layers
    if len(types) != layers:
        raise ValueError(f"{path}: layer_types has {len(types)} entries for "
                         f"{layers} layers")
    return [str(t) for t in types]


@dataclass(slots=True, frozen=True)
class HybridLayout:
    """vLLM 0.32's pages for a hybrid model: one pool of equal blocks shared by every group.

    ``platforms.interface._align_hybrid_block_size`` grows the attention block to the smallest
    multiple of the block size (128 on CPU) whose page (one layer's K,V for ``block_tokens``
    tokens) holds one layer's state, and pads the state page to it.
    ``kv_cache_utils._get_kv_cache_groups_uniform_page_size`` groups the layers by kind into
    groups of ``group_size`` (the fewer kind's count, or the larger one's when that is under
    1.5 times it), padding the last; a block is one page per layer of a group.
    ``MambaSpec.max_memory_usage_bytes``: a request holds one state block per linear group,
    two in ``align`` mode (prefix caching on).
    """

    block_tokens: int
    group_size: int
    attention_groups: int
    state_groups: int
    state_blocks_per_group: int
    block_bytes: int
    state_padding: float  # padded state page / state page − 1

    @classmethod
    def of(cls, g: KVGeometry, *, block_size: int = CPU_BLOCK_SIZE_TOKENS,
           prefix_caching: bool = True) -> HybridLayout:
        if g.recurrent is None or g.num_layers == 0:
            raise ValueError("a hybrid layout needs both full- and linear-attention layers")
        per_token = g.bytes_per_token_per_layer
        state = g.recurrent.bytes_per_layer
        tokens = block_size * max(1, math.ceil(state / (block_size * per_token)))
        counts = (g.num_layers, g.recurrent.num_layers)
        group = min(counts) if max(counts) >= 1.5 * min(counts) else max(counts)
        page = tokens * per_token
        return cls(tokens, group, math.ceil(counts[0] / group), math.ceil(counts[1] / group),
                   2 if prefix_caching else 1, group * page, page / state - 1)

    def blocks_per_request(self, max_model_len: int) -> int:
        return (self.attention_groups * math.ceil(max_model_len / self.block_tokens)
                + self.state_groups * self.state_blocks_per_group)

    def describe(self, max_model_len: int) -> str:
        return (f"blocks of {self.block_tokens} tokens × {self.group_size} layers = "
                f"{_fmt(self.block_bytes)} (state page padded {100 * self.state_padding:.1f} %); "
                f"a request of {max_model_len} tokens = {self.attention_groups} attention "
                f"group(s) × {math.ceil(max_model_len / self.block_tokens)} blocks + "
                f"{self.state_groups} state group(s) × {self.state_blocks_per_group} blocks "
                f"= {self.blocks_per_request(max_model_len)} blocks")


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
                  block_size: int = CPU_BLOCK_SIZE_TOKENS, prefix_caching: bool = True) -> KVPlan:
    """The KV-cache size for vLLM's CPU build (see the module docstring for the rule)."""
    if geometry.recurrent is not None and geometry.num_layers:
        return _plan_hybrid(geometry, HybridLayout.of(geometry, block_size=block_size,
                                                      prefix_caching=prefix_caching),
                            max_num_seqs=max_num_seqs, max_model_len=max_model_len, node=node,
                            weights_bytes=weights_bytes)
    per_token = geometry.bytes_per_token
    block_bytes = block_size * per_token
    budget = max_num_seqs * max_model_len * per_token
    floor = (math.ceil(max_model_len / block_size) + 1) * block_bytes
    cap = _cap(geometry, max_model_len, floor, node, weights_bytes)
    size = max(floor, min(budget, cap))
    size -= size % block_bytes  # whole blocks; floor and cap are at least one request's worth
    tokens = size // per_token
    why = "budget" if size >= budget - block_bytes else "capped by the node"
    explanation = (
        f"KV cache {_fmt(size)} ({tokens} tokens, {why}): budget {max_num_seqs} seqs × "
        f"{max_model_len} tokens × {geometry.describe()} = {_fmt(budget)}; "
        f"{_cap_text(node, weights_bytes, cap)}; floor one request = {_fmt(floor)}"
    )
    return KVPlan(size, budget, floor, cap, tokens, explanation)


def _plan_hybrid(geometry: KVGeometry, layout: HybridLayout, *, max_num_seqs: int,
                 max_model_len: int, node: NodeMemory, weights_bytes: int) -> KVPlan:
    """Whole blocks of :class:`HybridLayout`: ``max_num_seqs`` requests plus vLLM's null block."""
    per_request = layout.blocks_per_request(max_model_len)
    budget = (max_num_seqs * per_request + 1) * layout.block_bytes
    floor = (per_request + 1) * layout.block_bytes
    cap = _cap(geometry, max_model_len, floor, node, weights_bytes)
    size = max(floor, min(budget, cap))
    size -= size % layout.block_bytes
    blocks = size // layout.block_bytes
    # what vLLM prints as "KV cache size: N tokens" (its concurrency × max_model_len)
    tokens = int(blocks / per_request * max_model_len)
    why = "budget" if size >= budget else "capped by the node"
    explanation = (
        f"KV cache {_fmt(size)} ({blocks} blocks: {blocks // per_request} requests of "
        f"{max_model_len} tokens, {why}): {geometry.describe()}; vLLM's hybrid pages: "
        f"{layout.describe(max_model_len)}; budget {max_num_seqs} seqs × {per_request} + 1 "
        f"null block = {_fmt(budget)}; {_cap_text(node, weights_bytes, cap)}; floor one "
        f"request = {_fmt(floor)}"
    )
    return KVPlan(size, budget, floor, cap, tokens, explanation)


def _cap(geometry: KVGeometry, max_model_len: int, floor: int, node: NodeMemory,
         weights_bytes: int) -> int:
    """Half of the node's available memory after the weights; refused below ``floor``."""
    cap = int(KV_CAP_FRACTION * max(0, node.available_bytes - weights_bytes))
    if cap < floor:
        raise KVCacheTooSmall(
            f"the KV cache for one request of --max-model-len {max_model_len} needs "
            f"{_fmt(floor)} ({geometry.describe()}), but NUMA node {node.node} has "
            f"{_fmt(node.available_bytes)} available of {_fmt(node.total_bytes)}"
            + (f" and the weights take {_fmt(weights_bytes)}" if weights_bytes else "")
            + f"; edgeserve uses at most half of what remains ({_fmt(cap)}). Lower "
            "--max-model-len, free memory on that node, or set --kv-cache-memory-bytes."
        )
    return cap


def _cap_text(node: NodeMemory, weights_bytes: int, cap: int) -> str:
    return (f"cap {KV_CAP_FRACTION:g} × (node {node.node} available "
            f"{_fmt(node.available_bytes)} of {_fmt(node.total_bytes)} − weights "
            f"{_fmt(weights_bytes)}) = {_fmt(cap)}")


def cpu_ssm_dtype(requested: str, *, avx512_bf16: bool) -> str:
    """The recurrent-state dtype vLLM 0.32's CPU platform will use (``platforms/cpu.py``).

    On a CPU with AVX-512 BF16 (its accelerated GDN kernels) it stores the state in float32
    unless float16 or bfloat16 was asked for explicitly (``mamba_ssm_cache_dtype``); elsewhere
    it keeps what was asked (``auto``: the config's ``mamba_ssm_dtype`` or the model's dtype).
    """
    if requested in ("float16", "bfloat16") or not avx512_bf16:
        return requested
    return "float32"


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
    """The size of the checkpoint's weight files (what loading the model will take); for a
    folder without weight files (served with random weights, ``load_format=dummy``) what vLLM
    will allocate for them: the architecture's parameters × the config's dtype size."""
    d = Path(model_dir)
    on_disk = sum(p.stat().st_size for pattern in ("*.safetensors", "*.bin", "*.pt")
                  for p in d.glob(pattern))
    return on_disk or _random_weights_bytes(d)


def _random_weights_bytes(model_dir: Path) -> int:
    """Parameters counted on the meta device (nothing allocated) × bytes per parameter."""
    if not (model_dir / "config.json").exists():
        return 0
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(str(model_dir))
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    size = 4 if str(dtype).endswith("float32") else 2  # bf16/fp16, what "auto" keeps
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return size * sum(p.numel() for p in model.parameters())


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
