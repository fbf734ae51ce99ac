"""Service-time models: how long a stage takes for a request with given features.

A model's *mean* is linear in the request's features (``base_s + Σ per[f] · f``, e.g. image decode
≈ 2 ms + 9 ns per source pixel) at nominal clock; DVFS stretches it by the level's ``scale``.
The *kind* says how single draws spread around that mean:

- ``deterministic``: always the mean (M/D/1 queues),
- ``exponential``: exponential with that mean (M/M/1 queues),
- ``lognormal``: lognormal with that mean and coefficient of variation ``cv``,
- ``empirical``: a recorded sample (from ``samples_s``) scaled by ``mean / mean(samples_s)``, so
  the recorded shape of the spread is kept while the mean still follows the features.

Draws come from a :class:`Draws` stream; the same seed gives the same draws. Random variates are
drawn by numpy in blocks (a Python-level ``random.gauss`` per request would cost more than the
rest of a request's bookkeeping).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from typing import Protocol

import numpy as np

from sim.core.job import Job
from sim.scenario.profiles import FEATURES, ServiceKind, ServiceModelConfig

_BLOCK = 4096
# A stage's factor blocks start small and double up to _BLOCK: the same variates in the same order
# (numpy's generators draw sequentially), but a fleet of thousands of devices, each with a few
# hundred requests, no longer holds 4096 floats per stage and device.
_FIRST_BLOCK = 64


class HasFeatures(Protocol):
    source_pixels: int
    target_pixels: int
    image_tokens: int
    prompt_tokens: int
    output_tokens: int
    decoded_pixels: int


class Draws:
    """Block-buffered random variates from one seeded numpy generator."""

    __slots__ = ("_exp", "_gen", "_i_exp", "_i_norm", "_i_unif", "_norm", "_unif")

    def __init__(self, seed: int | str) -> None:
        if isinstance(seed, str):
            seed = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "little")
        self._gen = np.random.default_rng(seed)
        self._norm: list[float] = []
        self._exp: list[float] = []
        self._unif: list[float] = []
        self._i_norm = self._i_exp = self._i_unif = 0

    def normal(self) -> float:
        i = self._i_norm
        if i >= len(self._norm):
            self._norm = self._gen.standard_normal(_BLOCK).tolist()
            i = 0
        self._i_norm = i + 1
        return self._norm[i]

    def exponential(self) -> float:
        i = self._i_exp
        if i >= len(self._exp):
            self._exp = self._gen.standard_exponential(_BLOCK).tolist()
            i = 0
        self._i_exp = i + 1
        return self._exp[i]

    def uniform(self) -> float:
        i = self._i_unif
        if i >= len(self._unif):
            self._unif = self._gen.random(_BLOCK).tolist()
            i = 0
        self._i_unif = i + 1
        return self._unif[i]


#: the features a request carries (the others, ``batch`` and ``context_tokens``, are the decode
#: step's); ``image_tokens_sq`` is ``image_tokens²`` of the request's one image
_JOB_FEATURES = (*FEATURES[:6], "image_tokens_sq")


def _terms(*cfgs: ServiceModelConfig) -> tuple[float, list[int], list[float]]:
    """``Σ (base_s + Σ per[f] · job.f)`` over the models: the summed base and, in the order the
    features first appear, each non-zero feature's index in ``FEATURES`` and summed coefficient."""
    coef: dict[str, float] = {}
    for cfg in cfgs:
        for f, c in cfg.per.items():
            if f in _JOB_FEATURES and c != 0.0:
                coef[f] = coef.get(f, 0.0) + c
    base = float(sum(cfg.base_s for cfg in cfgs))
    return base, [FEATURES.index(f) for f in coef], list(coef.values())


class Linear:
    """``base + Σ coef · job.feature``, summed left to right in the order of the terms.

    A native class when compiled: the mean of a stage is one direct call that reads the job's
    fields straight from the object (no interpreted code on the hot path).
    """

    __slots__ = ("base", "coef", "idx", "n")

    def __init__(self, *cfgs: ServiceModelConfig) -> None:
        self.base, self.idx, self.coef = _terms(*cfgs)
        self.n = len(self.idx)

    def mean_s(self, job: Job) -> float:
        m = self.base
        idx = self.idx
        coef = self.coef
        for i in range(self.n):
            k = idx[i]
            if k == 0:
                m += coef[i] * job.source_pixels
            elif k == 1:
                m += coef[i] * job.target_pixels
            elif k == 2:
                m += coef[i] * job.image_tokens
            elif k == 3:
                m += coef[i] * job.prompt_tokens
            elif k == 4:
                m += coef[i] * job.output_tokens
            elif k == 5:
                m += coef[i] * job.decoded_pixels
            else:  # image_tokens_sq
                m += coef[i] * job.image_tokens * job.image_tokens
        return m

    def __call__(self, job: Job) -> float:
        return self.mean_s(job)


def mean_of_sum(*models: ServiceModelConfig) -> Linear:
    """The summed means of several stages (what a latency estimate needs): ``.mean_s(job)``."""
    return Linear(*models)


def _factor_blocks(cfg: ServiceModelConfig, draws: Draws) -> Iterator[list[float]]:
    """Endless blocks of multipliers of the mean: one per draw, in the stream's order.

    A draw is ``mean × factor``; the factor depends on the kind only (lognormal
    ``exp(σ·z − σ²/2)``, exponential ``e``, empirical ``sample / mean(samples)``), so whole blocks
    of factors are made at once from numpy's block of variates.
    """
    gen = draws._gen
    size = _FIRST_BLOCK
    if cfg.kind is ServiceKind.LOGNORMAL:
        var = math.log1p(cfg.cv * cfg.cv)
        sigma, half_var = math.sqrt(var), var / 2
        while True:
            zs: list[float] = gen.standard_normal(size).tolist()  # typed: math.exp compiles
            factors = [math.exp(sigma * z - half_var) for z in zs]
            zs = []  # not kept alive while suspended
            yield factors
            size = min(2 * size, _BLOCK)
    elif cfg.kind is ServiceKind.EXPONENTIAL:
        while True:
            yield gen.standard_exponential(size).tolist()
            size = min(2 * size, _BLOCK)
    else:  # empirical
        m = sum(cfg.samples_s) / len(cfg.samples_s)
        ratios = [s / m for s in cfg.samples_s]
        n = len(ratios)
        while True:
            yield [ratios[int(u * n)] for u in gen.random(size).tolist()]
            size = min(2 * size, _BLOCK)


class ServiceTime:
    """A compiled :class:`~sim.scenario.config.ServiceModelConfig`.

    ``sample(job)`` is one draw for a request's features, ``draw(mean_s)`` one draw around a given
    mean, ``mean_s(job)`` the mean at nominal clock (native methods when compiled). Draws are
    ``mean × factor`` with factors taken in order from this model's own stream (see
    :func:`_factor_blocks`).
    """

    __slots__ = ("_batch", "_blocks", "_buf", "_context", "_i", "_lin", "_random", "base_s",
                 "kind")

    def __init__(self, cfg: ServiceModelConfig, draws: Draws) -> None:
        self.base_s = cfg.base_s
        self.kind = cfg.kind
        self._lin = Linear(cfg)
        self._batch = cfg.per.get("batch", 0.0)
        self._context = cfg.per.get("context_tokens", 0.0)
        self._random = not (cfg.kind is ServiceKind.DETERMINISTIC
                            or (cfg.kind is ServiceKind.LOGNORMAL and cfg.cv <= 0))
        self._blocks: Iterator[list[float]] | None = (
            _factor_blocks(cfg, draws) if self._random else None)
        self._buf: list[float] = []
        self._i = 0

    def _factor(self) -> float:
        """The next multiplier of the mean from this model's stream."""
        i = self._i
        buf = self._buf
        if i >= len(buf):
            assert self._blocks is not None
            buf = self._buf = next(self._blocks)
            i = 0
        self._i = i + 1
        return buf[i]

    def mean_s(self, job: Job) -> float:
        """Mean service time at nominal clock for a request's features."""
        return self._lin.mean_s(job)

    def sample(self, job: Job) -> float:
        """One service time for a request's features, spread by the kind."""
        m = self._lin.mean_s(job)
        if self._random:
            return m * self._factor()
        return m

    def draw(self, mean_s: float) -> float:
        """One service time around the given mean, spread by the kind."""
        if self._random:
            return mean_s * self._factor()
        return mean_s

    def step_mean_s(self, batch: int, context_tokens: int) -> float:
        """Mean decode-step time for a batch (``batch`` and ``context_tokens`` features)."""
        return self.base_s + self._batch * batch + self._context * context_tokens
