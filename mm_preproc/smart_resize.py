"""Which size an image is resized to before patching: ``smart_resize``.

Qwen2-VL keeps an image's aspect ratio, rounds both sides to multiples of 28, and scales the
area into ``[min_pixels, max_pixels]``. A 4000×3000 photo with ``max_pixels = 1280·28·28``
becomes 1148×840 (41×30 = 1230 merged tokens). transformers and qwen-vl-utils implement the rule
slightly differently at the edges (qwen-vl-utils clamps the rounded sides to at least 28 before
comparing with the limits); :class:`ResizeRule` selects which one to reproduce. The default is
transformers', because that is what the model's processor applies last.
"""

from __future__ import annotations

import math
from enum import Enum

from mm_preproc.constants import (
    DEFAULT_MAX_PIXELS,
    DEFAULT_MIN_PIXELS,
    FACTOR,
    MAX_ASPECT_RATIO,
    QWEN_VL_UTILS_MAX_TOKENS,
    QWEN_VL_UTILS_MIN_TOKENS,
)
from mm_preproc.errors import AspectRatioError, InvalidArgumentError
from mm_preproc.spec import QWEN2_VL, PreprocSpec


class ResizeRule(Enum):
    """Whose rounding rule to reproduce (they differ only for tiny or very thin images)."""

    TRANSFORMERS = "transformers"
    QWEN_VL_UTILS = "qwen_vl_utils"


def smart_resize(
    height: int,
    width: int,
    factor: int = FACTOR,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    rule: ResizeRule = ResizeRule.TRANSFORMERS,
) -> tuple[int, int]:
    """Return ``(resized_height, resized_width)``: multiples of ``factor``, area within limits.

    Raises :class:`AspectRatioError` when the long side exceeds 200× the short side.
    """
    if height <= 0 or width <= 0:
        raise InvalidArgumentError(f"image size must be positive, got {width}x{height}")
    if min_pixels > max_pixels:
        raise InvalidArgumentError(
            f"min_pixels ({min_pixels}) must not be larger than max_pixels ({max_pixels})"
        )
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise AspectRatioError(
            f"absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, got {ratio} "
            f"(image {width}x{height})"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if rule is ResizeRule.QWEN_VL_UTILS:
        h_bar, w_bar = max(factor, h_bar), max(factor, w_bar)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
        if rule is ResizeRule.TRANSFORMERS:
            h_bar, w_bar = max(factor, h_bar), max(factor, w_bar)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def target_size(
    source_height: int,
    source_width: int,
    *,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    resized_height: int | None = None,
    resized_width: int | None = None,
    spec: PreprocSpec = QWEN2_VL,
) -> tuple[int, int]:
    """The ``(height, width)`` :func:`mm_preproc.preprocess` will produce for a source size.

    Without an explicit size this is ``smart_resize`` of the (EXIF-oriented) source size, with
    the spec's factor (28 for Qwen2-VL, 32 for Qwen3-VL) and pixel bounds (``min_pixels`` /
    ``max_pixels`` override them). With ``resized_height`` and ``resized_width`` (both or
    neither), the explicit size is rounded the way qwen-vl-utils rounds it (to multiples of the
    factor within its own 4..16384-token bounds) and then bounded by the pixel bounds the way
    the model's processor bounds any image.
    """
    lo = spec.min_pixels if min_pixels is None else min_pixels
    hi = spec.max_pixels if max_pixels is None else max_pixels
    factor = spec.factor
    if (resized_height is None) != (resized_width is None):
        raise InvalidArgumentError("give both resized_height and resized_width, or neither")
    if resized_height is not None and resized_width is not None:
        h, w = smart_resize(
            resized_height,
            resized_width,
            factor=factor,
            min_pixels=QWEN_VL_UTILS_MIN_TOKENS * factor * factor,
            max_pixels=QWEN_VL_UTILS_MAX_TOKENS * factor * factor,
            rule=ResizeRule.QWEN_VL_UTILS,
        )
        return smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi)
    return smart_resize(source_height, source_width, factor=factor, min_pixels=lo, max_pixels=hi)
