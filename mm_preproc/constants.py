"""The numbers that define Qwen2-VL's image input, in one place.

A Qwen2-VL vision tower sees an image as a grid of 14×14-pixel patches. Neighbouring 2×2
patches are merged into one language-model token, so both sides of the resized image must be
multiples of ``FACTOR = PATCH_SIZE * MERGE_SIZE = 28``. The tower is shared with video, whose
patches span two frames (``TEMPORAL_PATCH_SIZE = 2``); a still image is repeated in time, so one
flattened patch holds ``3 channels × 2 frames × 14 × 14 = 1176`` values.
"""

from __future__ import annotations

from typing import Final

PATCH_SIZE: Final = 14
MERGE_SIZE: Final = 2
TEMPORAL_PATCH_SIZE: Final = 2
FACTOR: Final = PATCH_SIZE * MERGE_SIZE
CHANNELS: Final = 3
PATCH_DIM: Final = CHANNELS * TEMPORAL_PATCH_SIZE * PATCH_SIZE * PATCH_SIZE

# OpenAI CLIP statistics, which Qwen2-VL's processor uses (transformers' OPENAI_CLIP_MEAN/STD).
IMAGE_MEAN: Final = (0.48145466, 0.4578275, 0.40821073)
IMAGE_STD: Final = (0.26862954, 0.26130258, 0.27577711)
RESCALE_FACTOR: Final = 1 / 255

# transformers' Qwen2VLImageProcessor defaults (size["shortest_edge"], size["longest_edge"]).
DEFAULT_MIN_PIXELS: Final = 56 * 56
DEFAULT_MAX_PIXELS: Final = 28 * 28 * 1280
# What the released Qwen2-VL checkpoints' preprocessor_config.json and qwen-vl-utils allow
# (16384 tokens of 28×28 pixels).
MODEL_CONFIG_MAX_PIXELS: Final = 16384 * 28 * 28
QWEN_VL_UTILS_MIN_PIXELS: Final = 4 * 28 * 28

MAX_ASPECT_RATIO: Final = 200

# Decompression-bomb guard: sources above this many pixels are refused before decoding.
# Same value as Pillow's Image.MAX_IMAGE_PIXELS (1 GiB of 4-byte pixels / 3, about 89.5 MP).
DEFAULT_MAX_SOURCE_PIXELS: Final = 89_478_485

# JPEG DCT-domain downscaling (fast path): decode at 1/s only when the decoded image is still at
# least this many times the target size on each side. Smaller margins are faster but move the
# result further from a full-resolution decode (measured in docs/mm_preproc.md).
DRAFT_MIN_RATIO: Final = {2: 1.5, 4: 2.0, 8: 2.0}
