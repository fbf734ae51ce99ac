"""Qwen2-VL's patch layout, fused with rescale and normalize, written into a given buffer.

The resized image (H×W×3, uint8) is cut into 14×14 patches. Patches are ordered so that the 2×2
patches which the model later merges into one token are consecutive: row-major over 28×28
blocks, and row-major over the 2×2 patches inside a block. Each patch is flattened as
(channel, time, row, column) — the time axis repeats the still image twice — giving rows of
3·2·14·14 = 1176 values. This is exactly transformers' ``Qwen2VLImageProcessor.patchify``.

The work is two passes. ``patchify`` gathers the uint8 pixels into patch order (3 bytes per
pixel, cheap). ``normalize`` then computes ``u · 1/(255·std) − mean/std`` in float32 on that
compact array and broadcasts it into both time slots of the output. No float64 temporaries; the
only temporary is float32 at one time slot's size. The result differs from transformers' (which
rescales in float64, then subtracts and divides in float32) by a few float32 ulps (< 1e-6).
"""

from __future__ import annotations

import numpy as np

from mm_preproc.constants import (
    CHANNELS,
    IMAGE_MEAN,
    IMAGE_STD,
    MERGE_SIZE,
    PATCH_DIM,
    PATCH_SIZE,
    RESCALE_FACTOR,
    TEMPORAL_PATCH_SIZE,
)
from mm_preproc.errors import InvalidArgumentError
from mm_preproc.layout import OutputFormat, output_spec

_STD = np.asarray(IMAGE_STD, dtype=np.float64)
_SCALE = (RESCALE_FACTOR / _STD).astype(np.float32).reshape(1, CHANNELS, 1, 1)
_BIAS = (
    (-np.asarray(IMAGE_MEAN, dtype=np.float64) / _STD).astype(np.float32).reshape(1, CHANNELS, 1, 1)
)
_PIXELS_PER_PATCH = PATCH_SIZE * PATCH_SIZE


def patch_order(image: np.ndarray) -> np.ndarray:
    """Gather an H×W×3 uint8 image into patch order: (num_patches, 3, 1, 14·14) uint8."""
    height, width, _ = image.shape
    gh, gw = height // PATCH_SIZE, width // PATCH_SIZE
    view = image.reshape(
        gh // MERGE_SIZE, MERGE_SIZE, PATCH_SIZE, gw // MERGE_SIZE, MERGE_SIZE, PATCH_SIZE, CHANNELS
    ).transpose(0, 3, 1, 4, 6, 2, 5)
    return np.ascontiguousarray(view).reshape(gh * gw, CHANNELS, 1, _PIXELS_PER_PATCH)


def check_out(out: np.ndarray | None, height: int, width: int, fmt: OutputFormat) -> np.ndarray:
    """Return ``out`` if it fits the output of a target size and format, else a new array."""
    spec = output_spec(height, width, fmt)
    if out is None:
        return np.empty(spec.shape, dtype=spec.dtype)
    if out.dtype != spec.dtype or not out.flags.c_contiguous or out.size != np.prod(spec.shape):
        raise InvalidArgumentError(
            f"out must be a C-contiguous {spec.dtype} array of {np.prod(spec.shape)} elements "
            f"(shape {spec.shape}); got {out.dtype} shape {out.shape}"
        )
    return out.reshape(spec.shape)


def normalize_into(patches: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Rescale, normalize and repeat in time: (N, 3, 1, 196) uint8 → ``out`` (N, 1176) float32."""
    n = patches.shape[0]
    # A plain uint8 → float32 cast then in-place float32 ops beat a mixed-type ufunc call
    # (numpy's casting loop) by about 40% here.
    one_frame = patches.astype(np.float32)
    one_frame *= _SCALE
    one_frame += _BIAS
    np.copyto(out.reshape(n, CHANNELS, TEMPORAL_PATCH_SIZE, _PIXELS_PER_PATCH), one_frame)
    return out


def repeat_into(patches: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Repeat in time without normalizing: (N, 3, 1, 196) uint8 → ``out`` (N, 1176) uint8."""
    n = patches.shape[0]
    np.copyto(out.reshape(n, CHANNELS, TEMPORAL_PATCH_SIZE, _PIXELS_PER_PATCH), patches)
    return out


assert PATCH_DIM == CHANNELS * TEMPORAL_PATCH_SIZE * _PIXELS_PER_PATCH
