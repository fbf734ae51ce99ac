"""The numbers that define Qwen2-VL's image input, kept as module constants.

A Qwen2-VL vision tower sees an image as a grid of 14×14-pixel patches. Neighbouring 2×2
patches are merged into one language-model token, so both sides of the resized image must be
multiples of ``FACTOR = PATCH_SIZE * MERGE_SIZE = 28``. The tower is shared with video, whose
patches span two frames (``TEMPORAL_PATCH_SIZE = 2``); a still image is repeated in time, so one
flattened patch holds ``3 channels × 2 frames × 14 × 14 = 1176`` values.

These are :data:`mm_preproc.spec.QWEN2_VL`, the default spec; other families (Qwen2.5-VL,
Qwen3-VL, Qwen3.5) have specs of their own (:mod:`mm_preproc.spec`), which every function that
depends on the numbers takes as ``spec``.
"""

from __future__ import annotations

from typing import Final

from mm_preproc.spec import QWEN2_VL

PATCH_SIZE: Final = QWEN2_VL.patch_size
MERGE_SIZE: Final = QWEN2_VL.merge_size
TEMPORAL_PATCH_SIZE: Final = QWEN2_VL.temporal_patch_size
FACTOR: Final = QWEN2_VL.factor
CHANNELS: Final = 3
PATCH_DIM: Final = QWEN2_VL.patch_dim

# OpenAI CLIP statistics, which Qwen2-VL's processor uses (transformers' OPENAI_CLIP_MEAN/STD).
IMAGE_MEAN: Final = QWEN2_VL.image_mean
IMAGE_STD: Final = QWEN2_VL.image_std
RESCALE_FACTOR: Final = QWEN2_VL.rescale_factor

# transformers' Qwen2VLImageProcessor defaults (size["shortest_edge"], size["longest_edge"]).
DEFAULT_MIN_PIXELS: Final = QWEN2_VL.min_pixels
DEFAULT_MAX_PIXELS: Final = QWEN2_VL.max_pixels
# What the released Qwen2-VL checkpoints' preprocessor_config.json and qwen-vl-utils allow
# (16384 tokens of 28×28 pixels).
MODEL_CONFIG_MAX_PIXELS: Final = 16384 * 28 * 28
QWEN_VL_UTILS_MIN_PIXELS: Final = 4 * 28 * 28
# qwen-vl-utils' token bounds for an explicit resized_height/resized_width (× factor² pixels).
QWEN_VL_UTILS_MIN_TOKENS: Final = 4
QWEN_VL_UTILS_MAX_TOKENS: Final = 16384

MAX_ASPECT_RATIO: Final = 200

# Decompression-bomb guard: sources above this many pixels are refused before decoding.
# Same value as Pillow's Image.MAX_IMAGE_PIXELS (1 GiB of 4-byte pixels / 3, about 89.5 MP).
DEFAULT_MAX_SOURCE_PIXELS: Final = 89_478_485

# JPEG DCT-domain downscaling (fast path): decode at 1/s only when the decoded image is still at
# least this many times the target size on each side. Smaller margins are faster but move the
# result further from a full-resolution decode (measured in docs/mm_preproc.md). The margins are
# in pixels, the same for every spec: the target (in multiples of the spec's factor) decides the
# scale. They were chosen for CLIP's std (≈0.27, the smallest of the families: one grey level ≈
# 0.0146 normalized); Qwen3-VL's 0.5 maps the same pixel error to about half as much.
DRAFT_MIN_RATIO: Final = {2: 1.5, 4: 2.0, 8: 2.0}
