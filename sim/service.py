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
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from sim.profiles import FEATURES, ServiceKind, ServiceModelConfig

_BLOCK = 4096


class HasFeatures(Protocol):
    source_pixels: int
    target_pixels: int
    image_tokens: int
    prompt_tokens: int
    output_tokens: int


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


def _linear(*cfgs: ServiceModelConfig) -> Callable[[Any], float]:
    """Compile ``Σ (base_s + Σ per[f] · job.f)`` over the models into one small function."""
    coef: dict[str, float] = {}
    for cfg in cfgs:
        for f, c in cfg.per.items():
            if f in FEATURES[:5] and c != 0.0:
                coef[f] = coef.get(f, 0.0) + c
    base = sum(cfg.base_s for cfg in cfgs)
    src = f"lambda job: {base!r}" + "".join(f" + {c!r} * job.{f}" for f, c in coef.items())
    return eval(src, {})  # a lambda of validated floats and feature names


def mean_of_sum(*models: ServiceModelConfig) -> Callable[[Any], float]:
    """One function for the summed means of several stages (what a latency estimate needs)."""
    return _linear(*models)


class ServiceTime:
    """A compiled :class:`~sim.config.ServiceModelConfig`."""

    __slots__ = ("_batch", "_context", "_draws", "_half_var", "_samples", "_sigma", "base_s",
                 "draw", "kind", "mean_s")

    def __init__(self, cfg: ServiceModelConfig, draws: Draws) -> None:
        self.base_s = cfg.base_s
        self.kind = cfg.kind
        self.mean_s: Callable[[Any], float] = _linear(cfg)
        """Mean service time at nominal clock for a request's features."""
        self._batch = cfg.per.get("batch", 0.0)
        self._context = cfg.per.get("context_tokens", 0.0)
        self._draws = draws
        var = math.log1p(cfg.cv * cfg.cv)
        self._sigma = math.sqrt(var)
        self._half_var = var / 2
        self._samples: list[float] = []
        if cfg.kind is ServiceKind.EMPIRICAL:
            m = sum(cfg.samples_s) / len(cfg.samples_s)
            self._samples = [s / m for s in cfg.samples_s]
        self.draw: Callable[[float], float] = {
            ServiceKind.DETERMINISTIC: self._deterministic,
            ServiceKind.EXPONENTIAL: self._exponential,
            ServiceKind.LOGNORMAL: self._lognormal if cfg.cv > 0 else self._deterministic,
            ServiceKind.EMPIRICAL: self._empirical,
        }[cfg.kind]
        """One service time with the given mean, spread by this model's kind."""

    def step_mean_s(self, batch: int, context_tokens: int) -> float:
        """Mean decode-step time for a batch (``batch`` and ``context_tokens`` features)."""
        return self.base_s + self._batch * batch + self._context * context_tokens

    def sample(self, job: HasFeatures) -> float:
        return self.draw(self.mean_s(job))

    @staticmethod
    def _deterministic(mean_s: float) -> float:
        return mean_s

    def _exponential(self, mean_s: float) -> float:
        return self._draws.exponential() * mean_s

    def _lognormal(self, mean_s: float) -> float:
        return mean_s * math.exp(self._sigma * self._draws.normal() - self._half_var)

    def _empirical(self, mean_s: float) -> float:
        s = self._samples
        return mean_s * s[int(self._draws.uniform() * len(s))]
