"""When requests are sent: an open-loop arrival process, or a closed loop of fixed concurrency.

Think of a camera feed or a crowd of users. An *open loop* sends requests on a clock that does not
care how the server is doing: the gaps between arrivals are drawn from a gamma distribution with
mean ``1 / rate_rps`` and shape ``burstiness`` (1.0 is a Poisson process; below 1 requests come in
clumps, above 1 they come more evenly; infinity is a metronome). This is what ``vllm bench serve``
does (``--request-rate`` and ``--burstiness``), and it is the only honest way to find where a
server saturates, because the queue is allowed to grow.

A *closed loop* (``max_concurrency``) keeps at most N requests in flight, like N users who each
wait for an answer before asking again. With ``rate_rps = inf`` and a concurrency cap this is the
classic fixed-concurrency benchmark; with both, arrivals follow the clock but wait for a free slot.

A run ends after ``num_requests`` requests or after ``duration_s`` seconds of arrivals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(slots=True, frozen=True)
class ArrivalConfig:
    """How requests arrive. Exactly one of ``num_requests`` and ``duration_s`` ends the run."""

    rate_rps: float = math.inf  # mean offered rate; inf sends everything at once
    burstiness: float = 1.0  # gamma shape of the gaps; 1.0 = Poisson
    max_concurrency: int | None = None  # closed-loop cap on requests in flight
    num_requests: int | None = 100
    duration_s: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.rate_rps > 0:
            raise ValueError(f"request rate must be > 0 req/s (inf for all at once), got {self.rate_rps}")
        if not self.burstiness > 0:
            raise ValueError(f"burstiness must be > 0 (1.0 = Poisson), got {self.burstiness}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max concurrency must be >= 1, got {self.max_concurrency}")
        if (self.num_requests is None) == (self.duration_s is None):
            raise ValueError("give exactly one of a request count and a duration")
        if self.num_requests is not None and self.num_requests < 1:
            raise ValueError(f"request count must be >= 1, got {self.num_requests}")
        if self.duration_s is not None:
            if not self.duration_s > 0:
                raise ValueError(f"duration must be > 0 s, got {self.duration_s}")
            if math.isinf(self.rate_rps):
                raise ValueError("a duration needs a finite request rate (how many would arrive?)")

    @property
    def label(self) -> str:
        """Short human description, e.g. ``2.0 req/s (Poisson)`` or ``concurrency 4``."""
        parts = []
        if not math.isinf(self.rate_rps):
            shape = "Poisson" if self.burstiness == 1.0 else f"gamma k={self.burstiness:g}"
            parts.append(f"{self.rate_rps:g} req/s ({shape})")
        if self.max_concurrency is not None:
            parts.append(f"concurrency {self.max_concurrency}")
        return ", ".join(parts) or "all at once"


def gaps_s(rate_rps: float, burstiness: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` inter-arrival gaps: gamma(shape=burstiness, scale=1/(rate·burstiness)), mean 1/rate.

    The coefficient of variation of the gaps is ``1/sqrt(burstiness)``.
    """
    if math.isinf(rate_rps):
        return np.zeros(n)
    if math.isinf(burstiness):
        return np.full(n, 1.0 / rate_rps)
    return rng.gamma(shape=burstiness, scale=1.0 / (rate_rps * burstiness), size=n)


def arrival_offsets_s(config: ArrivalConfig) -> np.ndarray:
    """Send times of all requests in seconds from the start, the first one at 0.

    By count: ``num_requests`` offsets. By duration: every arrival before ``duration_s``.
    The same config (seed included) always gives the same schedule, so systems under comparison
    see identical arrivals.
    """
    rng = np.random.default_rng(config.seed)
    if config.num_requests is not None:
        gaps = gaps_s(config.rate_rps, config.burstiness, config.num_requests - 1, rng)
        return np.concatenate([[0.0], np.cumsum(gaps)])
    assert config.duration_s is not None
    expected = config.rate_rps * config.duration_s
    n = int(expected + 10 * math.sqrt(expected + 1) / min(1.0, config.burstiness) + 10)
    offsets = np.concatenate([[0.0], np.cumsum(gaps_s(config.rate_rps, config.burstiness, n, rng))])
    while offsets[-1] < config.duration_s:  # a very unlucky draw: extend
        more = gaps_s(config.rate_rps, config.burstiness, n, rng)
        offsets = np.concatenate([offsets, offsets[-1] + np.cumsum(more)])
    return offsets[offsets < config.duration_s]
