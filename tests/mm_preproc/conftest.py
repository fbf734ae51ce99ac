"""Images for the mm_preproc tests: real photographs (scikit-image's samples) and synthetic
images in every mode and format we accept, all encoded to bytes in memory.

Fidelity tests record their figures in ``FIDELITY_ROWS``; the terminal summary prints them as a
table, so a run of the suite shows per-image differences against the references.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest
from PIL import Image

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field")


@dataclass(slots=True)
class FidelityRow:
    image: str
    path: str  # "faithful" / "fast" / backend name
    reference: str
    max_abs: float
    mean_abs: float


FIDELITY_ROWS: list[FidelityRow] = []


def record(image: str, path: str, reference: str, ours: np.ndarray, ref: np.ndarray) -> FidelityRow:
    diff = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
    row = FidelityRow(image, path, reference, float(diff.max()), float(diff.mean()))
    FIDELITY_ROWS.append(row)
    return row


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FIDELITY_ROWS:
        return
    tr = terminalreporter
    tr.section("mm_preproc fidelity (pixel_values, normalized units)")
    tr.write_line(f"{'image':<34} {'path':<16} {'reference':<14} {'max |d|':>10} {'mean |d|':>10}")
    for r in FIDELITY_ROWS:
        tr.write_line(
            f"{r.image:<34} {r.path:<16} {r.reference:<14} {r.max_abs:>10.2e} {r.mean_abs:>10.2e}"
        )


@cache
def _photo(name: str) -> np.ndarray:
    import skimage.data

    array = np.ascontiguousarray(getattr(skimage.data, name)())
    array.flags.writeable = False
    return array


def photo(name: str) -> np.ndarray:
    return _photo(name).copy()


def encode(im: Image.Image, fmt: str, **kwargs: object) -> bytes:
    if fmt == "WEBP":  # pillow-simd builds often lack libwebp; OpenCV has it
        return encode_webp(np.asarray(im), **kwargs)
    buf = io.BytesIO()
    im.save(buf, fmt, **kwargs)
    return buf.getvalue()


def encode_webp(array: np.ndarray, quality: int = 90, lossless: bool = False) -> bytes:
    import cv2

    code = cv2.COLOR_RGBA2BGRA if array.shape[-1] == 4 else cv2.COLOR_RGB2BGR
    params = [cv2.IMWRITE_WEBP_QUALITY, 101 if lossless else quality]
    ok, buf = cv2.imencode(".webp", cv2.cvtColor(array, code), params)
    assert ok
    return buf.tobytes()


@cache
def photo_jpeg(name: str, width: int, height: int, quality: int = 90) -> bytes:
    """A real photograph scaled (Lanczos) to width×height and encoded as JPEG."""
    im = Image.fromarray(photo(name)).resize((width, height), Image.Resampling.LANCZOS)
    return encode(im, "JPEG", quality=quality)


def synthetic_rgb(width: int, height: int, seed: int = 0) -> np.ndarray:
    """Smooth gradients plus a little noise and hard edges: photo-like, not pure noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    r = 127 + 120 * np.sin(x / max(width, 1) * 6.3)
    g = 127 + 120 * np.cos(y / max(height, 1) * 4.1)
    b = (x + y) % 256
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 8, (height, width, 3))
    img[height // 3 : height // 2, width // 4 : width // 2] = (250, 20, 30)
    return np.clip(img, 0, 255).astype(np.uint8)


def with_orientation(jpeg_source: Image.Image, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(jpeg_source, "JPEG", quality=92, exif=exif.tobytes())


@pytest.fixture(scope="session")
def photo_12mp() -> bytes:
    return photo_jpeg("astronaut", 4000, 3000)
