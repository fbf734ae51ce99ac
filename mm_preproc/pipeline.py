"""``preprocess``: one image from its source to Qwen2-VL ``pixel_values``, timed per stage.

The stages, in order: probe the header (target size, bomb check) → decode (JPEG at a DCT-domain
scale when ``fast_decode``) → colour (EXIF orientation, mode → RGB as qwen-vl-utils does) →
resize (antialiased bicubic) → patchify (uint8 gather into patch order) → normalize (float32,
into ``out``). The faithful path (``fast_decode=False``) does exactly what vLLM's loader plus
transformers' processor do and matches them within float32 rounding; the fast path decodes
JPEGs smaller and orients after resizing, which changes pixels by a fraction of a grey level.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
from PIL import Image

from mm_preproc import opencv_decode
from mm_preproc.constants import DEFAULT_MAX_PIXELS, DEFAULT_MAX_SOURCE_PIXELS, DEFAULT_MIN_PIXELS
from mm_preproc.decode import (
    ImageHeader,
    Source,
    apply_orientation,
    decode,
    draft_scale,
    from_array,
    open_source,
    to_rgb,
)
from mm_preproc.errors import InvalidArgumentError
from mm_preproc.layout import OutputFormat, grid_thw
from mm_preproc.patchify import check_out, normalize_into, patch_order, repeat_into
from mm_preproc.resize import resize_opencv, resize_pillow
from mm_preproc.smart_resize import target_size
from mm_preproc.timing import StageTimings, Stopwatch


class Backend(Enum):
    """Which library decodes and resizes. ``AUTO`` picks the fastest within the fidelity bound."""

    AUTO = "auto"
    PILLOW = "pillow"
    OPENCV = "opencv"


@dataclass(slots=True, frozen=True)
class PreprocOptions:
    """Everything that decides the output for one image; validated on construction."""

    min_pixels: int = DEFAULT_MIN_PIXELS
    max_pixels: int = DEFAULT_MAX_PIXELS
    resized_height: int | None = None
    resized_width: int | None = None
    backend: Backend = Backend.AUTO
    fast_decode: bool = True
    output: OutputFormat = OutputFormat.FLOAT32
    max_source_pixels: int = DEFAULT_MAX_SOURCE_PIXELS

    def __post_init__(self) -> None:
        if not isinstance(self.backend, Backend):
            try:
                object.__setattr__(self, "backend", Backend(self.backend))
            except ValueError:
                names = ", ".join(b.value for b in Backend)
                raise InvalidArgumentError(
                    f"unknown backend {self.backend!r}; choose one of {names}"
                ) from None
        if not isinstance(self.output, OutputFormat):
            try:
                object.__setattr__(self, "output", OutputFormat(self.output))
            except ValueError:
                names = ", ".join(f.value for f in OutputFormat)
                raise InvalidArgumentError(
                    f"unknown output format {self.output!r}; choose one of {names}"
                ) from None
        if self.min_pixels <= 0 or self.max_pixels <= 0:
            raise InvalidArgumentError("min_pixels and max_pixels must be positive")
        if self.min_pixels > self.max_pixels:
            raise InvalidArgumentError(
                f"min_pixels ({self.min_pixels}) must not exceed max_pixels ({self.max_pixels})"
            )
        if (self.resized_height is None) != (self.resized_width is None):
            raise InvalidArgumentError("give both resized_height and resized_width, or neither")
        for name in ("resized_height", "resized_width"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InvalidArgumentError(f"{name} must be positive, got {value}")
        if self.max_source_pixels <= 0:
            raise InvalidArgumentError("max_source_pixels must be positive")


@dataclass(slots=True)
class PreprocResult:
    """Model-ready arrays for one image, with sizes and per-stage timings.

    ``pixel_values`` is (patches, 1176) float32 (or uint8 / H×W×3 for the other output formats);
    ``image_grid_thw`` is a (1, 3) int64 array as transformers returns it; ``image`` is the
    resized RGB uint8 image, H×W×3.
    """

    pixel_values: np.ndarray
    image_grid_thw: np.ndarray
    image: np.ndarray
    source_height: int
    source_width: int
    target_height: int
    target_width: int
    decoded_height: int
    decoded_width: int
    format: str
    backend: Backend
    timings: StageTimings = field(default_factory=StageTimings)


def preprocess(
    source: Source,
    *,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    resized_height: int | None = None,
    resized_width: int | None = None,
    backend: Backend | str = Backend.AUTO,
    fast_decode: bool = True,
    out: np.ndarray | None = None,
    output: OutputFormat | str = OutputFormat.FLOAT32,
    max_source_pixels: int = DEFAULT_MAX_SOURCE_PIXELS,
    options: PreprocOptions | None = None,
) -> PreprocResult:
    """Decode, resize, normalize and patchify one image for Qwen2-VL.

    ``source`` is encoded bytes (JPEG, PNG, WebP, GIF — first frame, BMP, TIFF), a file path, a
    PIL image or an H×W[×3|×4] uint8 numpy array (RGB order). ``out``, when given, is a
    C-contiguous array (e.g. a view of shared memory) of the shape and dtype
    :func:`mm_preproc.output_spec` gives for the target size; the result's ``pixel_values``
    is a view of it. ``options`` replaces all the keyword settings at once.
    """
    if options is None:
        options = PreprocOptions(
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            resized_height=resized_height,
            resized_width=resized_width,
            backend=backend,  # type: ignore[arg-type]  # validated/coerced in __post_init__
            fast_decode=fast_decode,
            output=output,  # type: ignore[arg-type]
            max_source_pixels=max_source_pixels,
        )
    timings = StageTimings()
    watch = Stopwatch()
    image, header, chosen, decoded_hw, th, tw = _decode_and_resize(source, options, timings, watch)
    timings.pixels_out = th * tw
    result_out = check_out(out, th, tw, options.output)
    if options.output is OutputFormat.IMAGE:
        np.copyto(result_out, image)
        pixel_values = image = result_out
        timings.patchify_s = watch.lap()
    else:
        patches = patch_order(image)
        timings.patchify_s = watch.lap()
        if options.output is OutputFormat.FLOAT32:
            pixel_values = normalize_into(patches, result_out)
        else:
            pixel_values = repeat_into(patches, result_out)
        timings.normalize_s = watch.lap()
    return PreprocResult(
        pixel_values=pixel_values,
        image_grid_thw=np.array([grid_thw(th, tw)], dtype=np.int64),
        image=image,
        source_height=header.height,
        source_width=header.width,
        target_height=th,
        target_width=tw,
        decoded_height=decoded_hw[0],
        decoded_width=decoded_hw[1],
        format=header.format,
        backend=chosen,
        timings=timings,
    )


def _in_memory_header(im: Image.Image, fmt: str) -> ImageHeader:
    w, h = im.size
    return ImageHeader(w, h, fmt, im.mode, 1, w, h)


def _decode_and_resize(
    source: Source, options: PreprocOptions, timings: StageTimings, watch: Stopwatch
) -> tuple[np.ndarray, ImageHeader, Backend, tuple[int, int], int, int]:
    """Return (resized RGB uint8 image, header, backend used, decoded (h, w), target h, w)."""
    if isinstance(source, np.ndarray):
        im = from_array(source)
        header = _in_memory_header(im, "ARRAY")
    elif isinstance(source, Image.Image):
        im = source
        header = _in_memory_header(im, str(source.format or "PIL"))
    else:
        if isinstance(source, (bytes, bytearray, memoryview)):
            timings.bytes_in = len(source)
        else:
            timings.bytes_in = os.path.getsize(os.fspath(source)) if os.path.exists(source) else 0
        im, header = open_source(source, options.max_source_pixels)
    timings.pixels_in = header.pixels
    th, tw = target_size(
        header.height,
        header.width,
        min_pixels=options.min_pixels,
        max_pixels=options.max_pixels,
        resized_height=options.resized_height,
        resized_width=options.resized_width,
    )
    if _use_opencv(options.backend, source, header):
        assert isinstance(source, (bytes, bytearray, memoryview))
        im.close()
        array, decoded_hw = _opencv_path(source, header, th, tw, options, timings, watch)
        return array, header, Backend.OPENCV, decoded_hw, th, tw
    array, decoded_hw = _pillow_path(im, header, th, tw, options, timings, watch)
    return array, header, Backend.PILLOW, decoded_hw, th, tw


def _use_opencv(backend: Backend, source: Source, header: ImageHeader) -> bool:
    """OpenCV decodes encoded bytes of plain RGB/gray images; everything else goes to Pillow."""
    if backend is Backend.PILLOW or backend is Backend.AUTO:
        return False
    return isinstance(source, (bytes, bytearray, memoryview)) and opencv_decode.can_decode(header)


def _pillow_path(
    im: Image.Image,
    header: ImageHeader,
    th: int,
    tw: int,
    options: PreprocOptions,
    timings: StageTimings,
    watch: Stopwatch,
) -> tuple[np.ndarray, tuple[int, int]]:
    fast = options.fast_decode
    im = decode(im, header, th, tw, fast)
    decoded_hw = (im.size[1], im.size[0])
    timings.pixels_decoded = im.size[0] * im.size[1]
    timings.decode_s = watch.lap()
    if fast:
        # Resize in stored orientation, then orient the small image (cheaper, ±1 grey level).
        im = to_rgb(im)
        timings.color_s = watch.lap()
        swap = header.orientation in (5, 6, 7, 8)
        im = resize_pillow(im, tw if swap else th, th if swap else tw)
        timings.resize_s = watch.lap()
        im = apply_orientation(im, header.orientation)
        image = np.asarray(im)
        timings.color_s += watch.lap()
    else:
        im = to_rgb(apply_orientation(im, header.orientation))
        timings.color_s = watch.lap()
        im = resize_pillow(im, th, tw)
        image = np.asarray(im)
        timings.resize_s = watch.lap()
    return image, decoded_hw


def _opencv_path(
    data: bytes | bytearray | memoryview,
    header: ImageHeader,
    th: int,
    tw: int,
    options: PreprocOptions,
    timings: StageTimings,
    watch: Stopwatch,
) -> tuple[np.ndarray, tuple[int, int]]:
    scale = draft_scale(header, th, tw) if options.fast_decode else 1
    array = opencv_decode.decode_opencv(data, header, scale)
    decoded_hw = (array.shape[0], array.shape[1])
    timings.pixels_decoded = array.shape[0] * array.shape[1]
    timings.decode_s = watch.lap()
    swap = header.orientation in (5, 6, 7, 8)
    array = resize_opencv(array, tw if swap else th, th if swap else tw)
    timings.resize_s = watch.lap()
    array = _orient_array(array, header.orientation)
    timings.color_s = watch.lap()
    return array, decoded_hw


def _orient_array(array: np.ndarray, orientation: int) -> np.ndarray:
    """numpy equivalent of :func:`mm_preproc.decode.apply_orientation` (returns a copy)."""
    ops = {
        2: lambda a: a[:, ::-1],
        3: lambda a: a[::-1, ::-1],
        4: lambda a: a[::-1],
        5: lambda a: a.transpose(1, 0, 2),
        6: lambda a: np.rot90(a, -1),
        7: lambda a: np.rot90(a, 1)[::-1, ::-1],
        8: lambda a: np.rot90(a, 1),
    }
    op = ops.get(orientation)
    return array if op is None else np.ascontiguousarray(op(array))
