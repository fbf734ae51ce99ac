"""Checking an exported graph against transformers' own tower, on images preprocessed as the server
preprocesses them.

Every export is checked before its metadata is written: the graph runs in ONNX Runtime on images
of 224×224, 448×336 and 644×476 pixels and on a two-image call (run image by image), preprocessed by
:mod:`mm_preproc`, and is compared with transformers' tower. ``encoder.json`` is written *last*,
next to the graph, with those figures — a folder with an ``encoder.json`` holds a checked graph
(the CLI judges the figures), and a server can check with :meth:`EncoderMeta.mismatches` that the
graph belongs to its model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models.onnx_encoder.meta import Check, read_model_config
from models.onnx_encoder.runtime import OnnxEncoder

# Images (width, height) the export is checked on; each inner tuple is one call.
CHECK_IMAGES: tuple[tuple[tuple[int, int], ...], ...] = (
    ((224, 224),),
    ((448, 336),),
    ((644, 476),),
    ((224, 224), (448, 336)),
)


def load_reference_tower(model_dir: Path) -> Any:
    """transformers' own tower, float32, eager attention: the function the graph must equal."""
    import torch
    from transformers import Qwen2VLForConditionalGeneration

    read_model_config(model_dir)
    model = Qwen2VLForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager")
    return model.model.visual.eval()


def reference_embeds(visual: Any, pixel_values: np.ndarray, grid_thw: np.ndarray) -> np.ndarray:
    """``visual(pixel_values, grid_thw=G)``'s merged output, (tokens, hidden) float32."""
    import torch

    with torch.no_grad():
        out = visual(torch.from_numpy(pixel_values), grid_thw=torch.from_numpy(grid_thw))
    out = getattr(out, "pooler_output", out)  # transformers 5 returns a model output
    return np.asarray(out.numpy(), dtype=np.float32)


def check_inputs(images: Sequence[tuple[int, int]], *, min_pixels: int = 56 * 56,
                 max_pixels: int = 1280 * 28 * 28, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(pixel_values, image_grid_thw)`` for synthetic images of the given (width, height), made
    by :func:`mm_preproc.preprocess` as the server makes them."""
    import mm_preproc

    rng = np.random.default_rng(seed)
    results = [mm_preproc.preprocess(rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
                                     min_pixels=min_pixels, max_pixels=max_pixels)
               for w, h in images]
    return (np.concatenate([r.pixel_values for r in results]),
            np.concatenate([r.image_grid_thw for r in results]).astype(np.int64))


def verify(graph: Path, visual: Any, pixel_limits: tuple[int, int] = (56 * 56, 1280 * 28 * 28),
           calls: Sequence[Sequence[tuple[int, int]]] = CHECK_IMAGES) -> list[Check]:
    """Run ``graph`` on each call's images and compare with transformers' tower."""
    encoder = OnnxEncoder(graph)
    checks = []
    for images in calls:
        pv, grid = check_inputs(images, min_pixels=pixel_limits[0], max_pixels=pixel_limits[1])
        got, want = encoder(pv, grid), reference_embeds(visual, pv, grid)
        if got.shape != want.shape:
            raise AssertionError(f"graph gave {got.shape}, transformers {want.shape} for {grid}")
        checks.append(Check(grid.tolist(), len(want), float(np.abs(got - want).max()),
                            float(np.abs(want).max())))
    return checks
