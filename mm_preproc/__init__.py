"""mm_preproc: image bytes → Qwen-VL model inputs, fast, faithful and timed per stage.

The model family's numbers (patch size, merge, mean/std, pixel bounds) are a
:class:`PreprocSpec`: Qwen2-VL's by default, any family's from its model folder::

    spec = mm_preproc.read_spec("models/tiny-qwen3-vl")       # Qwen3-VL: 16-px patches
    r = mm_preproc.preprocess(jpeg_bytes, spec=spec, max_pixels=spec.budget(1280))

>>> import mm_preproc
>>> r = mm_preproc.preprocess(jpeg_bytes, max_pixels=1280 * 28 * 28)   # doctest: +SKIP
>>> r.pixel_values.shape, r.image_grid_thw                               # doctest: +SKIP
((4920, 1176), array([[ 1, 60, 82]]))

To size an output buffer before decoding (e.g. a shared-memory segment)::

    p = mm_preproc.plan(jpeg_bytes, max_pixels=...)       # header only, well under 1 ms
    p.spec.shape, p.spec.dtype, p.spec.nbytes, p.spec.grid_thw
    r = mm_preproc.preprocess(jpeg_bytes, max_pixels=..., out=buffer_view)

(``plan`` is ``probe`` + ``target_size`` + ``output_spec``, which are public too.)

No part of this package imports server code; it needs numpy, Pillow (or pillow-simd) and OpenCV.
"""

from mm_preproc import constants
from mm_preproc.buffers import retain_freed_memory, set_pool_limit
from mm_preproc.decode import SUPPORTED_FORMATS, ImageHeader, probe
from mm_preproc.errors import (
    AspectRatioError,
    CorruptImageError,
    DecompressionBombError,
    EmptyInputError,
    InvalidArgumentError,
    PreprocError,
    UnsupportedFormatError,
)
from mm_preproc.layout import OutputFormat, OutputSpec, grid_thw, output_spec
from mm_preproc.options import Backend, PreprocOptions
from mm_preproc.pipeline import PreprocResult, preprocess
from mm_preproc.plan import Plan, plan
from mm_preproc.resize import pillow_is_simd
from mm_preproc.smart_resize import ResizeRule, smart_resize, target_size
from mm_preproc.spec import PRESETS, Family, PreprocSpec, SpecError, read_spec
from mm_preproc.timing import StageTimings

__all__ = [
    "PRESETS",
    "SUPPORTED_FORMATS",
    "AspectRatioError",
    "Backend",
    "CorruptImageError",
    "DecompressionBombError",
    "EmptyInputError",
    "Family",
    "ImageHeader",
    "InvalidArgumentError",
    "OutputFormat",
    "OutputSpec",
    "Plan",
    "PreprocError",
    "PreprocOptions",
    "PreprocResult",
    "PreprocSpec",
    "ResizeRule",
    "SpecError",
    "StageTimings",
    "UnsupportedFormatError",
    "constants",
    "grid_thw",
    "output_spec",
    "pillow_is_simd",
    "plan",
    "preprocess",
    "probe",
    "read_spec",
    "retain_freed_memory",
    "set_pool_limit",
    "smart_resize",
    "target_size",
]
