"""Inline preprocessing: the same job, run on the frontend's event loop (``--mode inline``).

This is the baseline the split exists to beat. While an image decodes here, the event loop does
nothing else: no HTTP request is parsed, no token is streamed, and vLLM's output handler (which
runs on the same loop) cannot hand new work to the engine — exactly the situation of a server that
preprocesses in its API process. With ``--encoder onnx`` the vision encoder runs here too, on the
loop, in a session the frontend opens at start-up.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from edgeserve.preproc_pool.compute import Encoder, decode_base64, process_image
from edgeserve.preproc_pool.messages import ErrorKind, PreprocParams, SourceKind
from edgeserve.preproc_pool.pool import ImageInput, PoolFull, Preprocessed, PreprocFailed


class InlinePreproc:
    """Same interface as :class:`~edgeserve.preproc_pool.pool.PreprocPool`, no processes."""

    def __init__(self, params: PreprocParams, max_pending: int) -> None:
        self.params = params
        self.max_pending = max_pending
        self.queued = 0
        self.running = 0
        self.busy_total_s = 0.0
        self.slots: list[object] = []
        self.deaths = 0
        self.encoder: Encoder | None = None

    async def start(self) -> None:
        import mm_preproc  # noqa: F401 — pay the import before the first request

        if self.params.encoder is not None:
            self.encoder = self.params.encoder.open()

    async def close(self) -> None:
        return None

    def has_room(self) -> bool:
        return self.queued < self.max_pending

    def worker_pids(self) -> list[int | None]:
        return []

    async def submit(self, image: ImageInput) -> Preprocessed:
        if not self.has_room():
            raise PoolFull()
        queued_s = time.monotonic()
        self.queued += 1
        try:
            await asyncio.sleep(0)  # let the loop breathe once, as a queue would
        finally:
            self.queued -= 1
        self.running += 1
        start = time.monotonic()
        try:
            if image.source is SourceKind.FILE:
                assert image.path is not None
                with open(image.path, "rb") as f:
                    data: bytes = f.read(self.params.max_image_bytes + 1)
            else:
                assert image.data is not None
                data = image.data
                if image.source is SourceKind.SHM_BASE64:
                    try:
                        data = decode_base64(data)
                    except ValueError as e:
                        raise PreprocFailed(ErrorKind.BAD_IMAGE, str(e)) from None
            arrays: list[np.ndarray] = []

            def alloc(shape: tuple[int, ...], dtype: str) -> np.ndarray:
                arrays.append(np.empty(shape, dtype))
                return arrays[-1]

            result = process_image(0, data, self.params, alloc, self.encoder)
        finally:
            self.running -= 1
            self.busy_total_s += time.monotonic() - start
        if not result.ok:
            kind = result.error_kind or ErrorKind.INTERNAL
            raise PreprocFailed(kind, result.error or "preprocessing failed")
        return Preprocessed(arrays[0], result, -1, queued_s)
