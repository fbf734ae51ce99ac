"""Packing a resized image into the H×W×3 ``uint8`` output (``OutputFormat.IMAGE``).

Pillow's resize leaves the image as H×W×4 memory (R, G, B, padding; :mod:`mm_preproc.pil_view`).
The plain way to write it out, and this module's specification, is numpy's copy of the RGB
view: ``np.copyto(dst, pixels[:, :, :3])``. numpy copies that element by element because the
source's pixel stride (4) differs from the destination's (3): 4.3 ms for a 1148×840 image on the
dev machine's one core, where OpenCV's channel conversion (``COLOR_RGBA2RGB``, a SIMD loop that
drops every fourth byte) writes the same bytes in 0.08 ms. :func:`pack_rgb_into` takes the fast
path where OpenCV can write into ``dst`` in place and falls back to the copy otherwise; the two
are bit-identical (tests/mm_preproc/test_preproc_pack.py).
"""

from __future__ import annotations

import cv2
import numpy as np


def pack_rgb_into_plain(dst: np.ndarray, pixels: np.ndarray) -> None:
    """The specification: ``dst[...] = pixels[:, :, :3]``."""
    np.copyto(dst, pixels[:, :, :3])


def pack_rgb_into(dst: np.ndarray, pixels: np.ndarray) -> None:
    """Write the RGB channels of ``pixels`` (H×W×3 or H×W×4 ``uint8``) into ``dst`` (H×W×3)."""
    if (pixels.ndim == 3 and pixels.shape[2] == 4 and pixels.dtype == np.uint8
            and dst.dtype == np.uint8 and dst.shape == (*pixels.shape[:2], 3)
            and dst.flags.c_contiguous and pixels.strides[1:] == (4, 1)
            and pixels.strides[0] > 0):
        out = cv2.cvtColor(pixels, cv2.COLOR_RGBA2RGB, dst=dst)
        if out.ctypes.data == dst.ctypes.data:
            return
    pack_rgb_into_plain(dst, pixels)
