"""Resizing to the target size, the way the model's processor does.

transformers' Qwen2-VL processor (and qwen-vl-utils) resize with Pillow's antialiased bicubic
filter (``Image.BICUBIC``, support scaled with the downscale factor, a = -0.5). Pillow computes it
separably — horizontal pass, 8-bit rounding, vertical pass — so only Pillow reproduces it to the
bit; pillow-simd computes the same filter with SIMD and rounds the same way, several times
faster. OpenCV's filters are different functions (``INTER_AREA`` averages boxes, ``INTER_CUBIC``
does not widen the kernel when shrinking); :func:`resize_opencv` exists to be measured against
the fidelity bound, not to be exact.
"""

from __future__ import annotations

import cv2
import numpy as np
import PIL
from PIL import Image


def pillow_is_simd() -> bool:
    """True when the installed ``PIL`` is pillow-simd (its versions end in ``.postN``)."""
    return ".post" in PIL.__version__


def resize_pillow(im: Image.Image, height: int, width: int) -> Image.Image:
    """Antialiased bicubic resize, exactly as transformers' PIL backend calls it."""
    if im.size == (width, height):
        return im
    return im.resize((width, height), Image.Resampling.BICUBIC)


def resize_opencv(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """OpenCV resize: area averaging when shrinking, bicubic when enlarging."""
    h, w = image.shape[:2]
    if (h, w) == (height, width):
        return image
    shrinking = height * width < h * w
    interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_CUBIC
    return cv2.resize(image, (width, height), interpolation=interpolation)
