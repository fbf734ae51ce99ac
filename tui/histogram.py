"""Latency percentiles over a sliding window, in constant memory.

At 200 requests/s with 32 tokens each the UI sees over 6,000 inter-token gaps a second; keeping
a minute of them and sorting on every refresh would cost the watched machine more CPU than the UI
is allowed. Instead every value lands in a log-spaced bucket (40 per decade, so a bucket is about
6 % wide) of the histogram of the second it belongs to. A percentile sums the per-second
histograms inside the window and interpolates within one bucket, so it is accurate to a few
percent, which is what a dashboard needs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

BUCKETS_PER_DECADE = 40
MIN_VALUE_S = 1e-5
MAX_VALUE_S = 1e4
_EDGES = np.logspace(
    math.log10(MIN_VALUE_S),
    math.log10(MAX_VALUE_S),
    int(BUCKETS_PER_DECADE * math.log10(MAX_VALUE_S / MIN_VALUE_S)) + 1,
)
_NBINS = len(_EDGES) + 1  # one below the first edge and one above the last


class WindowedHistogram:
    """Per-step histograms of non-negative values, queried over the most recent steps.

    Args:
        step_s: Width of one step (the time resolution of the window).
        keep_steps: How many steps to keep; older ones are dropped as time moves on.
    """

    def __init__(self, step_s: float, keep_steps: int) -> None:
        self.step_s = step_s
        self.keep_steps = keep_steps
        self._steps: dict[int, np.ndarray] = {}
        self._newest = -(1 << 62)

    def add(self, t_s: float, values: Iterable[float] | np.ndarray) -> None:
        """Count ``values`` observed at time ``t_s``."""
        arr = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
        if arr.size == 0:
            return
        k = math.floor(t_s / self.step_s)
        if k <= self._newest - self.keep_steps:
            return  # older than anything kept
        counts = self._steps.get(k)
        if counts is None:
            counts = self._steps[k] = np.zeros(_NBINS, dtype=np.int64)
            if k > self._newest:
                self._newest = k
                self._prune()
        idx = np.searchsorted(_EDGES, arr, side="right")
        counts += np.bincount(idx, minlength=_NBINS)

    def _prune(self) -> None:
        oldest = self._newest - self.keep_steps
        for k in [k for k in self._steps if k <= oldest]:
            del self._steps[k]

    def counts(self, now_s: float, window_s: float) -> np.ndarray:
        """Bucket counts of the values observed in ``(now_s - window_s, now_s]``."""
        hi = math.floor(now_s / self.step_s)
        lo = hi - max(1, round(window_s / self.step_s))
        total = np.zeros(_NBINS, dtype=np.int64)
        for k, c in self._steps.items():
            if lo < k <= hi:
                total += c
        return total

    def quantiles(self, now_s: float, window_s: float, qs: Iterable[float]) -> list[float | None]:
        """The ``qs``-quantiles (0..1) of the window; ``None`` each when it holds no values."""
        return quantiles_of(self.counts(now_s, window_s), qs)

    def clear(self) -> None:
        self._steps.clear()
        self._newest = -(1 << 62)


def quantiles_of(counts: np.ndarray, qs: Iterable[float]) -> list[float | None]:
    """Quantiles of a histogram over this module's buckets, geometric within a bucket."""
    qs = list(qs)
    n = int(counts.sum())
    if n == 0:
        return [None for _ in qs]
    cum = np.cumsum(counts)
    out: list[float | None] = []
    for q in qs:
        rank = q * n
        b = int(np.searchsorted(cum, max(rank, 1e-12), side="left"))
        lo_edge = _EDGES[b - 1] if b >= 1 else 0.0
        hi_edge = _EDGES[b] if b < len(_EDGES) else _EDGES[-1]
        if b == 0 or b >= len(_EDGES):
            out.append(float(hi_edge if b == 0 else lo_edge))
            continue
        before = cum[b - 1] if b >= 1 else 0
        frac = (rank - before) / max(counts[b], 1)
        out.append(float(lo_edge * (hi_edge / lo_edge) ** min(max(frac, 0.0), 1.0)))
    return out
