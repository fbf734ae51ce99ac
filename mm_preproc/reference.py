"""The model's own preprocessing, run the reference way, for fidelity tests and benchmarks.

"The reference" is what serving a Qwen2-VL model does today: vLLM opens the bytes with Pillow
and applies EXIF orientation, qwen-vl-utils converts the mode to RGB (RGBA over white), and
transformers' ``Qwen2VLImageProcessor`` resizes, rescales, normalizes and patchifies — with its
PIL backend (``Qwen2VLImageProcessorPil``) or its torchvision backend. transformers, torch and
qwen-vl-utils are imported lazily: this module is not needed to use :mod:`mm_preproc`.
"""

from __future__ import annotations

import io
import warnings
from functools import cache
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from mm_preproc.constants import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS
from mm_preproc.decode import to_rgb
from mm_preproc.webp_header import is_webp


def load_like_vllm(data: bytes) -> Image.Image:
    """Open, apply EXIF orientation, convert to RGB as qwen-vl-utils does; returns a PIL image.

    A Pillow build without WebP support gets WebP pixels from OpenCV's libwebp instead.
    """
    im: Image.Image
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*support not installed")
            im = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        if not is_webp(data):
            raise
        import cv2

        array = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        if array is None:
            raise
        code = cv2.COLOR_BGRA2RGBA if array.shape[2] == 4 else cv2.COLOR_BGR2RGB
        im = Image.fromarray(cv2.cvtColor(array, code))
    im.load()
    im = ImageOps.exif_transpose(im)
    return to_rgb(im)


@cache
def processor(kind: str) -> Any:
    """transformers' Qwen2-VL image processor: ``kind`` "pil" or "torchvision" (cached).

    transformers ≥ 5.18 names them ``Qwen2VLImageProcessorPil`` and ``Qwen2VLImageProcessor``;
    earlier releases named them ``Qwen2VLImageProcessor`` (PIL/numpy) and
    ``Qwen2VLImageProcessorFast`` (torchvision).
    """
    from transformers.models import qwen2_vl

    names = ("Qwen2VLImageProcessorPil",) if kind == "pil" else ("Qwen2VLImageProcessor",)
    if not hasattr(qwen2_vl, "Qwen2VLImageProcessorPil"):  # an earlier transformers
        names = ("Qwen2VLImageProcessor",) if kind == "pil" else ("Qwen2VLImageProcessorFast",)
    return getattr(qwen2_vl, names[0])()


def torchvision_available() -> bool:
    """Whether transformers' torchvision backend imports here (it needs a working torchvision)."""
    try:
        processor("torchvision")
    except Exception:  # ImportError, or torchvision's compiled ops failing to load
        return False
    return True


def _run(
    kind: str, image: Image.Image, min_pixels: int, max_pixels: int
) -> tuple[np.ndarray, np.ndarray]:
    out = processor(kind)(
        images=image,
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        return_tensors="np" if kind == "pil" else "pt",
    )
    pixel_values = out["pixel_values"]
    grid = out["image_grid_thw"]
    return np.asarray(pixel_values, dtype=np.float32), np.asarray(grid, dtype=np.int64)


def hf_pil(
    data: bytes, min_pixels: int = DEFAULT_MIN_PIXELS, max_pixels: int = DEFAULT_MAX_PIXELS
) -> tuple[np.ndarray, np.ndarray]:
    """(pixel_values, image_grid_thw) from vLLM-style loading + transformers' PIL processor."""
    return _run("pil", load_like_vllm(data), min_pixels, max_pixels)


def hf_torchvision(
    data: bytes, min_pixels: int = DEFAULT_MIN_PIXELS, max_pixels: int = DEFAULT_MAX_PIXELS
) -> tuple[np.ndarray, np.ndarray]:
    """(pixel_values, image_grid_thw) from vLLM-style loading + the torchvision processor."""
    return _run("torchvision", load_like_vllm(data), min_pixels, max_pixels)


def qwen_vl_utils_then_hf(
    data: bytes,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    resized_height: int | None = None,
    resized_width: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """qwen-vl-utils' ``fetch_image`` (open, RGB, smart_resize + resize), then the PIL processor.

    ``fetch_image`` does not apply EXIF orientation; the image is oriented first so all
    references see the same pixels.
    """
    from qwen_vl_utils.vision_process import fetch_image

    element: dict[str, Any] = {"image": load_like_vllm(data)}
    if resized_height is not None and resized_width is not None:
        element.update(resized_height=resized_height, resized_width=resized_width)
    else:
        element.update(min_pixels=min_pixels, max_pixels=max_pixels)
    resized = fetch_image(element)
    return _run("pil", resized, min_pixels, max_pixels)
