"""The copy-saving paths: Pillow's memory seen without a copy, normalize in chunks.

Both must give exactly the pixel values of the plain path (one float32 temporary for the whole
image, ``np.asarray`` of the resized Pillow image), for any size, source and ``out``.
"""

from __future__ import annotations

import gc
import io
import platform
from multiprocessing import shared_memory
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import encode, synthetic_rgb, with_orientation
from PIL import Image

import mm_preproc
from mm_preproc import patchify
from mm_preproc.patchify import normalize_into, patch_planes
from mm_preproc.pil_view import rgbx_view
from mm_preproc.spec import QWEN2_VL

MAX_PIXELS = 1280 * 28 * 28


def _normalize_in_one_pass(planes: np.ndarray) -> np.ndarray:
    """The previous normalize_into: one float32 temporary for all patches, then one copy."""
    n = planes.shape[1]
    one_frame = np.empty(planes.shape, np.float32)
    for c in range(3):
        cv2.addWeighted(
            planes[c],
            patchify._scale_bias(QWEN2_VL)[0][c],
            planes[c],
            0.0,
            patchify._scale_bias(QWEN2_VL)[1][c],
            dst=one_frame[c],
            dtype=cv2.CV_32F,
        )
    out = np.empty((n, 1176), np.float32)
    np.copyto(out.reshape(n, 3, 2, 196), one_frame.transpose(1, 0, 2)[:, :, None, :])
    return out


# patch counts 16, 60, 148, 512 (one chunk), 516, 1024, 1176 and 4920
@pytest.mark.parametrize(
    ("height", "width"),
    [(56, 56), (84, 140), (1036, 28), (448, 224), (28, 3612), (448, 448), (392, 588), (840, 1148)],
)
def test_chunked_normalize_is_bit_identical_to_one_pass(height: int, width: int) -> None:
    image = np.random.default_rng(width).integers(0, 256, (height, width, 3), dtype=np.uint8)
    planes = patch_planes(image).copy()
    expected = _normalize_in_one_pass(planes)
    out = np.full_like(expected, np.nan)
    got = normalize_into(planes, out)
    assert got is out
    np.testing.assert_array_equal(got, expected)


def test_normalize_writes_every_value_into_a_shared_memory_out() -> None:
    image = np.random.default_rng(5).integers(0, 256, (392, 1064, 3), dtype=np.uint8)
    planes = patch_planes(image).copy()
    expected = _normalize_in_one_pass(planes)
    segment = shared_memory.SharedMemory(create=True, size=expected.nbytes)
    try:
        out = np.ndarray(expected.shape, np.float32, buffer=segment.buf)
        out.fill(np.nan)
        normalize_into(planes, out)
        np.testing.assert_array_equal(out, expected)
        del out
    finally:
        segment.close()
        segment.unlink()


def test_rgbx_view_is_the_image_memory_read_only_and_outlives_the_image() -> None:
    im = Image.fromarray(synthetic_rgb(1148, 840))
    expected = np.asarray(im)
    view = rgbx_view(im)
    assert view is not None and view.shape == (840, 1148, 4) and view.dtype == np.uint8
    assert not view.flags.writeable
    np.testing.assert_array_equal(view[:, :, :3], expected)
    del im
    gc.collect()
    np.testing.assert_array_equal(view[:, :, :3], expected)  # the export keeps it alive


def test_rgbx_view_declines_what_it_cannot_show_without_a_copy() -> None:
    assert rgbx_view(Image.new("L", (64, 64))) is None
    assert rgbx_view(Image.new("RGBA", (64, 64))) is None
    # more than one 16 MiB memory block: Pillow refuses the export, the caller copies
    assert rgbx_view(Image.new("RGB", (2049, 2048))) is None


def test_patch_planes_of_rgbx_pixels_ignore_the_padding_byte() -> None:
    rng = np.random.default_rng(9)
    rgbx = rng.integers(0, 256, (84, 140, 4), dtype=np.uint8)  # padding bytes are random here
    np.testing.assert_array_equal(patch_planes(rgbx), patch_planes(rgbx[:, :, :3].copy()))
    np.testing.assert_array_equal(patch_planes(rgbx[::-1]), patch_planes(rgbx[::-1, :, :3]))


@pytest.mark.parametrize("fast_decode", [True, False])
def test_the_result_image_is_the_resized_pillow_image(fast_decode: bool) -> None:
    data = encode(Image.fromarray(synthetic_rgb(4000, 3000)), "JPEG", quality=90)
    r = mm_preproc.preprocess(data, max_pixels=MAX_PIXELS, fast_decode=fast_decode)
    assert r.image.shape == (r.target_height, r.target_width, 3)
    assert not r.image.flags.writeable
    im = Image.open(io.BytesIO(data))
    if fast_decode:
        im.draft("RGB", (r.decoded_width, r.decoded_height))
    resized = im.convert("RGB").resize((r.target_width, r.target_height), Image.Resampling.BICUBIC)
    np.testing.assert_array_equal(r.image, np.asarray(resized))
    # and the patches are those of that image
    u8 = mm_preproc.preprocess(
        data, max_pixels=MAX_PIXELS, fast_decode=fast_decode, output="uint8"
    ).pixel_values.reshape(-1, 3, 2, 196)
    planes = patch_planes(np.asarray(resized)).swapaxes(0, 1)
    np.testing.assert_array_equal(u8[:, :, 0], planes)
    np.testing.assert_array_equal(u8[:, :, 1], planes)


def test_a_pil_source_already_at_the_target_size_is_copied_not_viewed() -> None:
    im = Image.fromarray(synthetic_rgb(280, 280))
    r = mm_preproc.preprocess(im, max_pixels=MAX_PIXELS)
    before = r.image.copy()
    im.paste((0, 0, 0), (0, 0, 280, 280))
    np.testing.assert_array_equal(r.image, before)


def test_non_contiguous_array_sources_give_the_same_values() -> None:
    base = synthetic_rgb(1300, 900)
    view = base[::-1, ::2]  # non-contiguous, 650 wide
    a = mm_preproc.preprocess(view, max_pixels=MAX_PIXELS)
    b = mm_preproc.preprocess(np.ascontiguousarray(view), max_pixels=MAX_PIXELS)
    np.testing.assert_array_equal(a.pixel_values, b.pixel_values)
    np.testing.assert_array_equal(a.image, b.image)


# --- the optional C kernel (mm_preproc._fastpatch, built by setup.py) -------------------------

needs_native = pytest.mark.skipif(
    not patchify.native_available(), reason="mm_preproc._fastpatch is not built on this machine"
)


def _cpu_has_avx2_fma() -> bool:
    try:
        flags = next(
            line for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("flags")
        ).split()
    except (OSError, StopIteration):
        return False
    return platform.machine() in ("x86_64", "AMD64") and "avx2" in flags and "fma" in flags


@pytest.mark.skipif(not _cpu_has_avx2_fma(), reason="the C kernel is used on x86-64 with AVX2+FMA only")
def test_the_c_kernel_is_built_and_used_where_the_cpu_supports_it() -> None:
    """`make` builds it (mm-native); a silent build failure would quietly cost the speed target."""
    assert patchify._fastpatch is not None, "mm_preproc._fastpatch is not built: run `make mm-native`"
    assert patchify.native_available()


@needs_native
@pytest.mark.parametrize("depth", [3, 4])
@pytest.mark.parametrize(("height", "width"), [(56, 56), (84, 140), (1036, 28), (840, 1148)])
def test_the_native_kernel_gives_the_numpy_path_s_values(
    depth: int, height: int, width: int
) -> None:
    image = np.random.default_rng(height + depth).integers(
        0, 256, (height, width, depth), dtype=np.uint8
    )
    expected = _normalize_in_one_pass(patch_planes(image).copy())
    out = np.full_like(expected, np.nan)
    assert patchify.normalize_image_into(image, out) is out
    np.testing.assert_array_equal(out, expected)
    # an output that is only 4-byte aligned takes ordinary stores
    raw = np.empty(expected.nbytes + 4, np.uint8)
    shifted = raw[4:].view(np.float32).reshape(expected.shape)
    assert shifted.ctypes.data % 16 != 0
    shifted.fill(np.nan)
    patchify.normalize_image_into(image, shifted)
    np.testing.assert_array_equal(shifted, expected)
    # a non-contiguous image is copied first
    flipped = np.full_like(expected, np.nan)
    patchify.normalize_image_into(image[::-1], flipped)
    np.testing.assert_array_equal(flipped, _normalize_in_one_pass(patch_planes(image[::-1]).copy()))


@needs_native
@pytest.mark.parametrize("depth", [3, 4])
@pytest.mark.parametrize("offset", [0, 16, 4], ids=["32-byte", "16-byte", "4-byte"])
def test_the_native_kernel_gives_the_numpy_path_s_values_for_16_px_patches(
    depth: int, offset: int
) -> None:
    """Qwen3-VL's geometry through each of the kernel's loops: a 32-byte aligned output (as the
    buffer pool hands out) takes the 32-byte RGBX loop, a 16-byte one the 16-byte loop, a 4-byte
    one ordinary stores; RGB input the float-plane loop."""
    from mm_preproc.buffers import POOL
    from mm_preproc.spec import QWEN3_VL

    image = np.random.default_rng(depth).integers(0, 256, (960, 1312, depth), dtype=np.uint8)
    expected = np.empty((60 * 82, 1536), np.float32)
    normalize_into(patch_planes(image, QWEN3_VL), expected, QWEN3_VL)
    raw = np.empty(expected.nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 32 + offset
    out = raw[start:start + expected.nbytes].view(np.float32).reshape(expected.shape)
    assert out.ctypes.data % 32 == offset % 32
    out.fill(np.nan)
    patchify.normalize_image_into(image, out, QWEN3_VL)
    np.testing.assert_array_equal(out, expected)
    assert POOL.empty((1000,), np.float32).ctypes.data % 64 == 0


@needs_native
def test_the_native_kernel_refuses_what_does_not_fit() -> None:
    image = np.zeros((56, 56, 3), np.uint8)
    with pytest.raises(ValueError, match="out must be"):
        patchify.normalize_image_into(image, np.empty((16, 1175), np.float32))
    out = np.empty((16, 1176), np.float32)
    with pytest.raises(ValueError, match="multiples of 28"):
        patchify.normalize_image_into(np.zeros((42, 56, 3), np.uint8), out)
    with pytest.raises(ValueError, match="multiples of 28"):
        patchify.normalize_image_into(np.zeros((56, 56, 2), np.uint8), out)


@needs_native
@pytest.mark.parametrize(
    "case", ["jpeg-fast", "jpeg-faithful", "png", "orientation-6", "array", "shared-memory-out"]
)
def test_preprocess_gives_the_same_pixel_values_with_and_without_the_kernel(case: str) -> None:
    rgb = synthetic_rgb(1700, 1100)
    source: object = encode(Image.fromarray(rgb), "PNG" if case == "png" else "JPEG", quality=90)
    kwargs: dict[str, object] = {"max_pixels": MAX_PIXELS, "fast_decode": case != "jpeg-faithful"}
    if case == "orientation-6":
        source = with_orientation(Image.fromarray(rgb), 6)
    if case == "array":
        source = rgb[::-1]  # non-contiguous
    native = mm_preproc.preprocess(source, **kwargs).pixel_values.copy()  # type: ignore[arg-type]
    assert native.dtype == np.float32
    old = patchify.set_native(False)
    try:
        plain = mm_preproc.preprocess(source, **kwargs).pixel_values  # type: ignore[arg-type]
    finally:
        patchify.set_native(old)
    np.testing.assert_array_equal(native, plain)
    if case == "shared-memory-out":
        segment = shared_memory.SharedMemory(create=True, size=native.nbytes)
        try:
            out = np.ndarray(native.shape, np.float32, buffer=segment.buf)
            out.fill(np.nan)
            r = mm_preproc.preprocess(source, out=out, **kwargs)  # type: ignore[arg-type]
            assert np.shares_memory(r.pixel_values, out)
            np.testing.assert_array_equal(out, native)
            del r, out
        finally:
            segment.close()
            segment.unlink()
