"""The small messages that cross the frontend ↔ worker pipes (msgpack, array-like structs).

Pixels never travel in these messages: a :class:`Job` names the shared-memory segment (or the
local file) that holds the image bytes and the segment the worker writes the resized pixels to;
a :class:`JobResult` gives the array's shape and the worker's stage timestamps. With an encoder
(``--encoder onnx``) the array is the image's ``image_embeds`` and the result carries its patch
grid; the worker announces the start of each encode with an :class:`Encoding` message.
"""

from __future__ import annotations

import enum

import msgspec

from edgeserve.encoder import EncoderSpec
from mm_preproc.buffers import RETAIN_FREED_BYTES
from mm_preproc.spec import QWEN2_VL, PreprocSpec


class SourceKind(enum.StrEnum):
    """Where a job's image bytes are."""

    SHM = "shm"  # raw bytes in the job's input segment
    SHM_BASE64 = "shm_b64"  # base64 text in the input segment (decoded by the worker)
    FILE = "file"  # a local file the frontend already checked against --allowed-media-dir


class ErrorKind(enum.StrEnum):
    """Why a job failed."""

    BAD_IMAGE = "bad_image"  # the input cannot be an image we accept → HTTP 400
    INTERNAL = "internal"  # a bug or resource failure inside the worker → HTTP 500
    WORKER_DIED = "worker_died"  # the workers of both attempts ended mid-job → HTTP 500


class PreprocParams(msgspec.Struct, frozen=True, array_like=True):
    """How every image is preprocessed; fixed for a server's lifetime."""

    min_pixels: int
    max_pixels: int
    max_image_pixels: int
    max_image_bytes: int
    backend: str = "auto"
    fast_decode: bool = True
    encoder: EncoderSpec | None = None  # run the vision encoder after patchify
    spec: PreprocSpec = QWEN2_VL  # the model family's patch geometry, mean/std (mm_preproc.spec)
    # freed heap a worker keeps for its next images (glibc's trim threshold, mm_preproc.buffers);
    # 0: the C library's defaults
    retain_freed_bytes: int = RETAIN_FREED_BYTES


class Job(msgspec.Struct, frozen=True, array_like=True):
    job_id: int
    source: SourceKind
    src: str  # input segment name, or file path
    out_name: str  # output segment name the worker creates
    src_bytes: int = 0  # bytes of the input segment that hold data (segments are page-rounded)


class JobResult(msgspec.Struct, array_like=True, tag="result"):
    job_id: int
    ok: bool
    error_kind: ErrorKind | None = None
    error: str | None = None
    shape: tuple[int, ...] = ()
    dtype: str = "uint8"
    image_bytes: int = 0
    source_width: int = 0
    source_height: int = 0
    target_width: int = 0
    target_height: int = 0
    content_hash: str = ""
    # time.monotonic() stamps taken in the worker (one clock for all processes of the host)
    start_s: float = 0.0
    decode_end_s: float = 0.0
    resize_end_s: float = 0.0
    normalize_end_s: float = 0.0
    # with an encoder: the output is image_embeds (tokens, hidden) float32 for this patch grid
    grid_thw: tuple[int, ...] = ()
    encode_end_s: float = 0.0
    # pixels the decoder produced: fewer than source_width × source_height for a JPEG decoded at
    # 1/2…1/8 scale in the DCT domain (what the decode and resize stages' cost follows)
    decoded_pixels: int = 0


class Encoding(msgspec.Struct, array_like=True, tag="encoding"):
    """A worker has patchified the job's image and starts encoding it."""

    job_id: int


class Ready(msgspec.Struct, array_like=True, tag="ready"):
    """First message of a worker: imports done, waiting for jobs."""

    pid: int


encoder = msgspec.msgpack.Encoder()
job_decoder = msgspec.msgpack.Decoder(Job)
reply_decoder = msgspec.msgpack.Decoder(JobResult | Encoding | Ready)
