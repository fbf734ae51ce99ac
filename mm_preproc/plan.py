"""Plan an image's output from its header alone: size, grid and bytes, before decoding.

A serving frontend receives bytes and must reserve a shared-memory segment for a worker's
result without decoding the image itself (decoding is the worker's job)::

    p = mm_preproc.plan(jpeg_bytes, max_pixels=1280 * 28 * 28)
    segment = SharedMemory(create=True, size=p.spec.nbytes)
    # in the worker:
    out = np.ndarray(p.spec.shape, p.spec.dtype, buffer=segment.buf)
    mm_preproc.preprocess(jpeg_bytes, max_pixels=1280 * 28 * 28, out=out)

``plan`` costs a header parse (tens of microseconds) and raises the same format, emptiness,
decompression-bomb and aspect-ratio errors ``preprocess`` would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mm_preproc.constants import DEFAULT_MAX_SOURCE_PIXELS
from mm_preproc.decode import ImageHeader, probe
from mm_preproc.layout import OutputFormat, OutputSpec, output_spec
from mm_preproc.options import PreprocOptions
from mm_preproc.smart_resize import target_size
from mm_preproc.spec import QWEN2_VL, PreprocSpec


@dataclass(slots=True, frozen=True)
class Plan:
    """What :func:`mm_preproc.preprocess` will produce for an image, known from its header."""

    header: ImageHeader
    target_height: int
    target_width: int
    spec: OutputSpec


def plan(
    source: bytes | bytearray | memoryview | str | os.PathLike[str],
    *,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    resized_height: int | None = None,
    resized_width: int | None = None,
    output: OutputFormat | str = OutputFormat.FLOAT32,
    max_source_pixels: int = DEFAULT_MAX_SOURCE_PIXELS,
    spec: PreprocSpec = QWEN2_VL,
    options: PreprocOptions | None = None,
) -> Plan:
    """Header → target size → output shape/dtype/bytes, with ``preprocess``'s settings."""
    if options is None:
        options = PreprocOptions(
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            resized_height=resized_height,
            resized_width=resized_width,
            output=output,  # type: ignore[arg-type]  # coerced in __post_init__
            max_source_pixels=max_source_pixels,
            spec=spec,
        )
    header = probe(source, options.max_source_pixels)
    lo, hi = options.pixel_bounds
    th, tw = target_size(
        header.height,
        header.width,
        min_pixels=lo,
        max_pixels=hi,
        resized_height=options.resized_height,
        resized_width=options.resized_width,
        spec=options.spec,
    )
    return Plan(header, th, tw, output_spec(th, tw, options.output, options.spec))
