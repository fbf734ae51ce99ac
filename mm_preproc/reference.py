"""The model's own preprocessing, run the reference way, for fidelity tests and benchmarks.

"The reference" is what serving a Qwen-VL model does today: vLLM opens the bytes with Pillow
and applies EXIF orientation, qwen-vl-utils converts the mode to RGB (RGBA over white), and
transformers' ``Qwen2VLImageProcessor`` resizes, rescales, normalizes and patchifies — with its
PIL backend (``Qwen2VLImageProcessorPil``) or its torchvision backend. Every Qwen-VL family
(Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5) uses that one class, configured by its checkpoint's
``preprocessor_config.json`` (transformers' ``AutoImageProcessor`` maps all four to it): here it
is configured from a :class:`~mm_preproc.spec.PreprocSpec`, or loaded from a model folder the
way transformers loads it (:func:`folder_processor`). transformers, torch and qwen-vl-utils are
imported lazily: this module is not needed to use :mod:`mm_preproc`.
"""

from __future__ import annotations

import io
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from mm_preproc.decode import to_rgb
from mm_preproc.spec import QWEN2_VL, PreprocSpec
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
def processor(kind: str, spec: PreprocSpec = QWEN2_VL) -> Any:
    """transformers' Qwen2-VL image processor configured with ``spec``: ``kind`` "pil" or
    "torchvision" (cached).

    transformers ≥ 5.18 names them ``Qwen2VLImageProcessorPil`` and ``Qwen2VLImageProcessor``;
    earlier releases named them ``Qwen2VLImageProcessor`` (PIL/numpy) and
    ``Qwen2VLImageProcessorFast`` (torchvision).
    """
    from transformers.models import qwen2_vl

    names = ("Qwen2VLImageProcessorPil",) if kind == "pil" else ("Qwen2VLImageProcessor",)
    if not hasattr(qwen2_vl, "Qwen2VLImageProcessorPil"):  # an earlier transformers
        names = ("Qwen2VLImageProcessor",) if kind == "pil" else ("Qwen2VLImageProcessorFast",)
    return getattr(qwen2_vl, names[0])(**spec.processor_kwargs())


def folder_processor(model_dir: str | Path, kind: str) -> Any:
    """The image processor transformers itself loads for a model folder (``AutoImageProcessor``,
    backend ``kind``); raises ``RuntimeError`` when transformers would fall back to the other
    backend (it only warns)."""
    from transformers import AutoImageProcessor

    proc = AutoImageProcessor.from_pretrained(str(model_dir), backend=kind)
    is_pil = type(proc).__name__.endswith("Pil")
    if is_pil != (kind == "pil"):
        raise RuntimeError(f"transformers gave {type(proc).__name__} for backend {kind!r}")
    return proc


def torchvision_available() -> bool:
    """Whether transformers' torchvision backend imports here (it needs a working torchvision)."""
    try:
        processor("torchvision")
    except Exception:  # ImportError, or torchvision's compiled ops failing to load
        return False
    return True


def run_processor(
    proc: Any, image: Image.Image, min_pixels: int | None = None, max_pixels: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(pixel_values, image_grid_thw) of one image through a transformers image processor;
    the pixel bounds, when given, are passed as its ``size``."""
    kwargs: dict[str, Any] = {}
    if min_pixels is not None or max_pixels is not None:
        size = dict(proc.size)
        if min_pixels is not None:
            size["shortest_edge"] = min_pixels
        if max_pixels is not None:
            size["longest_edge"] = max_pixels
        kwargs["size"] = size
    is_pil = type(proc).__name__.endswith("Pil")
    out = proc(images=image, return_tensors="np" if is_pil else "pt", **kwargs)
    pixel_values = out["pixel_values"]
    grid = out["image_grid_thw"]
    return np.asarray(pixel_values, dtype=np.float32), np.asarray(grid, dtype=np.int64)


def hf_pil(
    data: bytes,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    spec: PreprocSpec = QWEN2_VL,
) -> tuple[np.ndarray, np.ndarray]:
    """(pixel_values, image_grid_thw) from vLLM-style loading + transformers' PIL processor."""
    return _run("pil", load_like_vllm(data), min_pixels, max_pixels, spec)


def hf_torchvision(
    data: bytes,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    spec: PreprocSpec = QWEN2_VL,
) -> tuple[np.ndarray, np.ndarray]:
    """(pixel_values, image_grid_thw) from vLLM-style loading + the torchvision processor."""
    return _run("torchvision", load_like_vllm(data), min_pixels, max_pixels, spec)


def _run(
    kind: str, image: Image.Image, min_pixels: int | None, max_pixels: int | None,
    spec: PreprocSpec,
) -> tuple[np.ndarray, np.ndarray]:
    lo = spec.min_pixels if min_pixels is None else min_pixels
    hi = spec.max_pixels if max_pixels is None else max_pixels
    return run_processor(processor(kind, spec), image, lo, hi)


def qwen_vl_utils_then_hf(
    data: bytes,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    resized_height: int | None = None,
    resized_width: int | None = None,
    spec: PreprocSpec = QWEN2_VL,
) -> tuple[np.ndarray, np.ndarray]:
    """qwen-vl-utils' ``fetch_image`` (open, RGB, smart_resize + resize), then the PIL processor.

    ``fetch_image`` does not apply EXIF orientation; the image is oriented first so all
    references see the same pixels. It is told the spec's patch size (its ``image_patch_size``).
    """
    from qwen_vl_utils.vision_process import fetch_image

    lo = spec.min_pixels if min_pixels is None else min_pixels
    hi = spec.max_pixels if max_pixels is None else max_pixels
    element: dict[str, Any] = {"image": load_like_vllm(data)}
    if resized_height is not None and resized_width is not None:
        element.update(resized_height=resized_height, resized_width=resized_width)
    else:
        element.update(min_pixels=lo, max_pixels=hi)
    resized = fetch_image(element, image_patch_size=spec.patch_size)
    return _run("pil", resized, lo, hi, spec)
