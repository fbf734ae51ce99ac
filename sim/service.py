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
from collections.abc import Callable, Iterator
from itertools import chain
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


def _linear_src(*cfgs: ServiceModelConfig) -> str:
    """``Σ (base_s + Σ per[f] · job.f)`` over the models, as a Python expression in ``job``."""
    coef: dict[str, float] = {}
    for cfg in cfgs:
        for f, c in cfg.per.items():
            if f in FEATURES[:5] and c != 0.0:
                coef[f] = coef.get(f, 0.0) + c
    base = sum(cfg.base_s for cfg in cfgs)
    return f"{base!r}" + "".join(f" + {c!r} * job.{f}" for f, c in coef.items())


def _linear(*cfgs: ServiceModelConfig) -> Callable[[Any], float]:
    """Compile ``Σ (base_s + Σ per[f] · job.f)`` over the models into one small function."""
    return eval(f"lambda job: {_linear_src(*cfgs)}", {})  # a lambda of validated floats and names


def mean_of_sum(*models: ServiceModelConfig) -> Callable[[Any], float]:
    """One function for the summed means of several stages (what a latency estimate needs)."""
    return _linear(*models)


def _factor_blocks(cfg: ServiceModelConfig, draws: Draws) -> Iterator[list[float]]:
    """Endless blocks of multipliers of the mean: one per draw, in the stream's order.

    A draw is ``mean × factor``; the factor depends on the kind only (lognormal
    ``exp(σ·z − σ²/2)``, exponential ``e``, empirical ``sample / mean(samples)``), so whole blocks
    of factors are made at once from numpy's block of variates.
    """
    gen = draws._gen
    exp = math.exp
    if cfg.kind is ServiceKind.LOGNORMAL:
        var = math.log1p(cfg.cv * cfg.cv)
        sigma, half_var = math.sqrt(var), var / 2
        while True:
            yield [exp(sigma * z - half_var) for z in gen.standard_normal(_BLOCK).tolist()]
    elif cfg.kind is ServiceKind.EXPONENTIAL:
        while True:
            yield gen.standard_exponential(_BLOCK).tolist()
    else:  # empirical
        m = sum(cfg.samples_s) / len(cfg.samples_s)
        ratios = [s / m for s in cfg.samples_s]
        n = len(ratios)
        while True:
            yield [ratios[int(u * n)] for u in gen.random(_BLOCK).tolist()]


class ServiceTime:
    """A compiled :class:`~sim.config.ServiceModelConfig`.

    ``sample(job)`` is one draw for a request's features, ``draw(mean_s)`` one draw around a given
    mean, ``mean_s(job)`` the mean at nominal clock; all three are compiled functions bound as
    attributes (no wrapper call on the hot path). Draws are ``mean × factor`` with factors taken
    in order from this model's own stream (see :func:`_factor_blocks`).
    """

    __slots__ = ("_batch", "_context", "base_s", "draw", "kind", "mean_s", "sample")

    def __init__(self, cfg: ServiceModelConfig, draws: Draws) -> None:
        self.base_s = cfg.base_s
        self.kind = cfg.kind
        self.mean_s: Callable[[Any], float] = _linear(cfg)
        """Mean service time at nominal clock for a request's features."""
        self._batch = cfg.per.get("batch", 0.0)
        self._context = cfg.per.get("context_tokens", 0.0)
        src = _linear_src(cfg)
        if cfg.kind is ServiceKind.DETERMINISTIC or (cfg.kind is ServiceKind.LOGNORMAL
                                                     and cfg.cv <= 0):
            self.sample: Callable[[Any], float] = self.mean_s
            self.draw: Callable[[float], float] = _identity
        else:
            ns = {"_next": next, "_f": chain.from_iterable(_factor_blocks(cfg, draws))}
            self.sample = eval(f"lambda job: ({src}) * _next(_f)", ns)
            self.draw = eval("lambda mean_s: mean_s * _next(_f)", ns)
        """One service time for a request's features / with the given mean, spread by the kind."""

    def step_mean_s(self, batch: int, context_tokens: int) -> float:
        """Mean decode-step time for a batch (``batch`` and ``context_tokens`` features)."""
        return self.base_s + self._batch * batch + self._context * context_tokens


def _identity(mean_s: float) -> float:
    return mean_s
