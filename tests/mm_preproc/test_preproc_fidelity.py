"""mm_preproc produces what the model's own preprocessing produces.

References (see ``mm_preproc.reference``): vLLM-style loading (EXIF orientation, qwen-vl-utils'
RGB conversion) followed by transformers' Qwen2-VL processor, PIL backend — and its torchvision
backend where it imports. The bounds, in normalized units (one grey level ≈ 0.015):

* ``image_grid_thw`` identical, always;
* faithful path (``fast_decode=False``): max |difference| ≤ 1e-5;
* fast path (JPEG decoded at 1/2, 1/4 or 1/8 in the DCT domain): mean |difference| ≤ 0.01.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    PHOTOS,
    encode,
    photo,
    photo_jpeg,
    record,
    synthetic_rgb,
    with_orientation,
)
from PIL import Image

import mm_preproc
from mm_preproc import reference
from mm_preproc.constants import DEFAULT_MAX_PIXELS, MODEL_CONFIG_MAX_PIXELS

FAITHFUL_MAX_ABS = 1e-5
FAST_MEAN_ABS = 0.01


def check_against_hf_pil(label: str, data: bytes, **limits: int) -> None:
    ref_values, ref_grid = reference.hf_pil(data, **limits)
    faithful = mm_preproc.preprocess(data, fast_decode=False, **limits)
    fast = mm_preproc.preprocess(data, fast_decode=True, **limits)
    assert faithful.image_grid_thw.tolist() == ref_grid.tolist()
    assert fast.image_grid_thw.tolist() == ref_grid.tolist()
    assert faithful.pixel_values.shape == ref_values.shape == fast.pixel_values.shape
    assert record(label, "faithful", "hf-pil", faithful.pixel_values, ref_values).max_abs <= (
        FAITHFUL_MAX_ABS
    )
    assert record(label, "fast", "hf-pil", fast.pixel_values, ref_values).mean_abs <= FAST_MEAN_ABS


@pytest.mark.parametrize("name", PHOTOS)
def test_photos_at_1080p_match_the_pil_processor(name: str) -> None:
    check_against_hf_pil(f"{name} 1920x1080 jpeg", photo_jpeg(name, 1920, 1080))


def test_a_12mp_photo_matches_with_the_served_and_the_default_limits(photo_12mp: bytes) -> None:
    check_against_hf_pil("astronaut 4000x3000 1280tok", photo_12mp, max_pixels=1280 * 28 * 28)
    check_against_hf_pil(
        "astronaut 4000x3000 16384tok", photo_12mp, max_pixels=MODEL_CONFIG_MAX_PIXELS
    )


@pytest.mark.parametrize(
    ("min_pixels", "max_pixels"),
    [(56 * 56, 64 * 28 * 28), (56 * 56, 256 * 28 * 28), (512 * 28 * 28, 2048 * 28 * 28)],
)
def test_per_request_pixel_limits_including_1_4_and_1_8_scale_decoding(
    min_pixels: int, max_pixels: int
) -> None:
    data = photo_jpeg("coffee", 3000, 2000)
    check_against_hf_pil(
        f"coffee 3000x2000 [{min_pixels},{max_pixels}]",
        data,
        min_pixels=min_pixels,
        max_pixels=max_pixels,
    )


def _rgba(w: int, h: int) -> Image.Image:
    rgb = synthetic_rgb(w, h, seed=1)
    alpha = np.linspace(0, 255, w * h, dtype=np.float32).reshape(h, w).astype(np.uint8)
    return Image.fromarray(np.dstack([rgb, alpha]))


def _palette(w: int, h: int) -> Image.Image:
    return Image.fromarray(synthetic_rgb(w, h, seed=2)).quantize(64)


def _palette_transparent(w: int, h: int) -> Image.Image:
    im = _palette(w, h)
    im.info["transparency"] = 0
    return im


def _gray16(w: int, h: int) -> Image.Image:
    values = np.linspace(0, 65535, w * h).reshape(h, w).astype(np.uint16)
    return Image.fromarray(values)


SYNTHETIC = {
    "L png 640x480": lambda: encode(Image.fromarray(synthetic_rgb(640, 480)).convert("L"), "PNG"),
    "LA png 500x300": lambda: encode(_rgba(500, 300).convert("LA"), "PNG"),
    "P png 333x1000": lambda: encode(_palette(333, 1000), "PNG"),
    "P+tRNS png 400x400": lambda: encode(_palette_transparent(400, 400), "PNG"),
    "RGBA png 800x600": lambda: encode(_rgba(800, 600), "PNG"),
    "I;16 png 300x500": lambda: encode(_gray16(300, 500), "PNG"),
    "1-bit png 256x256": lambda: encode(
        Image.fromarray(synthetic_rgb(256, 256)).convert("1"), "PNG"
    ),
    "CMYK jpeg 900x700": lambda: encode(
        Image.fromarray(synthetic_rgb(900, 700)).convert("CMYK"), "JPEG", quality=90
    ),
    "L jpeg 1200x900": lambda: encode(
        Image.fromarray(synthetic_rgb(1200, 900)).convert("L"), "JPEG", quality=90
    ),
    "RGB webp 1000x750": lambda: encode(
        Image.fromarray(synthetic_rgb(1000, 750)), "WEBP", lossless=True
    ),
    "RGBA webp 640x360": lambda: encode(_rgba(640, 360), "WEBP", quality=90),
    "P gif 500x400": lambda: encode(_palette(500, 400), "GIF"),
    "RGB bmp 700x500": lambda: encode(Image.fromarray(synthetic_rgb(700, 500)), "BMP"),
    "RGB tiff 600x800": lambda: encode(Image.fromarray(synthetic_rgb(600, 800)), "TIFF"),
    "RGBA tiff 300x200": lambda: encode(_rgba(300, 200), "TIFF"),
    "tiny 20x15 (upscaled)": lambda: encode(Image.fromarray(synthetic_rgb(20, 15)), "PNG"),
    "exact 196x140 (no resize)": lambda: encode(Image.fromarray(synthetic_rgb(196, 140)), "PNG"),
    "thin 4000x60 jpeg": lambda: encode(
        Image.fromarray(synthetic_rgb(4000, 60)), "JPEG", quality=90
    ),
    "ratio 187 3000x16": lambda: encode(Image.fromarray(synthetic_rgb(3000, 16)), "PNG"),
    "tall 50x2000 jpeg": lambda: encode(
        Image.fromarray(synthetic_rgb(50, 2000)), "JPEG", quality=90
    ),
    "5000x3300 jpeg q75": lambda: encode(
        Image.fromarray(synthetic_rgb(5000, 3300)), "JPEG", quality=75
    ),
}


@pytest.mark.parametrize("label", list(SYNTHETIC))
def test_synthetic_images_across_modes_formats_sizes_and_aspect_ratios(label: str) -> None:
    check_against_hf_pil(label, SYNTHETIC[label]())


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied_like_vllm(orientation: int) -> None:
    source = Image.fromarray(photo("chelsea")).resize((1800, 1200), Image.Resampling.LANCZOS)
    data = with_orientation(source, orientation)
    header = mm_preproc.probe(data)
    swapped = orientation >= 5
    assert (header.width, header.height) == ((1200, 1800) if swapped else (1800, 1200))
    check_against_hf_pil(f"chelsea exif orientation {orientation}", data)


def test_numpy_and_pil_inputs_match_the_pil_processor() -> None:
    array = photo("rocket")
    ref_values, ref_grid = reference.hf_pil(encode(Image.fromarray(array), "PNG"))
    for label, source in (("ndarray", array), ("PIL", Image.fromarray(array))):
        ours = mm_preproc.preprocess(source)
        assert ours.image_grid_thw.tolist() == ref_grid.tolist()
        row = record(f"rocket {label}", "faithful", "hf-pil", ours.pixel_values, ref_values)
        assert row.max_abs <= FAITHFUL_MAX_ABS


@pytest.mark.parametrize(
    ("resized_height", "resized_width"), [(280, 420), (500, 333), (1000, 1500)]
)
def test_explicit_size_matches_qwen_vl_utils_then_the_processor(
    resized_height: int, resized_width: int
) -> None:
    data = photo_jpeg("coffee", 1200, 800)
    # The processor's own max_pixels is raised so that it does not resize a second time.
    size = {"resized_height": resized_height, "resized_width": resized_width}
    limit = MODEL_CONFIG_MAX_PIXELS
    ref_values, ref_grid = reference.qwen_vl_utils_then_hf(data, max_pixels=limit, **size)
    ours = mm_preproc.preprocess(data, max_pixels=limit, fast_decode=False, **size)
    assert ours.image_grid_thw.tolist() == ref_grid.tolist()
    label = f"coffee -> {resized_width}x{resized_height}"
    assert record(label, "faithful", "qwen-vl-utils", ours.pixel_values, ref_values).max_abs <= (
        FAITHFUL_MAX_ABS
    )


def test_min_max_pixels_match_qwen_vl_utils_then_the_processor() -> None:
    data = photo_jpeg("astronaut", 2000, 1500)
    limits = {"min_pixels": 56 * 56, "max_pixels": 600 * 28 * 28}
    ref_values, ref_grid = reference.qwen_vl_utils_then_hf(data, **limits)
    ours = mm_preproc.preprocess(data, fast_decode=False, **limits)
    assert ours.image_grid_thw.tolist() == ref_grid.tolist()
    row = record(
        "astronaut 2000x1500 600tok", "faithful", "qwen-vl-utils", ours.pixel_values, ref_values
    )
    assert row.max_abs <= FAITHFUL_MAX_ABS


needs_torchvision = pytest.mark.skipif(
    not reference.torchvision_available(),
    reason="transformers' torchvision image processor does not import here",
)


@needs_torchvision
@pytest.mark.parametrize("name", PHOTOS[:3])
def test_photos_match_the_torchvision_processor(name: str) -> None:
    """torchvision's uint8 antialiased bicubic is a port of Pillow's. With torchvision 0.28 and
    pillow-simd 12.1 they agree to float32 rounding; other pairs (seen: torchvision 0.26 with
    Pillow 12.3) differ by one grey level in a few pixels. The faithful path must then be as
    close to the torchvision processor as the PIL processor itself is."""
    data = photo_jpeg(name, 4000, 3000)
    ref_values, ref_grid = reference.hf_torchvision(data)
    pil_values, _ = reference.hf_pil(data)
    pil_vs_tv = float(np.abs(pil_values - ref_values).max())
    for fast in (False, True):
        ours = mm_preproc.preprocess(data, fast_decode=fast)
        assert ours.image_grid_thw.tolist() == ref_grid.tolist()
        path = "fast" if fast else "faithful"
        row = record(
            f"{name} 4000x3000 jpeg", path, "hf-torchvision", ours.pixel_values, ref_values
        )
        if fast:
            assert row.mean_abs <= FAST_MEAN_ABS
        else:
            assert row.max_abs <= max(FAITHFUL_MAX_ABS, pil_vs_tv + FAITHFUL_MAX_ABS)


@pytest.mark.parametrize("name", PHOTOS[:3])
def test_the_opencv_backend_stays_within_the_fast_bound(name: str) -> None:
    data = photo_jpeg(name, 4000, 3000)
    ref_values, ref_grid = reference.hf_pil(data)
    for fast in (False, True):
        ours = mm_preproc.preprocess(data, backend="opencv", fast_decode=fast)
        assert ours.decoder is ours.resizer is mm_preproc.Backend.OPENCV
        assert ours.image_grid_thw.tolist() == ref_grid.tolist()
        path = "opencv fast" if fast else "opencv full"
        row = record(f"{name} 4000x3000 jpeg", path, "hf-pil", ours.pixel_values, ref_values)
        assert row.mean_abs <= FAST_MEAN_ABS


DETAIL_MEAN_ABS = 0.02


@pytest.mark.parametrize("name", ["gravel", "astronaut"])
def test_worst_case_native_resolution_detail_stays_within_the_documented_bound(name: str) -> None:
    """Upscaled sample photos are smooth. A photo tiled at native resolution has detail in every
    pixel, which 1/2-scale DCT decoding softens differently from a full-resolution resize: the
    fast path's mean difference rises to about 0.01–0.016 here (docs/mm_preproc.md). The
    faithful path is unaffected."""
    tile = photo(name)
    if tile.ndim == 2:
        tile = np.stack([tile] * 3, axis=-1)
    tiled = np.tile(tile, (-(-3000 // tile.shape[0]), -(-4000 // tile.shape[1]), 1))
    data = encode(Image.fromarray(np.ascontiguousarray(tiled[:3000, :4000])), "JPEG", quality=90)
    limits = {"max_pixels": 1280 * 28 * 28}
    ref_values, ref_grid = reference.hf_pil(data, **limits)
    fast = mm_preproc.preprocess(data, **limits)
    faithful = mm_preproc.preprocess(data, fast_decode=False, **limits)
    assert fast.decoded_width == 2000 and fast.image_grid_thw.tolist() == ref_grid.tolist()
    label = f"{name} tiled 4000x3000 1280tok"
    assert record(label, "faithful", "hf-pil", faithful.pixel_values, ref_values).max_abs <= (
        FAITHFUL_MAX_ABS
    )
    assert record(label, "fast", "hf-pil", fast.pixel_values, ref_values).mean_abs <= (
        DETAIL_MEAN_ABS
    )


def test_default_limits_are_the_processors_defaults() -> None:
    data = photo_jpeg("hubble_deep_field", 3000, 2000)
    _, ref_grid = reference.hf_pil(data)
    ours = mm_preproc.preprocess(data)
    assert ours.image_grid_thw.tolist() == ref_grid.tolist()
    assert ours.target_height * ours.target_width <= DEFAULT_MAX_PIXELS
