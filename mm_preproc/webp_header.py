"""Width, height and alpha of a WebP file from its first 30 bytes.

Pillow built without libwebp (as pillow-simd often is) cannot even open a WebP file, so the
header is read here and the pixels are decoded by OpenCV. Layout (RIFF container): ``RIFF`` size
``WEBP``, then one of three chunks — ``VP8 `` (lossy: 14-bit sizes after a 3-byte start code),
``VP8L`` (lossless: 14-bit sizes minus one, packed after a 0x2f signature byte) or ``VP8X``
(extended: 24-bit sizes minus one, and an alpha flag).
"""

from __future__ import annotations


def is_webp(data: bytes) -> bool:
    return len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP"


def webp_size(data: bytes) -> tuple[int, int, bool] | None:
    """Return ``(width, height, has_alpha)``, or ``None`` if the header is not a valid WebP."""
    if not is_webp(data) or len(data) < 30:
        return None
    chunk = data[12:16]
    body = data[20:30]
    if chunk == b"VP8 ":
        if body[3:6] != b"\x9d\x01\x2a":
            return None
        width = int.from_bytes(body[6:8], "little") & 0x3FFF
        height = int.from_bytes(body[8:10], "little") & 0x3FFF
        return width, height, False
    if chunk == b"VP8L":
        if body[0] != 0x2F:
            return None
        bits = int.from_bytes(body[1:5], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1, bool((bits >> 28) & 1)
    if chunk == b"VP8X":
        flags = body[0]
        width = int.from_bytes(body[4:7], "little") + 1
        height = int.from_bytes(body[7:10], "little") + 1
        return width, height, bool(flags & 0x10)
    return None
