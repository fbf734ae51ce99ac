"""From a source (bytes, path, PIL image, array) to a decoded Pillow image, safely.

Three steps keep a server safe and fast:

1. :func:`probe` reads only the header: format, stored size, mode and EXIF orientation. The
   size after orientation decides the target size, so a frontend can plan output buffers before
   any pixel is decoded, and refuse decompression bombs before they cost memory.
2. :func:`open_bytes` opens the image lazily and checks format and pixel budget.
3. :func:`decode` decodes. For JPEG it can ask libjpeg to decode at 1/2, 1/4 or 1/8 scale in the
   DCT domain (Pillow's ``draft``) when the result is still at least the target size; the exact
   antialiased resize that follows then has less to do. A 12 MP photo bound for a 1 MP target
   decodes at 1/2 scale, in about half the time.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, UnidentifiedImageError

from mm_preproc.constants import DEFAULT_MAX_SOURCE_PIXELS, DRAFT_MIN_RATIO
from mm_preproc.errors import (
    CorruptImageError,
    DecompressionBombError,
    EmptyInputError,
    InvalidArgumentError,
    UnsupportedFormatError,
)
from mm_preproc.webp_header import is_webp, webp_size

Source = bytes | bytearray | memoryview | str | os.PathLike[str] | Image.Image | np.ndarray

# Pillow format names accepted. MPO is what Pillow calls JPEGs from phones that carry a second,
# embedded image (its first frame is the ordinary JPEG).
SUPPORTED_FORMATS: tuple[str, ...] = ("JPEG", "MPO", "PNG", "WEBP", "GIF", "BMP", "TIFF")
JPEG_FORMATS = frozenset({"JPEG", "MPO"})

# Orientations 5..8 swap width and height.
_SWAPS_AXES = frozenset({5, 6, 7, 8})
_EXIF_ORIENTATION_TAG = 0x0112
_TRANSPOSE_FOR_ORIENTATION = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}

# First bytes of formats people send that we do not decode, for a clearer message.
_KNOWN_SIGNATURES: tuple[tuple[bytes, int, str], ...] = (
    (b"ftypheic", 4, "HEIC"),
    (b"ftypheix", 4, "HEIC"),
    (b"ftypmif1", 4, "HEIF"),
    (b"ftypavif", 4, "AVIF"),
    (b"%PDF", 0, "PDF"),
    (b"8BPS", 0, "PSD"),
    (b"\x00\x00\x01\x00", 0, "ICO"),
    (b"\xff\x0a", 0, "JPEG XL"),
    (b"<svg", 0, "SVG"),
    (b"<?xml", 0, "XML/SVG"),
)
_OUR_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF8", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)


@dataclass(slots=True, frozen=True)
class ImageHeader:
    """What the header says, before decoding. ``width``/``height`` are as displayed (after EXIF
    orientation); ``stored_width``/``stored_height`` as encoded."""

    width: int
    height: int
    format: str
    mode: str
    orientation: int
    stored_width: int
    stored_height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


def _pillow_formats() -> list[str]:
    """The supported formats this Pillow build registers (pillow-simd may lack WEBP, MPO)."""
    Image.init()
    return [f for f in SUPPORTED_FORMATS if f in Image.OPEN]


def read_source(source: bytes | bytearray | memoryview | str | os.PathLike[str]) -> bytes:
    """The encoded bytes of a source: the buffer itself, or the file's contents."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = source if isinstance(source, bytes) else bytes(source)
        if len(data) == 0:
            raise EmptyInputError("the image is empty (0 bytes)")
        return data
    path = os.fspath(source)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InvalidArgumentError(f"cannot read image file {path!r}: {e.strerror}") from e
    if len(data) == 0:
        raise EmptyInputError(f"the image file {path!r} is empty (0 bytes)")
    return data


def _sniff_unsupported(head: bytes) -> str:
    for sig, offset, name in _KNOWN_SIGNATURES:
        if head[offset : offset + len(sig)] == sig:
            return f"{name} images are not supported"
    for sig, name in _OUR_SIGNATURES:
        if head.startswith(sig):
            return f"the data starts like a {name} file but its header is corrupt"
    if is_webp(head):
        return "the data starts like a WEBP file but its header is corrupt"
    return "unknown image format"


def _orientation(im: Image.Image) -> int:
    try:
        value = im.getexif().get(_EXIF_ORIENTATION_TAG, 1)
    except Exception:  # malformed EXIF must not fail the image; Pillow raises many kinds
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _check_budget(width: int, height: int, max_source_pixels: int) -> None:
    if width <= 0 or height <= 0:
        raise EmptyInputError(f"the image has no pixels ({width}x{height})")
    if width * height > max_source_pixels:
        raise DecompressionBombError(
            f"image has {width}x{height} = {width * height} pixels, more than the limit of "
            f"{max_source_pixels}; refused before decoding"
        )


def open_bytes(
    data: bytes, max_source_pixels: int = DEFAULT_MAX_SOURCE_PIXELS
) -> tuple[Image.Image | None, ImageHeader]:
    """Open lazily (header only) and check format and pixel budget; nothing is decoded yet.

    Returns the lazily opened Pillow image, or ``None`` for a WebP file this Pillow build
    cannot open (its header is then read by :mod:`mm_preproc.webp_header`).
    """
    if len(data) == 0:
        raise EmptyInputError("the image is empty (0 bytes)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            # "could not be identified because WEBP support not installed": handled below.
            warnings.filterwarnings(
                "ignore", message=".*support not installed", category=UserWarning
            )
            im = Image.open(io.BytesIO(data), formats=_pillow_formats())
    except Image.DecompressionBombError as e:
        raise DecompressionBombError(f"image refused before decoding: {e}") from e
    except UnidentifiedImageError as e:
        webp = webp_size(data)
        if webp is not None:
            _check_budget(webp[0], webp[1], max_source_pixels)
            mode = "RGBA" if webp[2] else "RGB"
            return None, ImageHeader(webp[0], webp[1], "WEBP", mode, 1, webp[0], webp[1])
        reason = _sniff_unsupported(data[:16])
        allowed = ", ".join(f for f in SUPPORTED_FORMATS if f != "MPO")
        error = CorruptImageError if "corrupt" in reason else UnsupportedFormatError
        raise error(f"cannot read image: {reason} (supported: {allowed})") from e
    except Exception as e:  # untrusted data: any parser failure means a corrupt header
        raise CorruptImageError(f"cannot read image header: {type(e).__name__}: {e}") from e
    w, h = im.size
    _check_budget(w, h, max_source_pixels)
    orientation = _orientation(im)
    dw, dh = (h, w) if orientation in _SWAPS_AXES else (w, h)
    return im, ImageHeader(dw, dh, str(im.format), im.mode, orientation, w, h)


def probe(
    source: bytes | bytearray | memoryview | str | os.PathLike[str],
    max_source_pixels: int = DEFAULT_MAX_SOURCE_PIXELS,
) -> ImageHeader:
    """Read the header only (well under a millisecond): displayed size, format, mode, EXIF
    orientation.

    Raises the same errors as :func:`mm_preproc.preprocess` would for format, emptiness and
    decompression bombs (corrupt pixel data is only found when decoding).
    """
    im, header = open_bytes(read_source(source), max_source_pixels)
    if im is not None:
        im.close()
    return header


def draft_scale(header: ImageHeader, target_height: int, target_width: int) -> int:
    """The JPEG DCT-domain downscale (1, 2, 4 or 8) for a target size.

    Scale ``s`` is used when the image decoded at 1/s is still at least
    ``DRAFT_MIN_RATIO[s]`` times the target on each side: the antialiased resize that follows
    then has enough to work with, and the result stays within the fast path's fidelity bound
    (see docs/mm_preproc.md for measured differences).
    """
    if header.format not in JPEG_FORMATS:
        return 1
    for scale in (8, 4, 2):
        ratio = min(header.width / scale / target_width, header.height / scale / target_height)
        if ratio >= DRAFT_MIN_RATIO[scale]:
            return scale
    return 1


def decode(im: Image.Image, header: ImageHeader, scale: int) -> Image.Image:
    """Decode the pixels (first frame); JPEGs at 1/``scale`` in the DCT domain."""
    try:
        if scale > 1:
            # Pillow picks the largest scale s with size // request >= s; floor requests make
            # that exactly `scale`.
            im.draft(im.mode, (header.stored_width // scale, header.stored_height // scale))
        im.load()
    except Exception as e:  # untrusted data: any decoder failure means corrupt pixel data
        raise CorruptImageError(f"cannot decode {header.format} image: {e}") from e
    return im


def swaps_axes(orientation: int) -> bool:
    """Orientations 5..8 display the image rotated by 90°: width and height swap."""
    return orientation in _SWAPS_AXES


def apply_orientation(im: Image.Image, orientation: int) -> Image.Image:
    """Rotate/flip so the pixels are as displayed (vLLM applies EXIF orientation too)."""
    method = _TRANSPOSE_FOR_ORIENTATION.get(orientation)
    return im if method is None else im.transpose(method)


def to_rgb(im: Image.Image) -> Image.Image:
    """Convert any mode to RGB exactly like qwen-vl-utils' ``to_rgb``.

    RGBA is composited onto white; every other mode (L, LA, P, PA, CMYK, I;16, I, F, YCbCr...)
    goes through Pillow's ``convert("RGB")`` — which, like qwen-vl-utils, drops the alpha of LA
    and PA and clips 16-bit values above 255.
    """
    if im.mode == "RGB":
        return im
    try:
        if im.mode == "RGBA":
            background = Image.new("RGB", im.size, (255, 255, 255))
            background.paste(im, mask=im.getchannel("A"))
            return background
        return im.convert("RGB")
    except (ValueError, ImportError, OSError) as e:  # e.g. LAB without littlecms
        raise UnsupportedFormatError(f"cannot convert a {im.mode} image to RGB: {e}") from e


def from_array(array: np.ndarray) -> Image.Image:
    """A Pillow image from an H×W (gray), H×W×3 (RGB) or H×W×4 (RGBA) uint8 array."""
    if array.dtype != np.uint8:
        raise InvalidArgumentError(f"numpy images must be uint8, got {array.dtype}")
    if array.size == 0:
        raise EmptyInputError(f"the image array has no pixels (shape {array.shape})")
    if array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (1, 3, 4)):
        if array.ndim == 3 and array.shape[2] == 1:
            array = array[:, :, 0]
        return Image.fromarray(np.ascontiguousarray(array))
    raise InvalidArgumentError(
        f"numpy images must be HxW, HxWx3 (RGB) or HxWx4 (RGBA); got shape {array.shape}"
    )
