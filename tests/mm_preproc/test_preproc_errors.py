"""Bad input gives a clear PreprocError, never a hang, a crash or another exception type."""

from __future__ import annotations

import random
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import encode, synthetic_rgb
from PIL import Image

import mm_preproc
from mm_preproc import (
    AspectRatioError,
    CorruptImageError,
    DecompressionBombError,
    EmptyInputError,
    InvalidArgumentError,
    PreprocError,
    UnsupportedFormatError,
)

BACKENDS = ("auto", "pillow", "opencv")


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG announcing width×height whose pixel data is one empty zlib stream (~60 bytes)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(b""))
        + _chunk(b"IEND", b"")
    )


@pytest.fixture(scope="module")
def jpeg() -> bytes:
    return encode(Image.fromarray(synthetic_rgb(640, 480)), "JPEG", quality=90)


@pytest.fixture(scope="module")
def png() -> bytes:
    return encode(Image.fromarray(synthetic_rgb(320, 240)), "PNG")


def test_every_error_is_a_preproc_error_and_a_value_error() -> None:
    for error in (
        EmptyInputError,
        UnsupportedFormatError,
        CorruptImageError,
        DecompressionBombError,
        AspectRatioError,
        InvalidArgumentError,
    ):
        assert issubclass(error, PreprocError)
        assert issubclass(error, ValueError)


def test_empty_inputs(tmp_path: Path) -> None:
    with pytest.raises(EmptyInputError, match="empty"):
        mm_preproc.preprocess(b"")
    (tmp_path / "empty.jpg").write_bytes(b"")
    with pytest.raises(EmptyInputError, match="empty"):
        mm_preproc.preprocess(tmp_path / "empty.jpg")
    with pytest.raises(EmptyInputError, match="no pixels"):
        mm_preproc.preprocess(np.zeros((0, 10, 3), np.uint8))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"this is not an image at all", "unknown image format"),
        (b"\x00\x00\x00\x18ftypheic" + bytes(64), "HEIC images are not supported"),
        (b"%PDF-1.7\n" + bytes(64), "PDF images are not supported"),
        (b"P6\n4 4\n255\n" + bytes(48), "unknown image format"),  # PPM: readable, not accepted
    ],
)
def test_unknown_and_unsupported_formats_are_named(data: bytes, message: str) -> None:
    with pytest.raises(UnsupportedFormatError, match=message) as info:
        mm_preproc.preprocess(data)
    assert "supported: JPEG, PNG, WEBP, GIF, BMP, TIFF" in str(info.value)
    with pytest.raises(UnsupportedFormatError):
        mm_preproc.probe(data)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fast_decode", [True, False])
def test_truncated_jpeg_and_png_are_corrupt(
    jpeg: bytes, png: bytes, backend: str, fast_decode: bool
) -> None:
    for data in (jpeg[: len(jpeg) * 6 // 10], png[: len(png) * 6 // 10]):
        assert mm_preproc.probe(data).width > 0  # the header is intact...
        with pytest.raises(CorruptImageError, match="cannot decode"):  # ...the pixels are not
            mm_preproc.preprocess(data, backend=backend, fast_decode=fast_decode)


def test_a_corrupt_header_says_which_format_it_looked_like() -> None:
    with pytest.raises(CorruptImageError, match="starts like a JPEG"):
        mm_preproc.preprocess(b"\xff\xd8\xff\xe0" + bytes(100))


def test_a_decompression_bomb_is_refused_from_its_header_alone() -> None:
    # 20000×20000 = 400 MP announced by a 65-byte file; decoding was never attempted (there are
    # no pixels to decode, so an attempt would have raised CorruptImageError instead).
    bomb = png_header_only(20_000, 20_000)
    start = time.perf_counter()
    with pytest.raises(DecompressionBombError, match="refused before decoding"):
        mm_preproc.preprocess(bomb)
    with pytest.raises(DecompressionBombError):
        mm_preproc.probe(bomb)
    assert time.perf_counter() - start < 1.0
    # Just above the default limit (89.5 MP), below Pillow's own hard limit.
    with pytest.raises(DecompressionBombError, match="more than the limit of 89478485"):
        mm_preproc.preprocess(png_header_only(10_000, 9_000))


def test_the_source_pixel_limit_is_configurable(png: bytes) -> None:
    with pytest.raises(DecompressionBombError, match="76800 pixels, more than the limit of 50000"):
        mm_preproc.preprocess(png, max_source_pixels=50_000)
    assert mm_preproc.preprocess(png, max_source_pixels=76_800).source_width == 320


def test_a_too_thin_image_is_an_aspect_ratio_error() -> None:
    thin = encode(Image.fromarray(synthetic_rgb(402, 2)), "PNG")
    with pytest.raises(AspectRatioError, match="got 201"):
        mm_preproc.preprocess(thin)


def test_bad_arguments_are_clear(jpeg: bytes, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="min_pixels"):
        mm_preproc.preprocess(jpeg, min_pixels=2_000_000, max_pixels=1_000_000)
    with pytest.raises(InvalidArgumentError, match="unknown backend 'gpu'"):
        mm_preproc.preprocess(jpeg, backend="gpu")
    with pytest.raises(InvalidArgumentError, match="unknown output format"):
        mm_preproc.preprocess(jpeg, output="fp16")
    with pytest.raises(InvalidArgumentError, match="out must be a C-contiguous float32"):
        mm_preproc.preprocess(jpeg, out=np.empty((10, 1176), np.float32))
    with pytest.raises(InvalidArgumentError, match="out must be"):
        spec = mm_preproc.output_spec(*mm_preproc.target_size(480, 640))
        mm_preproc.preprocess(jpeg, out=np.empty(spec.shape, np.float64))
    with pytest.raises(InvalidArgumentError, match="cannot read image file"):
        mm_preproc.preprocess(tmp_path / "missing.jpg")
    with pytest.raises(InvalidArgumentError, match="unsupported source type int"):
        mm_preproc.preprocess(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="uint8"):
        mm_preproc.preprocess(np.zeros((100, 100, 3), np.float32))
    with pytest.raises(InvalidArgumentError, match="HxWx3"):
        mm_preproc.preprocess(np.zeros((100, 100, 2), np.uint8))


@pytest.mark.timeout(60)
def test_mangled_files_fail_cleanly_and_never_hang() -> None:
    """Flip, cut and splice bytes of small JPEG/PNG/GIF/BMP/TIFF/WebP files: every outcome is a
    result or a PreprocError."""
    rng = random.Random(7)
    small = Image.fromarray(synthetic_rgb(96, 64))
    seeds = [
        encode(small, "JPEG", quality=80),
        encode(small, "JPEG", quality=80, progressive=True),
        encode(small, "PNG"),
        encode(small.quantize(16), "GIF"),
        encode(small, "BMP"),
        encode(small, "TIFF"),
        encode(small, "WEBP", quality=80),
    ]
    outcomes = {"ok": 0, "error": 0}
    for i in range(420):
        data = bytearray(seeds[i % len(seeds)])
        kind = rng.choice(("flip", "cut", "splice"))
        if kind == "flip":
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == "cut":
            del data[rng.randrange(8, len(data)) :]
        else:
            at = rng.randrange(len(data))
            data[at:at] = rng.randbytes(rng.randint(1, 64))
        try:
            result = mm_preproc.preprocess(bytes(data), backend=BACKENDS[i % 3])
        except PreprocError:
            outcomes["error"] += 1
        else:
            assert result.pixel_values.shape[1] == 1176
            outcomes["ok"] += 1
    assert outcomes["ok"] > 0 and outcomes["error"] > 0


def test_a_mode_this_pillow_cannot_convert_is_named() -> None:
    from PIL import features

    lab = encode(Image.new("LAB", (64, 64)), "TIFF")
    if features.check("littlecms2"):
        assert mm_preproc.preprocess(lab).image.shape == (56, 56, 3)
    else:
        with pytest.raises(UnsupportedFormatError, match="cannot convert a LAB image to RGB"):
            mm_preproc.preprocess(lab)
