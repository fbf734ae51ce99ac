"""An image's size and bytes as the policy sees them, read from the start of its data URL."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from edgeserve.gateway.live_job import ImageSize, data_url_bytes, image_size


def data_url(fmt: str, width: int, height: int, exif_chars: int = 0) -> str:
    rng = np.random.default_rng(width * height)  # noise: the payload is large
    im = Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))
    buf = io.BytesIO()
    if exif_chars:
        exif = Image.Exif()
        exif[0x010E] = "x" * exif_chars  # ImageDescription: the header moves back that far
        im.save(buf, fmt, exif=exif.tobytes())
    else:
        im.save(buf, fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize(("fmt", "width", "height", "exif_chars"), [
    ("PNG", 640, 480, 0), ("JPEG", 1280, 720, 0), ("JPEG", 800, 600, 3000),
    ("JPEG", 800, 600, 60000), ("GIF", 64, 48, 0), ("PNG", 61, 47, 0), ("PNG", 10, 10, 0),
])
def test_the_size_from_the_header_is_the_decoded_images(fmt: str, width: int, height: int,
                                                        exif_chars: int) -> None:
    url = data_url(fmt, width, height, exif_chars)
    size = image_size(url)
    data = data_url_bytes(url)
    assert data is not None
    assert (size.width, size.height, size.bytes_) == (width, height, len(data))


def test_what_is_no_image_has_no_size() -> None:
    assert image_size("data:image/png;base64,bm90IGFuIGltYWdl") == ImageSize(0, 0, 12)
    assert image_size("data:image/png;base64," + "A" * 8000) == ImageSize(0, 0, 6000)
    assert image_size("https://example.org/a.png") == ImageSize(0, 0, 0)


@pytest.mark.parametrize(("fmt", "mode", "options"), [
    ("JPEG", "L", {}), ("JPEG", "RGB", {"progressive": True}), ("JPEG", "CMYK", {}),
    ("JPEG", "RGB", {"quality": 20, "subsampling": 0}), ("PNG", "P", {}), ("PNG", "RGBA", {}),
])
def test_the_header_read_directly_agrees_with_pillow(fmt: str, mode: str,
                                                     options: dict[str, object]) -> None:
    from edgeserve.gateway.live_job import _header_size

    rng = np.random.default_rng(3)
    im = Image.fromarray(rng.integers(0, 255, (37, 53, 3), dtype=np.uint8)).convert(mode)
    buf = io.BytesIO()
    im.save(buf, fmt, **options)
    assert _header_size(buf.getvalue()) == Image.open(io.BytesIO(buf.getvalue())).size == (53, 37)
    assert _header_size(buf.getvalue()[:10]) is None  # a header not held whole
