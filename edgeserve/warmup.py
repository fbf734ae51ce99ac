"""Warm-up: the first image steps run before ``/health`` says ready, not in a user's request.

A fresh server is slow on the first request of each shape: vLLM's engine compiles or plans its
kernels for each new token count (on a GPU it captures graphs; on the CPU oneDNN builds its
primitives), a worker's ONNX Runtime session allocates its arena on its first image, and the
multimodal processor loads its tables. Measured: the first image request to a fresh default
server on a GPU took 7.4 s against 0.77 s for ``vllm serve``, which warms its multimodal path
before it reports ready. So before the listener opens, the server sends itself requests through
the same path a user's takes — a worker decodes, resizes, patchifies (and encodes), the engine
prefills and decodes two tokens:

* the largest image the server admits at full size (a 4:3 photograph at ``max_pixels``), once
  per preprocessing worker and all at once, so every worker's session and the engine's
  several-image step are warm;
* the common shapes, one at a time: the web sizes of ``edgeserve bench``'s ``small`` preset
  and a 1 MP photograph, each resized as a user's would be;
* a text-only prompt.

An image whose tokens would not fit ``max_model_len`` with its prompt is left out, as a user's
would be refused. Each is a JPEG of random pixels (distinct, so that no cache answers for another), so it costs
what a photograph of its size costs after decoding. The steps they cause are in the trace, before
the ``warmup`` entry's ``end_t_s`` of the trace header.
"""

from __future__ import annotations

import asyncio
import io
import time
from dataclasses import dataclass

import numpy as np
from PIL import Image

from edgeserve.config import ServeConfig
from edgeserve.engine import Engine
from edgeserve.preproc_pool.inline import InlinePreproc
from edgeserve.preproc_pool.messages import SourceKind
from edgeserve.preproc_pool.pool import ImageInput, Preprocessed, PreprocPool
from mm_preproc.smart_resize import smart_resize

LARGEST_ASPECT = (4000, 3000)  # a phone photograph, W × H
COMMON_SIZES = ((448, 448), (640, 480), (800, 600), (1024, 768), (1280, 800))  # W × H
PROMPT = "Describe this image in one sentence."
OUTPUT_TOKENS = 2  # a prefill and one decode step per request
PROMPT_MARGIN_TOKENS = 64  # the chat template and the text around an image


@dataclass(slots=True, frozen=True)
class WarmupReport:
    """What the warm-up ran and how long it took (printed at start, kept in the trace header)."""

    requests: int
    largest: tuple[int, int]  # W × H of the largest image, resized
    largest_tokens: int
    largest_copies: int  # sent at once (one per worker; 0 when it does not fit max_model_len)
    common_sizes: int
    start_t_s: float
    end_t_s: float

    @property
    def duration_s(self) -> float:
        return self.end_t_s - self.start_t_s

    def line(self) -> str:
        w, h = self.largest
        return (f"warm-up: {self.requests} requests (the largest image, {w}x{h} = "
                f"{self.largest_tokens} tokens, {self.largest_copies} at once; "
                f"{self.common_sizes} common sizes; text only) in {self.duration_s:.1f} s "
                "before ready")

    def as_meta(self) -> dict[str, object]:
        return {"requests": self.requests, "largest": list(self.largest),
                "largest_tokens": self.largest_tokens, "largest_copies": self.largest_copies,
                "common_sizes": self.common_sizes, "start_t_s": self.start_t_s,
                "end_t_s": self.end_t_s, "duration_s": round(self.duration_s, 3)}


def largest_size(cfg: ServeConfig) -> tuple[int, int]:
    """The largest image the server's limits give (W × H): a 4:3 photograph at ``max_pixels``."""
    spec = cfg.preproc_spec
    h, w = smart_resize(LARGEST_ASPECT[1], LARGEST_ASPECT[0], spec.factor,
                        int(cfg.min_pixels or 0), int(cfg.max_pixels or 0))
    return w, h


def jpeg(width: int, height: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(
        buf, "JPEG", quality=90)
    return buf.getvalue()


async def warm_up(cfg: ServeConfig, engine: Engine, preproc: PreprocPool | InlinePreproc
                  ) -> WarmupReport:
    """Run the warm-up requests (see the module docstring); raises what a request would."""
    start = time.monotonic()
    spec = cfg.preproc_spec
    largest = largest_size(cfg)
    room = cfg.engine.max_model_len - PROMPT_MARGIN_TOKENS

    def fits(size: tuple[int, int]) -> bool:
        w, h = size
        th, tw = smart_resize(h, w, spec.factor, int(cfg.min_pixels or 0), int(cfg.max_pixels or 0))
        return spec.tokens(th, tw) <= room

    seeds = iter(range(1 << 30))
    copies = int(cfg.workers or 1) if isinstance(preproc, PreprocPool) else 1
    copies = copies if fits(largest) else 0
    await asyncio.gather(*(_one(engine, preproc, largest, next(seeds)) for _ in range(copies)))
    common = [size for size in COMMON_SIZES if fits(size)]
    for size in common:
        await _one(engine, preproc, size, next(seeds))
    await _one(engine, preproc, None, next(seeds))
    return WarmupReport(requests=copies + len(common) + 1, largest=largest,
                        largest_tokens=spec.tokens(largest[1], largest[0]),
                        largest_copies=copies, common_sizes=len(common), start_t_s=start, end_t_s=time.monotonic())


async def _one(engine: Engine, preproc: PreprocPool | InlinePreproc,
               size: tuple[int, int] | None, seed: int) -> None:
    images: list[Preprocessed] = []
    if size is not None:
        images = [await preproc.submit(ImageInput(SourceKind.SHM, data=jpeg(*size, seed)))]
    content: list[dict[str, str]] = [{"type": "image"}] if images else []
    prompt = engine.build_prompt([{"role": "user", "content": [
        *content, {"type": "text", "text": f"{PROMPT} ({seed})"}]}])
    params = engine.sampling_params(max_tokens=OUTPUT_TOKENS, temperature=0.0, top_p=None,
                                    top_k=None, seed=None, stop=None, ignore_eos=True,
                                    min_tokens=0)
    grids = [i.result.grid_thw for i in images] if engine.takes_embeds else None
    async for _ in engine.generate(f"warmup-{seed}", prompt, [i.pixels for i in images],
                                   [i.result.content_hash for i in images], params, grids):
        pass
