"""``preprocess``: one image from its source to Qwen-VL ``pixel_values``, timed per stage.

The model family's numbers (patch, merge and temporal patch size, mean/std, pixel bounds) come
from ``spec`` (:mod:`mm_preproc.spec`; Qwen2-VL's by default, :func:`mm_preproc.read_spec` for a
model folder): every stage below, the fast ones included, works for any spec.

The stages, in order: read the header (target size, bomb check) → decode (JPEG at a DCT-domain
scale when ``fast_decode``) → colour (mode → RGB as qwen-vl-utils does; EXIF orientation) →
resize (antialiased bicubic) → patchify (uint8 gather into patch order) → normalize (float32,
into ``out``).

The faithful path (``fast_decode=False``) does exactly what vLLM's loader plus transformers'
processor do and matches them within float32 rounding. The fast path decodes JPEGs smaller and
orients after resizing; that moves pixels by a fraction of a grey level on average.

Backends: ``pillow`` decodes and resizes with Pillow (pillow-simd when installed); ``opencv``
decodes and resizes with OpenCV (its resize filters differ from the model's, so it is only
within the fast-path bound); ``auto`` decodes and resizes with Pillow — measured the fastest
exact choice here — and decodes with OpenCV only what the Pillow build cannot open (WebP, which
pillow-simd builds often lack; OpenCV's libwebp gives the same pixels).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from mm_preproc import opencv_decode
from mm_preproc.constants import DEFAULT_MAX_SOURCE_PIXELS
from mm_preproc.decode import (
    ImageHeader,
    Source,
    apply_orientation,
    decode,
    draft_scale,
    from_array,
    open_bytes,
    read_source,
    swaps_axes,
    to_rgb,
)
from mm_preproc.errors import InvalidArgumentError
from mm_preproc.layout import OutputFormat, grid_thw
from mm_preproc.options import Backend, PreprocOptions
from mm_preproc.orientation import orient_array
from mm_preproc.pack import pack_rgb_into
from mm_preproc.patchify import (
    check_out,
    native_available,
    normalize_image_into,
    normalize_into,
    patch_planes,
    repeat_into,
)
from mm_preproc.pil_view import rgbx_view
from mm_preproc.resize import resize_opencv, resize_pillow
from mm_preproc.smart_resize import target_size
from mm_preproc.spec import QWEN2_VL, PreprocSpec
from mm_preproc.timing import StageTimings, Stopwatch


@dataclass(slots=True)
class PreprocResult:
    """Model-ready arrays for one image, with sizes and per-stage timings.

    ``pixel_values`` is (patches, spec.patch_dim) float32 — 1176 values for Qwen2-VL, 1536 for
    Qwen3-VL — (uint8 for ``OutputFormat.UINT8``; the H×W×3
    image for ``OutputFormat.IMAGE``); ``image_grid_thw`` is a (1, 3) int64 array as
    transformers returns it; ``image`` is the resized RGB uint8 image, H×W×3 (read-only when it
    is Pillow's buffer). Heights and widths
    are as displayed (after EXIF orientation); ``decoded_*`` is what the decoder produced (in the
    file's stored orientation), smaller than the source when JPEG DCT scaling was used.
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
    decoder: Backend
    resizer: Backend
    timings: StageTimings = field(default_factory=StageTimings)


def preprocess(
    source: Source,
    *,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    resized_height: int | None = None,
    resized_width: int | None = None,
    backend: Backend | str = Backend.AUTO,
    fast_decode: bool = True,
    out: np.ndarray | None = None,
    output: OutputFormat | str = OutputFormat.FLOAT32,
    max_source_pixels: int = DEFAULT_MAX_SOURCE_PIXELS,
    spec: PreprocSpec = QWEN2_VL,
    options: PreprocOptions | None = None,
) -> PreprocResult:
    """Decode, resize, normalize and patchify one image for a Qwen-VL model (``spec``).

    ``min_pixels``/``max_pixels`` default to the spec's bounds.

    ``source`` is encoded bytes (JPEG, PNG, WebP, GIF — first frame, BMP, TIFF), a file path, a
    PIL image or an H×W[×3|×4] uint8 numpy array (RGB order; PIL images and arrays are taken as
    displayed, without EXIF orientation). ``out``, when given, is a C-contiguous array (e.g. a
    view of shared memory) with the size and dtype :func:`mm_preproc.output_spec` gives for the
    target; ``pixel_values`` is then a view of it. ``options`` replaces the keyword settings.
    """
    if options is None:
        options = PreprocOptions(
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            resized_height=resized_height,
            resized_width=resized_width,
            backend=backend,  # type: ignore[arg-type]  # coerced in __post_init__
            fast_decode=fast_decode,
            output=output,  # type: ignore[arg-type]
            max_source_pixels=max_source_pixels,
            spec=spec,
        )
    spec = options.spec
    timings = StageTimings()
    watch = Stopwatch()
    frame = _Frame.load(source, options, timings)
    th, tw = frame.target
    target = check_out(out, th, tw, options.output, spec)  # fail before decoding
    pixels = frame.decode_and_resize(options, timings, watch)
    image = pixels[:, :, :3]  # a view when pixels is Pillow's RGBX memory
    timings.pixels_out = th * tw
    if options.output is OutputFormat.IMAGE:
        pack_rgb_into(target, pixels)
        pixel_values = image = target
        timings.patchify_s = watch.lap()
    elif options.output is OutputFormat.FLOAT32 and native_available():
        # one native pass: patchify and normalize together, counted as normalize_s
        pixel_values = normalize_image_into(pixels, target, spec)
        timings.normalize_s = watch.lap()
    else:
        patches = patch_planes(pixels, spec)
        timings.patchify_s = watch.lap()
        if options.output is OutputFormat.FLOAT32:
            pixel_values = normalize_into(patches, target, spec)
        else:
            pixel_values = repeat_into(patches, target, spec)
        timings.normalize_s = watch.lap()
    return PreprocResult(
        pixel_values=pixel_values,
        image_grid_thw=np.array([grid_thw(th, tw, spec)], dtype=np.int64),
        image=image,
        source_height=frame.header.height,
        source_width=frame.header.width,
        target_height=th,
        target_width=tw,
        decoded_height=frame.decoded_hw[0],
        decoded_width=frame.decoded_hw[1],
        format=frame.header.format,
        decoder=frame.decoder,
        resizer=Backend.OPENCV if options.backend is Backend.OPENCV else Backend.PILLOW,
        timings=timings,
    )


def decoder_for(header: ImageHeader, backend: Backend, pillow_can_open: bool) -> Backend:
    """Which library decodes an encoded image.

    OpenCV decodes everything it can under ``opencv``, and otherwise only what this Pillow build
    cannot open (WebP here). Under ``auto`` the rest stays with Pillow: OpenCV decodes JPEG and
    PNG no faster here (measured, docs/mm_preproc.md), and a Pillow decode feeds the Pillow
    resize without an array → image copy.
    """
    if not opencv_decode.can_decode(header):
        return Backend.PILLOW
    if backend is Backend.OPENCV or not pillow_can_open:
        return Backend.OPENCV
    return Backend.PILLOW


@dataclass(slots=True)
class _Frame:
    """One image on its way through the stages."""

    header: ImageHeader
    target: tuple[int, int]
    data: bytes | None  # encoded bytes (None for PIL/array sources)
    pil: Image.Image | None  # lazily opened (or given) Pillow image
    decoder: Backend = Backend.PILLOW
    decoded_hw: tuple[int, int] = (0, 0)

    @classmethod
    def load(cls, source: Source, options: PreprocOptions, timings: StageTimings) -> _Frame:
        data: bytes | None = None
        pil: Image.Image | None
        if isinstance(source, np.ndarray):
            pil = from_array(source)
            header = _in_memory_header(pil, "ARRAY")
        elif isinstance(source, Image.Image):
            pil = source
            header = _in_memory_header(pil, str(source.format or "PIL"))
        elif isinstance(source, (bytes, bytearray, memoryview, str, os.PathLike)):
            data = read_source(source)
            timings.bytes_in = len(data)
            pil, header = open_bytes(data, options.max_source_pixels)
        else:
            raise InvalidArgumentError(
                f"unsupported source type {type(source).__name__}; pass bytes, a path, "
                "a PIL image or a numpy array"
            )
        timings.pixels_in = header.pixels
        lo, hi = options.pixel_bounds
        target = target_size(
            header.height,
            header.width,
            min_pixels=lo,
            max_pixels=hi,
            resized_height=options.resized_height,
            resized_width=options.resized_width,
            spec=options.spec,
        )
        return cls(header, target, data, pil)

    def _use_opencv(self, backend: Backend) -> bool:
        if self.data is None:
            return False
        return decoder_for(self.header, backend, self.pil is not None) is Backend.OPENCV

    def decode_and_resize(
        self, options: PreprocOptions, timings: StageTimings, watch: Stopwatch
    ) -> np.ndarray:
        """Decode, convert, orient and resize; returns the H×W×3 uint8 RGB image.

        With Pillow's resize the result is usually H×W×4 instead: a read-only view of the
        resized image's own memory (R, G, B, padding; :func:`rgbx_view`), which saves the
        0.4–0.75 ms copy ``np.asarray`` makes; callers use ``[:, :, :3]`` or give it to
        :func:`patch_planes` / :func:`normalize_image_into` as it is.
        """
        th, tw = self.target
        orientation = self.header.orientation
        fast = options.fast_decode
        scale = draft_scale(self.header, th, tw) if fast else 1
        # Fast path: resize in stored orientation and orient the small result.
        rh, rw = (tw, th) if fast and swaps_axes(orientation) else (th, tw)
        pixels: Image.Image | np.ndarray
        if self._use_opencv(options.backend):
            assert self.data is not None
            if self.pil is not None:
                self.pil.close()
            pixels = opencv_decode.decode_opencv(self.data, self.header, scale)
            self.decoder = Backend.OPENCV
            self.decoded_hw = (pixels.shape[0], pixels.shape[1])
        else:
            if self.pil is None:
                raise InvalidArgumentError(
                    f"this Pillow build cannot decode {self.header.format} "
                    "(use backend='auto' or 'opencv')"
                )
            pixels = decode(self.pil, self.header, scale) if self.data is not None else self.pil
            self.decoded_hw = (pixels.size[1], pixels.size[0])
        timings.pixels_decoded = self.decoded_hw[0] * self.decoded_hw[1]
        timings.decode_s = watch.lap()

        if isinstance(pixels, Image.Image):
            pixels = to_rgb(pixels)
        if not fast:
            pixels = _orient(pixels, orientation)
        timings.color_s = watch.lap()

        if options.backend is Backend.OPENCV:
            array = pixels if isinstance(pixels, np.ndarray) else np.asarray(pixels)
            image = resize_opencv(array, rh, rw)
        else:
            pil = pixels if isinstance(pixels, Image.Image) else Image.fromarray(pixels)
            resized = resize_pillow(pil, rh, rw)
            # Never a view of an image the caller passed in (no resize needed: same object).
            view = rgbx_view(resized) if self.data is not None or resized is not self.pil else None
            image = np.asarray(resized) if view is None else view
        timings.resize_s = watch.lap()

        if fast and orientation != 1:
            image = orient_array(image, orientation)
            timings.color_s += watch.lap()
        return image


def _orient(pixels: Image.Image | np.ndarray, orientation: int) -> Image.Image | np.ndarray:
    if isinstance(pixels, Image.Image):
        return apply_orientation(pixels, orientation)
    return orient_array(pixels, orientation)


def _in_memory_header(im: Image.Image, fmt: str) -> ImageHeader:
    w, h = im.size
    return ImageHeader(w, h, fmt, im.mode, 1, w, h)
