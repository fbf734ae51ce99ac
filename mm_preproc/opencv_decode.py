"""Decoding with OpenCV, including its reduced (1/2, 1/4, 1/8) JPEG decode.

OpenCV ships its own, newer libjpeg-turbo, libpng and libwebp. Decoding straight to RGB
(``IMREAD_COLOR_RGB``) gives pixel-identical results to Pillow for JPEG (any chroma subsampling,
progressive, gray; full and reduced scale), 8/16-bit RGB and 8-bit gray PNG, and BMP — checked
by the tests — and is often faster. It also decodes WebP, which pillow-simd builds often lack.
RGBA WebP/PNG are composited over white here with the exact integer formula Pillow's ``paste``
uses, so the result matches qwen-vl-utils' ``to_rgb``. EXIF orientation is left to the pipeline.
"""

from __future__ import annotations

import cv2
import numpy as np

from mm_preproc.decode import ImageHeader
from mm_preproc.errors import CorruptImageError

_REDUCED_FLAG = {1: 0, 2: cv2.IMREAD_REDUCED_GRAYSCALE_2, 4: cv2.IMREAD_REDUCED_GRAYSCALE_4}
_REDUCED_FLAG[8] = cv2.IMREAD_REDUCED_GRAYSCALE_8
_OPAQUE = frozenset({("JPEG", "RGB"), ("JPEG", "L"), ("MPO", "RGB"), ("PNG", "RGB"), ("PNG", "L")})
_OPAQUE |= {("BMP", "RGB"), ("WEBP", "RGB")}
_WITH_ALPHA = frozenset({("PNG", "RGBA"), ("WEBP", "RGBA")})


def can_decode(header: ImageHeader) -> bool:
    """Whether OpenCV reproduces Pillow's decode + qwen-vl-utils' RGB conversion here."""
    key = (header.format, header.mode)
    return key in _OPAQUE or key in _WITH_ALPHA


def over_white(rgba: np.ndarray) -> np.ndarray:
    """Composite RGBA over white exactly as ``Image.paste(im, mask=alpha)`` does (DIV255)."""
    alpha = rgba[:, :, 3:4].astype(np.uint32)
    blended = rgba[:, :, :3].astype(np.uint32) * alpha + 255 * (255 - alpha) + 128
    return (((blended >> 8) + blended) >> 8).astype(np.uint8)


def jpeg_is_complete(data: bytes) -> bool:
    """A JPEG's end-of-image marker follows its last start-of-scan marker.

    libjpeg only warns about a premature end (and OpenCV then returns grey-filled pixels),
    while Pillow refuses the image; this check makes both refuse. In entropy-coded data 0xFF is
    always stuffed, so FFD9 after the last FFDA is the real end marker (an EXIF thumbnail's
    markers come earlier).
    """
    return data.rfind(b"\xff\xd9") > data.rfind(b"\xff\xda") >= 0


def decode_opencv(data: bytes, header: ImageHeader, scale: int) -> np.ndarray:
    """Decode to an H×W×3 RGB uint8 array in stored orientation, at 1/``scale`` (JPEG only)."""
    if header.format in ("JPEG", "MPO") and not jpeg_is_complete(data):
        raise CorruptImageError("cannot decode JPEG image: the data is truncated (no end marker)")
    alpha = (header.format, header.mode) in _WITH_ALPHA
    if alpha:
        flags = cv2.IMREAD_UNCHANGED | cv2.IMREAD_IGNORE_ORIENTATION
    else:
        flags = cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION | _REDUCED_FLAG[scale]
    try:
        image = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flags)
    except cv2.error as e:
        raise CorruptImageError(f"cannot decode {header.format} image: {e}") from e
    expected = (-(-header.stored_height // scale), -(-header.stored_width // scale))
    if image is None or image.shape[:2] != expected or image.dtype != np.uint8:
        raise CorruptImageError(f"cannot decode {header.format} image: truncated or corrupt data")
    if alpha:
        if image.ndim != 3 or image.shape[2] != 4:
            raise CorruptImageError(f"cannot decode {header.format} image: unexpected channels")
        image = over_white(cv2.cvtColor(image, cv2.COLOR_BGRA2RGBA))
    return image
