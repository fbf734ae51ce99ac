"""Service-time models: how long a stage takes for a request with given features.

A model's *mean* is linear in the request's features (``base_s + Σ per[f] · f``, e.g. image decode
≈ 2 ms + 9 ns per source pixel) at nominal clock; DVFS stretches it by the level's ``scale``.
The *kind* says how single draws spread around that mean:

- ``deterministic``: always the mean (M/D/1 queues),
- ``exponential``: exponential with that mean (M/M/1 queues),
- ``lognormal``: lognormal with that mean and coefficient of variation ``cv``,
- ``empirical``: a recorded sample (from ``samples_s``) scaled by ``mean / mean(samples_s)``, so
  the recorded shape of the spread is kept while the mean still follows the features.

Draws use a :class:`random.Random` stream owned by the caller; the same seed gives the same draws.
"""

from __future__ import annotations

import math
import random
from typing import Protocol

from sim.config import ServiceKind, ServiceModelConfig


class HasFeatures(Protocol):
    source_pixels: int
    target_pixels: int
    image_tokens: int
    prompt_tokens: int
    output_tokens: int


class ServiceTime:
    """A compiled :class:`~sim.config.ServiceModelConfig`."""

    __slots__ = ("_batch", "_context", "_half_var", "_kind", "_rng", "_samples", "_sigma",
                 "base_s", "terms")

    def __init__(self, cfg: ServiceModelConfig, rng: random.Random) -> None:
        self.base_s = cfg.base_s
        self.terms = tuple((f, c) for f, c in cfg.per.items()
                           if f not in ("batch", "context_tokens") and c != 0.0)
        self._batch = cfg.per.get("batch", 0.0)
        self._context = cfg.per.get("context_tokens", 0.0)
        self._kind = cfg.kind
        self._rng = rng
        var = math.log1p(cfg.cv * cfg.cv)
        self._sigma = math.sqrt(var)
        self._half_var = var / 2
        self._samples: list[float] = []
        if cfg.kind is ServiceKind.EMPIRICAL:
            m = sum(cfg.samples_s) / len(cfg.samples_s)
            self._samples = [s / m for s in cfg.samples_s]

    def mean_s(self, job: HasFeatures) -> float:
        """Mean service time at nominal clock for this request's features."""
        t = self.base_s
        for f, c in self.terms:
            t += c * getattr(job, f)
        return t

    def step_mean_s(self, batch: int, context_tokens: int) -> float:
        """Mean decode-step time for a batch (``batch`` and ``context_tokens`` features)."""
        return self.base_s + self._batch * batch + self._context * context_tokens

    def draw(self, mean_s: float) -> float:
        """One service time with mean ``mean_s``, spread by this model's kind."""
        k = self._kind
        if k is ServiceKind.DETERMINISTIC or mean_s <= 0.0:
            return mean_s
        if k is ServiceKind.EXPONENTIAL:
            return self._rng.expovariate(1.0) * mean_s
        if k is ServiceKind.LOGNORMAL:
            return mean_s * math.exp(self._sigma * self._rng.gauss(0.0, 1.0) - self._half_var)
        s = self._samples
        return mean_s * s[int(self._rng.random() * len(s))]

    def sample(self, job: HasFeatures) -> float:
        return self.draw(self.mean_s(job))
