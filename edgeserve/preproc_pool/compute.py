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
(its resize becomes a no-op because the server passes the same pixel limits and the target is
a multiple of the model family's factor: ``params.spec``, 28 px for Qwen2-VL, 32 for Qwen3-VL).

With an encoder (``--encoder onnx``, :mod:`edgeserve.encoder`) the job goes two stages further:
``mm_preproc`` also normalizes and patchifies (``pixel_values``, float32, in the process's own
memory), the encoder turns that into ``image_embeds`` (tokens × LM hidden, float32), and only the
embeddings are written to the output segment — a sixth of the uint8 pixels for the tiny model, and
1/24 of the float32 ``pixel_values`` vLLM would otherwise build.

The content hash names the *processed* image (source bytes + target size, + what the array
holds), so it can be passed to vLLM as ``multi_modal_uuids`` and vLLM's multimodal caches hit for
a repeated image.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from edgeserve.preproc_pool.messages import ErrorKind, JobResult, PreprocParams

# What image decoders raise on malformed data besides mm_preproc's own PreprocError.
DECODER_ERRORS = (OSError, SyntaxError, EOFError, KeyError, IndexError, struct.error, ValueError)

# alloc(shape, dtype) -> a writable array of that shape (a view on shared memory in a worker)
Allocator = Callable[[tuple[int, ...], str], np.ndarray]


class Encoder(Protocol):
    """The vision encoder: ``(pixel_values, image_grid_thw) -> image_embeds``."""

    def __call__(self, pixel_values: np.ndarray, grid_thw: np.ndarray) -> np.ndarray: ...


class ImageError(ValueError):
    """The input is not an image this server accepts; the message is shown to the client."""


def decode_base64(data: bytes | memoryview) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the data: URL's payload is not valid base64") from None


def content_hash(data: bytes | memoryview, target_h: int, target_w: int, kind: str = "rgb8") -> str:
    h = hashlib.blake2b(data, digest_size=16)
    h.update(f"|{target_h}x{target_w}|{kind}".encode())
    return h.hexdigest()


def process_image(
    job_id: int, data: bytes | memoryview, params: PreprocParams, alloc: Allocator,
    encoder: Encoder | None = None, on_encode: Callable[[], None] | None = None,
) -> JobResult:
    """Decode and resize ``data``; write the pixels into ``alloc(shape, dtype)`` — or, with an
    ``encoder``, patchify and encode them and write the image embeddings (``on_encode`` is
    called as the encode starts).

    Bad input raises nothing: it returns a result with ``error_kind=BAD_IMAGE`` and a message;
    an encoder that fails gives ``INTERNAL`` (the image was fine).
    """
    import mm_preproc

    start = time.monotonic()
    if len(data) > params.max_image_bytes:
        return _fail(job_id, ErrorKind.BAD_IMAGE,
                     f"image is {len(data)} bytes, more than the limit of {params.max_image_bytes}",
                     start)
    try:
        if encoder is not None:
            return _process_and_encode(job_id, data, params, alloc, start, encoder, on_encode)
        return _process(job_id, data, params, alloc, start)
    except EncoderFailed as e:
        return _fail(job_id, ErrorKind.INTERNAL, str(e), start)
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
    th, tw = mm_preproc.target_size(header.height, header.width, min_pixels=params.min_pixels,
                                    max_pixels=params.max_pixels, spec=params.spec)
    out = alloc((th, tw, 3), "uint8")
    r = mm_preproc.preprocess(
        data, min_pixels=params.min_pixels, max_pixels=params.max_pixels,
        backend=params.backend, fast_decode=params.fast_decode, out=out,
        output=mm_preproc.OutputFormat.IMAGE, max_source_pixels=params.max_image_pixels,
        spec=params.spec,
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
        decoded_pixels=t.pixels_decoded,
    )


class EncoderFailed(Exception):
    """The vision encoder raised on a well-formed image (not the client's fault: a 500)."""


def _process_and_encode(
    job_id: int, data: bytes | memoryview, params: PreprocParams, alloc: Allocator, start: float,
    encoder: Encoder, on_encode: Callable[[], None] | None,
) -> JobResult:
    import mm_preproc

    r = mm_preproc.preprocess(
        data, min_pixels=params.min_pixels, max_pixels=params.max_pixels,
        backend=params.backend, fast_decode=params.fast_decode,
        output=mm_preproc.OutputFormat.FLOAT32, max_source_pixels=params.max_image_pixels,
        spec=params.spec,
    )
    normalize_end = time.monotonic()
    th, tw, t = r.target_height, r.target_width, r.timings
    grid = tuple(int(g) for g in r.image_grid_thw.reshape(-1))
    if on_encode is not None:
        on_encode()
    try:
        embeds = encoder(r.pixel_values, r.image_grid_thw)
    except Exception as e:  # ONNX Runtime's errors share no base class worth naming
        raise EncoderFailed(f"the vision encoder failed on a {tw}x{th} image (grid {list(grid)}): "
                            f"{type(e).__name__}: {e}") from None
    out = alloc(tuple(embeds.shape), "float32")
    out[...] = embeds
    end = time.monotonic()
    decode_end = start + t.decode_s
    resize_end = decode_end + t.color_s + t.resize_s
    return JobResult(
        job_id=job_id, ok=True, shape=tuple(embeds.shape), dtype="float32", image_bytes=len(data),
        source_width=r.source_width, source_height=r.source_height, target_width=tw,
        target_height=th, content_hash=content_hash(data, th, tw, "image_embeds"),
        start_s=start, decode_end_s=decode_end, resize_end_s=min(resize_end, normalize_end),
        normalize_end_s=normalize_end, grid_thw=grid, encode_end_s=end,
        decoded_pixels=t.pixels_decoded,
    )


def _fail(job_id: int, kind: ErrorKind, message: str, start: float) -> JobResult:
    return JobResult(job_id=job_id, ok=False, error_kind=kind, error=message, start_s=start)
