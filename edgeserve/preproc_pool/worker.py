"""The preprocessing worker process: receive a job, preprocess, answer; forever.

A worker is started with the ``spawn`` method (a fresh interpreter: it inherits neither the
frontend's threads nor vLLM's state) and imports only numpy, Pillow and ``mm_preproc``. It pins
every thread pool to one thread, because the pool's parallelism is its processes. It ignores
SIGINT (the frontend decides when workers stop) and exits when its pipe closes.

With an encoder (``params.encoder``) the worker also opens one ONNX Runtime session, with the
intra-op thread count the server was given (``--encoder-threads``, 1 by default: the pool's
parallelism is still its processes), and runs it on every image right after patchify.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection

import numpy as np

from edgeserve.preproc_pool import shm
from edgeserve.preproc_pool.compute import Encoder, decode_base64, process_image
from edgeserve.preproc_pool.messages import (
    Encoding,
    ErrorKind,
    Job,
    JobResult,
    PreprocParams,
    Ready,
    SourceKind,
    encoder,
    job_decoder,
)

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def worker_main(conn: Connection, params: PreprocParams) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for var in THREAD_ENV:
        os.environ[var] = "1"
    try:
        import cv2

        cv2.setNumThreads(1)
    except ImportError:
        pass
    if params.retain_freed_bytes:  # each image reuses the last one's pages (mm_preproc.buffers)
        import mm_preproc

        mm_preproc.retain_freed_memory(params.retain_freed_bytes)
    vision = params.encoder.open() if params.encoder is not None else None
    warm_up(params, vision)
    conn.send_bytes(encoder.encode(Ready(pid=os.getpid())))
    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            return
        job = job_decoder.decode(raw)

        def encoding(job_id: int = job.job_id) -> None:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send_bytes(encoder.encode(Encoding(job_id)))

        result = run_job(job, params, vision, encoding)
        try:
            conn.send_bytes(encoder.encode(result))
        except (BrokenPipeError, OSError):
            return


def warm_up(params: PreprocParams, vision: Encoder | None = None) -> None:
    """Run a small JPEG and PNG through the whole path before announcing readiness.

    The first image a fresh interpreter sees pays for lazy imports (Pillow's codec plugins,
    mm_preproc's backends) and first-touch allocations — tens of milliseconds to seconds on a busy
    host. Paying it here keeps it out of the first client requests' latency. The encoder's first
    run (ONNX Runtime's allocations) is paid on a small image: its time grows with the square of
    the patches, and a warm-up need not cost a large image's encode.
    """
    import io

    from PIL import Image

    def scratch(shape: tuple[int, ...], dtype: str) -> np.ndarray:
        return np.empty(shape, dtype)

    img = Image.new("RGB", (1024, 768), (90, 120, 150))
    for fmt in ("JPEG", "PNG"):
        buf = io.BytesIO()
        img.save(buf, format=fmt)
        process_image(-1, buf.getvalue(), params, scratch)
    if vision is not None:
        buf = io.BytesIO()
        img.resize((224, 224)).save(buf, format="PNG")
        result = process_image(-1, buf.getvalue(), params, scratch, vision)
        if not result.ok:
            raise RuntimeError(f"the vision encoder fails on a warm-up image: {result.error}")


def run_job(job: Job, params: PreprocParams, vision: Encoder | None = None,
            on_encode: Callable[[], None] | None = None) -> JobResult:
    """Read the job's bytes, preprocess (and encode) into the output segment; never raises."""
    out_map = None

    def alloc(shape: tuple[int, ...], dtype: str) -> np.ndarray:
        nonlocal out_map
        dt = np.dtype(dtype)
        out_map = shm.create(job.out_name, int(np.prod(shape)) * dt.itemsize)
        return np.frombuffer(out_map, dtype=dt).reshape(shape)

    in_map = None
    try:
        if job.source is SourceKind.FILE:
            with open(job.src, "rb") as f:
                data: bytes | memoryview = f.read(params.max_image_bytes + 1)
        else:
            in_map = shm.attach(job.src)
            data = memoryview(in_map)[: job.src_bytes]
            if job.source is SourceKind.SHM_BASE64:
                data = decode_base64(data)
        return process_image(job.job_id, data, params, alloc, vision, on_encode)
    except ValueError as e:  # base64 errors
        return JobResult(job_id=job.job_id, ok=False, error_kind=ErrorKind.BAD_IMAGE, error=str(e))
    except Exception as e:  # report, keep serving
        return JobResult(job_id=job.job_id, ok=False, error_kind=ErrorKind.INTERNAL,
                         error=f"{type(e).__name__}: {e}")
    finally:
        data = b""
        for m in (in_map, out_map):
            if m is not None:
                with contextlib.suppress(BufferError):  # a view still alive: unmapped at exit
                    m.close()
