"""The shape of what :func:`mm_preproc.preprocess` writes, known before any pixel is decoded.

A request's output size follows from the source's header alone (see :func:`mm_preproc.probe`),
so a frontend can size a shared-memory segment before a worker decodes the image:

>>> spec = output_spec(840, 1148, OutputFormat.FLOAT32)
>>> spec.shape, spec.nbytes
((4920, 1176), 23143680)

Three formats exist. ``FLOAT32`` is the model's ``pixel_values``: rescaled by 1/255, normalized
with the spec's mean/std (CLIP's for Qwen2-VL), in the Qwen-VL patch order. ``UINT8`` is the same patch order with the raw
0..255 values, for engines that rescale and normalize on the device (a quarter of the bytes).
``IMAGE`` is the resized ``uint8`` image itself, H×W×3, for engines that patchify themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from mm_preproc.constants import CHANNELS
from mm_preproc.errors import InvalidArgumentError
from mm_preproc.spec import QWEN2_VL, PreprocSpec


class OutputFormat(Enum):
    """What ``pixel_values`` holds (see the module docstring)."""

    FLOAT32 = "float32"
    UINT8 = "uint8"
    IMAGE = "image"


@dataclass(slots=True, frozen=True)
class OutputSpec:
    """Shape and dtype of the output array for one target size and format."""

    shape: tuple[int, ...]
    dtype: np.dtype
    grid_thw: tuple[int, int, int]
    merge_size: int = QWEN2_VL.merge_size

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    @property
    def num_patches(self) -> int:
        return self.grid_thw[0] * self.grid_thw[1] * self.grid_thw[2]

    @property
    def num_tokens(self) -> int:
        """Image tokens the language model sees (patches merged merge_size × merge_size)."""
        return self.num_patches // (self.merge_size * self.merge_size)


def grid_thw(
    target_height: int, target_width: int, spec: PreprocSpec = QWEN2_VL
) -> tuple[int, int, int]:
    """``image_grid_thw`` for a resized image: (1 frame, patch rows, patch columns)."""
    factor = spec.factor
    if target_height % factor or target_width % factor or target_height <= 0 or target_width <= 0:
        raise InvalidArgumentError(
            f"target size must be positive multiples of {factor}, got {target_width}x{target_height}"
        )
    return (1, target_height // spec.patch_size, target_width // spec.patch_size)


def output_spec(
    target_height: int,
    target_width: int,
    fmt: OutputFormat = OutputFormat.FLOAT32,
    spec: PreprocSpec = QWEN2_VL,
) -> OutputSpec:
    """Shape, dtype and byte size of ``pixel_values`` for a target size, format and spec."""
    grid = grid_thw(target_height, target_width, spec)
    n = grid[0] * grid[1] * grid[2]
    m = spec.merge_size
    if fmt is OutputFormat.FLOAT32:
        return OutputSpec((n, spec.patch_dim), np.dtype(np.float32), grid, m)
    if fmt is OutputFormat.UINT8:
        return OutputSpec((n, spec.patch_dim), np.dtype(np.uint8), grid, m)
    return OutputSpec((target_height, target_width, CHANNELS), np.dtype(np.uint8), grid, m)
