"""Decoding with OpenCV, including its reduced (1/2, 1/4, 1/8) JPEG decode.

OpenCV links its own libjpeg-turbo; decoding straight to RGB (``IMREAD_COLOR_RGB``) gives the
same pixels as Pillow for baseline RGB/gray JPEGs, at full and reduced scale. It is used only
where that holds: JPEG/PNG/WebP/BMP sources whose header says RGB or L (no alpha, palette,
CMYK or 16-bit, whose conversion must follow qwen-vl-utils through Pillow). EXIF orientation is
ignored here and applied by the pipeline, as for Pillow.
"""

from __future__ import annotations

import cv2
import numpy as np

from mm_preproc.decode import ImageHeader
from mm_preproc.errors import CorruptImageError

_REDUCED_FLAG = {1: 0, 2: 16, 4: 32, 8: 64}
_FORMATS = frozenset({"JPEG", "MPO", "PNG", "WEBP", "BMP"})
_MODES = frozenset({"RGB", "L"})


def can_decode(header: ImageHeader) -> bool:
    """Whether OpenCV reproduces Pillow's decode + qwen-vl-utils' RGB conversion for this image."""
    return header.format in _FORMATS and header.mode in _MODES


def decode_opencv(
    data: bytes | bytearray | memoryview, header: ImageHeader, scale: int
) -> np.ndarray:
    """Decode to an H×W×3 RGB uint8 array in stored orientation, at 1/``scale`` for JPEG."""
    flags = cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION | _REDUCED_FLAG[scale]
    buf = np.frombuffer(data, dtype=np.uint8)
    image = cv2.imdecode(buf, flags)
    expected = (
        -(-header.stored_height // scale),
        -(-header.stored_width // scale),
    )
    if image is None or image.shape[:2] != expected:
        raise CorruptImageError(f"cannot decode {header.format} image: truncated or corrupt data")
    return image
