"""The KV cache a trace header describes, read back: a step's block usage as attention tokens.

``edgeserve serve`` writes the engine's cache into the trace header (``meta.engine``, from
:meth:`edgeserve.engine.Engine.describe`): ``kv_cache_tokens`` is vLLM's own capacity (its
maximum concurrency at ``max_model_len`` times that length), ``kv_cache_blocks`` the pool of
``block_size``-token blocks, and each :class:`~edgeserve.records.EngineStep` carries vLLM's
``kv_cache_usage``, the fraction of that pool (less its null block) that requests hold.

For a model with a KV cache in every layer a block is ``block_size`` tokens of context, so a
step's context is ``kv_cache_usage × kv_cache_tokens`` — as the calibrator always read it.

A hybrid model (Qwen3.5: Gated DeltaNet linear-attention layers beside full-attention ones)
shares the pool between attention blocks and fixed state blocks
(:class:`edgeserve.engine_memory.HybridLayout`): every running request holds
``kv_state_blocks_per_request`` state blocks whatever its length, and a token of context takes
one slot in each of ``kv_attention_groups`` attention blocks. The header names both, and a
step's context is then

    (kv_cache_usage × (kv_cache_blocks − 1) − kv_state_blocks_per_request × running)
        × block_size / kv_attention_groups

(at least 0). Reading it as ``kv_cache_usage × kv_cache_blocks × block_size`` — the header's
``kv_cache_tokens`` before it was vLLM's capacity — counted the state blocks as context: for the
tiny Qwen3.5 (97 blocks of 1152 tokens, two state blocks per request) three requests of 1000
tokens read as 10,476 tokens of context instead of 3,456.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from edgeserve.records import EngineStep


@dataclass(slots=True, frozen=True)
class HybridKV:
    """A hybrid model's block pool, as the trace header describes it."""

    blocks: int  # vLLM's pool, its null block included
    block_tokens: int
    attention_groups: int
    state_blocks_per_request: int

    def context_tokens(self, step: EngineStep) -> float:
        held = step.kv_cache_usage * (self.blocks - 1)
        attention = max(0.0, held - self.state_blocks_per_request * step.running)
        return attention * self.block_tokens / self.attention_groups


KVCache = int | HybridKV
"""What :func:`context_tokens` needs: the header's ``kv_cache_tokens``, or a hybrid pool."""


def kv_cache(engine: Mapping[str, object]) -> KVCache:
    """The header's ``meta.engine`` as a :data:`KVCache` (0 when it names none)."""
    groups, state = engine.get("kv_attention_groups"), engine.get("kv_state_blocks_per_request")
    blocks, block = engine.get("kv_cache_blocks"), engine.get("block_size")
    if groups and state is not None and blocks and block:
        return HybridKV(_int(blocks), _int(block), _int(groups), _int(state))
    return _int(engine.get("kv_cache_tokens") or 0)


def _int(v: object) -> int:
    if not isinstance(v, int | float | str):
        raise ValueError(f"trace header: {v!r} is not a number")
    return int(v)


def context_tokens(step: EngineStep, kv: KVCache) -> float:
    """The tokens of context the engine held after ``step``."""
    if isinstance(kv, HybridKV):
        return kv.context_tokens(step)
    return step.kv_cache_usage * kv
