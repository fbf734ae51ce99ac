"""Workloads: when requests arrive at a device, and what they carry.

- ``poisson``: independent arrivals at ``rate_hz`` (exponential gaps) — many independent users.
- ``gamma``: gaps drawn from a gamma distribution with mean ``1/rate_hz`` and coefficient of
  variation ``cv``; ``cv > 1`` is bursty (clusters and lulls), ``cv < 1`` smoother than Poisson.
- ``periodic``: ``streams`` cameras at ``fps`` each, with random phases; every frame has a
  deadline (``deadline_s``, default one frame period) after which its answer is useless.
- ``replay``: arrival times and sizes of a recorded runtime trace (``RequestRecord`` lines).

Each request carries an image (a size from the weighted ``image.sizes`` list; its JPEG bytes
follow from ``jpeg_bytes_per_pixel``), ``text_tokens`` of prompt text and an output length drawn
uniformly from ``output_tokens = [lo, hi]``. The model's input size follows Qwen2-VL's
``smart_resize``: both sides rounded to multiples of 28 px, the area kept within
``[min_pixels, max_pixels]``; one image token per 28×28 px.

A workload may open its prompts with shared prefixes (``prefix: {count, tokens, zipf_s}``, see
:class:`~sim.scenario.config.PrefixConfig`): each request then names one, ``(prefix id, tokens)``, which a
cloud server with prefix caching looks up (:mod:`sim.core.prefix_cache`). A replayed trace keeps the
prefix its records name (``prefix_id``, ``prefix_tokens``), and draws from ``prefix`` for those
that name none.

Every workload draws from its own random stream, seeded by (scenario seed, device name), so runs
with the same seed see the same arrivals whatever the policy does with them.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Iterator
from itertools import accumulate

from edgeserve.records import RequestRecord, read_trace
from sim.scenario.config import ImageConfig, PrefixConfig, WorkloadConfig, WorkloadKind

#: a request's shared prompt prefix: (prefix id, tokens)
Prefix = tuple[str, int]
#: (t_s, width, height, image_bytes, text_tokens, output_tokens, deadline_s | None,
#: prefix | None)
Arrival = tuple[float, int, int, int, int, int, float | None, Prefix | None]


def smart_resize(height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56,
                 max_pixels: int = 28 * 28 * 1280) -> tuple[int, int]:
    """Qwen2-VL's resize rule: sides multiples of ``factor``, area within the pixel bounds."""
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


#: The runtime's JPEG DCT-domain downscale rule (``mm_preproc.decode.draft_scale``; a test keeps
#: the two equal): decode at 1/s when the result is still this many times the target per side.
DRAFT_MIN_RATIO = {8: 2.0, 4: 2.0, 2: 1.5}


def decoded_pixels(width: int, height: int, target_w: int, target_h: int) -> int:
    """Pixels the runtime's decoder produces for a JPEG of this size and resize target.

    ``mm_preproc`` asks libjpeg for 1/2, 1/4 or 1/8 scale when the smaller image is still at
    least ``DRAFT_MIN_RATIO`` times the target on each side, so a 12 MP photo bound for a 1 MP
    target decodes only 3 MP — and the decode and resize stages cost what is decoded.
    """
    if target_w <= 0 or target_h <= 0:
        return width * height
    for s, ratio in DRAFT_MIN_RATIO.items():
        if min(width / s / target_w, height / s / target_h) >= ratio:
            return -(-width // s) * -(-height // s)  # libjpeg rounds the scaled sides up
    return width * height


class ImageGeometry:
    """Cached ``(target_h, target_w, image_tokens, decoded_pixels)`` for source sizes under one
    image config (images are JPEG photographs: see :func:`decoded_pixels`)."""

    def __init__(self, cfg: ImageConfig) -> None:
        self.cfg = cfg
        self.cache: dict[tuple[int, int], tuple[int, int, int, int]] = {}

    def target(self, width: int, height: int) -> tuple[int, int, int, int]:
        key = (width, height)
        hit = self.cache.get(key)
        if hit is None:
            if width <= 0 or height <= 0:  # a text-only request
                self.cache[key] = (0, 0, 0, 0)
                return (0, 0, 0, 0)
            c = self.cfg
            th, tw = smart_resize(height, width, c.factor, c.min_pixels, c.max_pixels)
            hit = (th, tw, th * tw // c.pixels_per_token, decoded_pixels(width, height, tw, th))
            self.cache[key] = hit
        return hit


class PrefixDraw:
    """Draws a request's prefix: ``k`` with probability ``∝ 1 / (k + 1)^zipf_s``; the
    ``(id, tokens)`` tuples are built once, so a draw allocates nothing."""

    __slots__ = ("cum", "prefixes", "rand", "total")

    def __init__(self, cfg: PrefixConfig, name: str, rng: random.Random) -> None:
        label = cfg.name if cfg.name is not None else name
        self.prefixes: list[Prefix] = [(f"{label}:{k}", cfg.tokens) for k in range(cfg.count)]
        self.cum = list(accumulate((k + 1) ** -cfg.zipf_s for k in range(cfg.count)))
        self.total = self.cum[-1]
        self.rand = rng.random

    def __call__(self) -> Prefix:
        if len(self.prefixes) == 1:
            return self.prefixes[0]
        k = bisect.bisect_right(self.cum, self.rand() * self.total)
        return self.prefixes[min(k, len(self.prefixes) - 1)]


def arrivals(cfg: WorkloadConfig, rng: random.Random, name: str = "",
             prefix_rng: random.Random | None = None) -> Iterator[Arrival]:
    """The endless (or, for replay, finite) arrival stream of one device; ``name`` (the device
    entry's) labels its prefixes unless ``prefix.name`` does. Prefixes are drawn from
    ``prefix_rng`` (default: ``rng``): a stream of their own leaves the arrivals as they are
    without prefixes, so runs with and without them are paired."""
    draw = PrefixDraw(cfg.prefix, name, prefix_rng or rng) if cfg.prefix.on else None
    if cfg.kind is WorkloadKind.REPLAY:
        return _replay(cfg, draw)
    if draw is not None:
        return _prefixed(_synthetic(cfg, rng), draw)
    return _synthetic(cfg, rng)


def _prefixed(stream: Iterator[Arrival], draw: PrefixDraw) -> Iterator[Arrival]:
    """``stream`` with a prefix drawn after each arrival's other features."""
    for t, w, h, b, text, out, deadline, _ in stream:
        yield (t, w, h, b, text, out, deadline, draw())


def _synthetic(cfg: WorkloadConfig, rng: random.Random) -> Iterator[Arrival]:
    img = cfg.image
    sizes = [(s.width, s.height, int(s.width * s.height * img.jpeg_bytes_per_pixel))
             for s in img.sizes]
    cum = list(accumulate(s.weight for s in img.sizes))
    total = cum[-1]
    lo, hi = cfg.output_tokens
    span = hi - lo + 1
    text = cfg.text_tokens
    single = len(sizes) == 1
    rand = rng.random

    def features() -> tuple[int, int, int, int]:
        w, h, b = sizes[0] if single else sizes[bisect.bisect_right(cum, rand() * total)]
        return w, h, b, lo + int(rand() * span)

    if cfg.kind is WorkloadKind.PERIODIC:
        period = 1.0 / cfg.fps
        deadline = cfg.deadline_s if cfg.deadline_s is not None else period
        phases = sorted(rand() * period for _ in range(cfg.streams))
        k = 0
        while True:
            base = k * period
            for ph in phases:
                w, h, b, out = features()
                t = base + ph
                yield (t, w, h, b, text, out, t + deadline, None)
            k += 1
    t = 0.0
    dl = cfg.deadline_s
    if cfg.kind is WorkloadKind.POISSON:
        rate = cfg.rate_hz
        bisect_right = bisect.bisect_right
        w, h, b = sizes[0]
        while True:
            # rng.expovariate(rate), inlined (tests/sim/test_fast_paths.py)
            t += -math.log(1.0 - rand()) / rate
            if not single:  # features(), inlined
                w, h, b = sizes[bisect_right(cum, rand() * total)]
            out = lo + int(rand() * span)
            yield (t, w, h, b, text, out, None if dl is None else t + dl, None)
    # gamma: shape k = 1/cv², scale θ = cv²/rate gives mean 1/rate and the requested cv
    shape = 1.0 / (cfg.cv * cfg.cv)
    scale = cfg.cv * cfg.cv / cfg.rate_hz
    gamma = rng.gammavariate
    while True:
        t += gamma(shape, scale)
        w, h, b, out = features()
        yield (t, w, h, b, text, out, None if dl is None else t + dl, None)


def _replay(cfg: WorkloadConfig, draw: PrefixDraw | None) -> Iterator[Arrival]:
    """Arrivals of a recorded trace, sorted by arrival, starting at t = 0; a record's prefix
    (``prefix_id``, ``prefix_tokens``) goes with it, ``draw`` gives one to records without."""
    assert cfg.trace is not None
    rows: list[tuple[float, int, int, int, int, int, Prefix | None]] = []
    for item in read_trace(cfg.trace):
        if isinstance(item, RequestRecord) and (
                cfg.trace_device is None or item.device == cfg.trace_device):
            text = max(0, item.prompt_tokens - item.image_tokens)
            prefix = (item.prefix_id, item.prefix_tokens) \
                if item.prefix_id is not None and item.prefix_tokens > 0 else None
            rows.append((item.arrived_s, item.source_width, item.source_height,
                         item.image_bytes, text, max(1, item.output_tokens or item.max_tokens),
                         prefix))
    rows.sort(key=lambda r: r[:6])  # as before prefixes: ties by sizes, then file order
    if not rows:
        return
    t0 = rows[0][0]
    dl = cfg.deadline_s
    for t, w, h, b, text, out, prefix in rows:
        ts = (t - t0) * cfg.time_scale
        if prefix is None and draw is not None:
            prefix = draw()
        yield (ts, w, h, b, text, out, None if dl is None else ts + dl, prefix)
