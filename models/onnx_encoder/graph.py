"""The tower rewritten as a module that exports to one ONNX graph for every image size.

How the tower is rewritten for export (:func:`_graph_module`), and why:

* **Grid → positions without Python loops.** transformers loops over ``grid_thw.tolist()``
  (``get_vision_position_ids``); a traced loop over concrete values bakes one image size into the
  graph — every other size is then silently wrong (the rknn-llm exports that baked
  ``rotary_pos_emb`` in as constants). Here each patch index ``p`` finds its (row, column) in the
  merge-block-major layout by integer arithmetic on its index within the frame ``f``:
  ``block = f // m², hpos = (block // (w/m))·m + (f % m²) // m`` and so on.
* **Frames as a batch, not a mask.** The tower attends within each frame only. transformers
  splits q/k/v by ``cu_seqlens.tolist()`` (a Python list) or hands ``cu_seqlens`` to
  FlashAttention; exporters stumble on both (``cumsum`` yielding int64 where a Slice wanted int32,
  transformers PR 34852). With one image per run every frame has the same h·w patches, so
  q/k/v are reshaped to (t, h·w, heads·head_dim) and each frame is one batch entry of an
  attention with **no mask at all**. (The first version of this graph took any number of
  images and added a 0 / −inf segment mask to (Σ patches)² scores: 0.42 CPU-s for a 1280-token
  image against 0.22 now, and quadratic in the whole batch.)
* **ONNX Runtime's fused attention.** The TorchScript exporter writes each block's attention as
  one ``com.microsoft.MultiHeadAttention`` node (``_FrameAttention.symbolic``); its CPU kernel
  is a flash attention (MLAS): blocks of scores in cache, never the (patches × patches) matrix
  — 105 MB per head for a 1280-token image otherwise. The dynamo exporter traces the eager
  forward instead (MatMul, Softmax, MatMul per frame: standard ops for providers without the
  contrib op). Patch embed (a Conv3d whose kernel is its stride) is one MatMul of the flattened
  patches; norms, rotary tables, MLPs and the merger are transformers' own modules, float32.

Measured (``benchmarks/onnx_encoder_cpu.py``, one thread, 2-core AMD EPYC with AVX-512): for a
1280-token image about 82 % of the graph's time is the two attention nodes, at roughly 70 % of
the core's float32 FMA peak (head_dim 32, 5 000 patches: 13 GFLOP of attention); ONNX
Runtime's CPU provider has no bfloat16 or float16 GEMM on x86 (a float16 MultiHeadAttention ran
no faster, the opset-23 ``Attention`` op slower), so this is near what float32 allows.
"""

from __future__ import annotations

from typing import Any

CONTRIB_DOMAIN = "com.microsoft"  # ONNX Runtime's contrib operators (MultiHeadAttention)


def graph_module(visual: Any) -> Any:
    """Wrap transformers' tower in a module whose forward exports with a dynamic number of patches
    for one image (or one video) per call: ``image_grid_thw`` is its single (t, h, w) row."""
    import torch
    from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb_vision

    m = int(visual.spatial_merge_size)

    def positions(grid_thw: torch.Tensor, num_patches: int) -> torch.Tensor:
        """Per patch: its (h, w) rotary position, merge-block-major as transformers lays it out
        (every frame of a video repeats the positions of the first)."""
        w = grid_thw[0, 2].to(torch.int64)
        frame = grid_thw[0, 1].to(torch.int64) * w
        f = torch.arange(num_patches, dtype=torch.int64) % frame  # index within its frame
        block, within = f // (m * m), f % (m * m)
        blocks_per_row = w // m
        hpos = (block // blocks_per_row) * m + within // m
        wpos = (block % blocks_per_row) * m + within % m
        return torch.stack([hpos, wpos], dim=-1)

    class VisionGraph(torch.nn.Module):
        patch_weight: torch.Tensor

        def __init__(self) -> None:
            super().__init__()
            self.visual = visual
            # Conv3d with kernel = stride = the patch is a matmul of the flattened patch rows; as
            # one (1176 × embed) MatMul it is ~15 % of the graph's time faster than ORT's Conv.
            weight = visual.patch_embed.proj.weight
            self.register_buffer("patch_weight", weight.reshape(weight.shape[0], -1).t().contiguous())

        def forward(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> torch.Tensor:
            v = self.visual
            frames: Any = image_grid_thw[0, 0]  # a traced size: dynamic in the graph
            x = torch.matmul(pixel_values.to(self.patch_weight.dtype), self.patch_weight)
            cos, sin = v.rotary_pos_emb(x, positions(image_grid_thw, pixel_values.shape[0]))
            for blk in v.blocks:
                a = blk.attn
                qkv = a.qkv(blk.norm1(x)).reshape(-1, 3, a.num_heads, a.head_dim).permute(1, 0, 2, 3)
                q, k = apply_rotary_pos_emb_vision(qkv[0], qkv[1], cos, sin)
                # (frames, patches per frame, heads · head_dim): each frame one attention batch
                q, k, val = (z.reshape(frames, -1, a.dim) for z in (q, k, qkv[2]))
                o = _FrameAttention.apply(q, k, val, a.num_heads, float(a.scaling))
                x = x + a.proj(o.reshape(-1, a.dim))
                x = x + blk.mlp(blk.norm2(x))
            merged: torch.Tensor = v.merger(x)
            return merged

    return VisionGraph().eval()


def _frame_attention_class() -> Any:
    """``softmax(q·kᵀ·scale)·v`` per frame and head, exported by the TorchScript exporter as ONNX
    Runtime's fused ``com.microsoft.MultiHeadAttention`` (flash attention on its CPU provider: no
    (patches × patches) score matrix in memory); the dynamo exporter traces the eager forward."""
    import torch

    class FrameAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int,
                    scale: float) -> torch.Tensor:
            frames, n, width = q.shape
            heads = [z.reshape(frames, n, num_heads, width // num_heads).transpose(1, 2)
                     for z in (q, k, v)]
            scores = torch.matmul(heads[0], heads[1].transpose(-1, -2)) * scale
            o = torch.matmul(torch.softmax(scores, dim=-1), heads[2])
            return o.transpose(1, 2).reshape(frames, n, width)

        @staticmethod
        def symbolic(g: Any, q: Any, k: Any, v: Any, num_heads: int, scale: float) -> Any:
            return g.op(f"{CONTRIB_DOMAIN}::MultiHeadAttention", q, k, v,
                        num_heads_i=num_heads, scale_f=scale)

    return FrameAttention


class _LazyFrameAttention:
    """Defers importing torch until the graph is built (the runtime imports this module too)."""

    _cls: Any = None

    def apply(self, *args: Any) -> Any:
        if self._cls is None:
            type(self)._cls = _frame_attention_class()
        return self._cls.apply(*args)


_FrameAttention = _LazyFrameAttention()
