"""One image job: bytes → ready-sized RGB pixels, with stage timestamps. Runs in a worker
process (split mode) or on the frontend's event loop (inline mode) — the same code either way.

What is computed here and what is left to vLLM: vLLM 0.32's Qwen2-VL accepts images as pixels
(or as precomputed ``image_embeds``), not as normalized patches. So the worker runs
:func:`mm_preproc.preprocess` with ``output=IMAGE`` — the expensive, size-dependent part: decode
(JPEGs in the DCT domain at 1/2…1/8 scale when the target is small enough), EXIF orientation,
color conversion and the antialiased resize to the exact ``smart_resize`` target — writing a
``target_h × target_w × 3`` uint8 array straight into the output segment (sized beforehand from
the header alone, :func:`mm_preproc.probe`). vLLM's own
processor then only rescales, normalizes and patchifies an image that is already the right size
(its resize becomes a no-op because the server passes the same pixel limits).

The content hash names the *processed* image (source bytes + target size), so it can be passed to
vLLM as ``multi_modal_uuids`` and vLLM's multimodal caches hit for a repeated image.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
import time
from collections.abc import Callable

import numpy as np

from edgeserve.preproc_pool.messages import ErrorKind, JobResult, PreprocParams

# What image decoders raise on malformed data besides mm_preproc's own PreprocError.
DECODER_ERRORS = (OSError, SyntaxError, EOFError, KeyError, IndexError, struct.error, ValueError)

# alloc(shape) -> a writable uint8 array of that shape (a view on shared memory in a worker)
Allocator = Callable[[tuple[int, int, int]], np.ndarray]


class ImageError(ValueError):
    """The input is not an image this server accepts; the message is shown to the client."""


def decode_base64(data: bytes | memoryview) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the data: URL's payload is not valid base64") from None


def content_hash(data: bytes | memoryview, target_h: int, target_w: int) -> str:
    h = hashlib.blake2b(data, digest_size=16)
    h.update(f"|{target_h}x{target_w}|rgb8".encode())
    return h.hexdigest()


def process_image(
    job_id: int, data: bytes | memoryview, params: PreprocParams, alloc: Allocator
) -> JobResult:
    """Decode and resize ``data``; write the pixels into ``alloc(shape)``.

    Bad input raises nothing: it returns a result with ``error_kind=BAD_IMAGE`` and a message.
    """
    import mm_preproc

    start = time.monotonic()
    if len(data) > params.max_image_bytes:
        return _fail(job_id, ErrorKind.BAD_IMAGE,
                     f"image is {len(data)} bytes, more than the limit of {params.max_image_bytes}",
                     start)
    try:
        return _process(job_id, data, params, alloc, start)
    except (ImageError, mm_preproc.PreprocError) as e:
        return _fail(job_id, ErrorKind.BAD_IMAGE, str(e), start)
    except DECODER_ERRORS as e:
        # an image library tripping over hostile bytes is still the input's fault
        return _fail(job_id, ErrorKind.BAD_IMAGE, f"cannot decode image ({type(e).__name__}: {e})",
                     start)
    except MemoryError:
        return _fail(job_id, ErrorKind.BAD_IMAGE, "image too large to decode", start)


def _process(
    job_id: int, data: bytes | memoryview, params: PreprocParams, alloc: Allocator, start: float
) -> JobResult:
    import mm_preproc

    header = mm_preproc.probe(data, params.max_image_pixels)
    th, tw = mm_preproc.target_size(header.height, header.width,
                                    min_pixels=params.min_pixels, max_pixels=params.max_pixels)
    out = alloc((th, tw, 3))
    r = mm_preproc.preprocess(
        data, min_pixels=params.min_pixels, max_pixels=params.max_pixels,
        backend=params.backend, fast_decode=params.fast_decode, out=out,
        output=mm_preproc.OutputFormat.IMAGE, max_source_pixels=params.max_image_pixels,
    )
    digest = content_hash(data, th, tw)
    end = time.monotonic()
    t = r.timings
    decode_end = start + t.decode_s
    resize_end = decode_end + t.color_s + t.resize_s
    return JobResult(
        job_id=job_id, ok=True, shape=(th, tw, 3), dtype="uint8", image_bytes=len(data),
        source_width=r.source_width, source_height=r.source_height, target_width=tw,
        target_height=th, content_hash=digest, start_s=start, decode_end_s=decode_end,
        resize_end_s=min(resize_end, end), normalize_end_s=end,
    )


def _fail(job_id: int, kind: ErrorKind, message: str, start: float) -> JobResult:
    return JobResult(job_id=job_id, ok=False, error_kind=kind, error=message, start_s=start)
