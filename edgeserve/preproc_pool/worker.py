"""The preprocessing worker process: receive a job, preprocess, answer; forever.

A worker is started with the ``spawn`` method (a fresh interpreter: it inherits neither the
frontend's threads nor vLLM's state) and imports only numpy, Pillow and ``mm_preproc``. It pins
every thread pool to one thread, because the pool's parallelism is its processes. It ignores
SIGINT (the frontend decides when workers stop) and exits when its pipe closes.
"""

from __future__ import annotations

import contextlib
import os
import signal
from multiprocessing.connection import Connection

import numpy as np

from edgeserve.preproc_pool import shm
from edgeserve.preproc_pool.compute import decode_base64, process_image
from edgeserve.preproc_pool.messages import (
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
    warm_up(params)
    conn.send_bytes(encoder.encode(Ready(pid=os.getpid())))
    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            return
        job = job_decoder.decode(raw)
        result = run_job(job, params)
        try:
            conn.send_bytes(encoder.encode(result))
        except (BrokenPipeError, OSError):
            return


def warm_up(params: PreprocParams) -> None:
    """Run a small JPEG and PNG through the whole path before announcing readiness.

    The first image a fresh interpreter sees pays for lazy imports (Pillow's codec plugins,
    mm_preproc's backends) and first-touch allocations — tens of milliseconds to seconds on a busy
    host. Paying it here keeps it out of the first client requests' latency.
    """
    import io

    from PIL import Image

    img = Image.new("RGB", (1024, 768), (90, 120, 150))
    for fmt in ("JPEG", "PNG"):
        buf = io.BytesIO()
        img.save(buf, format=fmt)
        process_image(-1, buf.getvalue(), params, lambda shape: np.empty(shape, np.uint8))


def run_job(job: Job, params: PreprocParams) -> JobResult:
    """Read the job's bytes, preprocess into the output segment; never raises."""
    out_map = None

    def alloc(shape: tuple[int, int, int]) -> np.ndarray:
        nonlocal out_map
        out_map = shm.create(job.out_name, int(np.prod(shape)))
        return np.frombuffer(out_map, dtype=np.uint8).reshape(shape)

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
        return process_image(job.job_id, data, params, alloc)
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
