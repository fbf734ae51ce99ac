"""What the host adds to a step: busy preprocessing workers, cold shapes, the machine's drift."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

import numpy as np

from edgeserve.records import EngineStep, RequestRecord
from sim.fit.engine_kv import KVCache
from sim.fit.least_squares import MIN_SAMPLES, StageFit
from sim.fit.step_fit import step_prediction


class Intervals:
    """A union of time intervals, for "what fraction of [a, b] was covered"."""

    def __init__(self, spans: Iterable[tuple[float, float]]) -> None:
        merged: list[list[float]] = []
        for a, b in sorted(spans):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            elif b > a:
                merged.append([a, b])
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]
        self._cum = [0.0]
        for a, b in merged:
            self._cum.append(self._cum[-1] + b - a)

    def _covered_until(self, t: float) -> float:
        i = bisect.bisect_right(self.starts, t)  # intervals starting at or before t
        if i == 0:
            return 0.0
        return self._cum[i - 1] + min(t, self.ends[i - 1]) - self.starts[i - 1]

    def fraction(self, a: float, b: float) -> float:
        return (self._covered_until(b) - self._covered_until(a)) / (b - a) if b > a else 0.0


def worker_busy(recs: Iterable[RequestRecord],
                through_encode: bool = False) -> dict[int, Intervals]:
    """Each preprocessing worker's busy spans: decode start → normalize end, or → encode end
    (where there is one) with ``through_encode`` (the encoder ran in the workers)."""
    spans: dict[int, list[tuple[float, float]]] = {}
    for r in recs:
        end = r.encode_end_s if through_encode and r.encode_end_s is not None \
            else r.normalize_end_s
        if r.worker is not None and r.preproc_start_s is not None and end is not None:
            spans.setdefault(r.worker, []).append((r.preproc_start_s, end))
    return {w: Intervals(v) for w, v in spans.items()}


def worker_seconds(s: EngineStep, workers: dict[int, Intervals]) -> float:
    """The seconds of step ``s`` during which workers were busy, summed over the workers."""
    return sum(iv.fraction(s.t_s - s.duration_s, s.t_s) for iv in workers.values()) * s.duration_s


def contention(steps: list[EngineStep], fit: StageFit, kv_cache_tokens: KVCache,
               workers: dict[int, Intervals], sizes: tuple[int, ...] = ()) -> tuple[float, int]:
    """How much a busy preprocessing worker lengthens an engine step: ``step ≈ fitted + κ·x``,
    ``x`` the seconds of the step during which workers were busy (summed over workers); least
    squares through the origin on the steps that overlapped a worker, each weighted by
    1/fitted² — a step's own noise grows with its length (a cv), so a 1 s encoder step that a
    worker overlapped for 25 ms says next to nothing about κ, while a 5 ms decode step overlapped
    throughout says much; unweighted, the long steps' noise would set κ even where the overlapped
    decode steps were no slower than the others. Returns ``(κ, steps)``: κ = 1 means
    each second of worker activity costs the step a second."""
    rows = contention_rows(steps, fit, kv_cache_tokens, workers, sizes)
    if len(rows) < MIN_SAMPLES:
        return 0.0, len(rows)
    xa, ya, wa = rows[:, 0], rows[:, 1], rows[:, 2] ** 2
    return max(0.0, float((wa * xa) @ ya / ((wa * xa) @ xa))), len(rows)


def contention_rows(steps: list[EngineStep], fit: StageFit, kv_cache_tokens: KVCache,
                    workers: dict[int, Intervals], sizes: tuple[int, ...] = ()) -> np.ndarray:
    """The rows :func:`contention` fits, one per step a worker overlapped for at least 5 % of
    it: ``[worker seconds, step − fitted, 1/fitted (the residual's weight), t_s]``."""
    rows = []
    for s in steps:
        if s.duration_s <= 0:
            continue
        x = worker_seconds(s, workers)
        if x < 0.05 * s.duration_s:
            continue
        pred = step_prediction(fit, s, kv_cache_tokens, sizes)
        if pred <= 0:
            continue
        rows.append((x, s.duration_s - pred, 1.0 / pred, s.t_s))
    return np.asarray(rows, dtype=float).reshape(len(rows), 4)


def cold_shape_factor(cold: list[EngineStep], fit: StageFit, kv_cache_tokens: KVCache,
                      workers: dict[int, Intervals], sizes: tuple[int, ...],
                      kappa: float) -> tuple[float, int]:
    """How much longer the steps that ran a shape the first time took than the model says
    (contention included): ``Σ measured / Σ modelled − 1`` over them, at least 0."""
    if len(cold) < MIN_SAMPLES:
        return 0.0, len(cold)
    measured = modelled = 0.0
    for s in cold:
        x = worker_seconds(s, workers)
        modelled += kappa * x + step_prediction(fit, s, kv_cache_tokens, sizes)
        measured += s.duration_s
    return max(0.0, measured / modelled - 1.0) if modelled > 0 else 0.0, len(cold)


DRIFT_MIN_STEPS = 50  # long quiet steps needed to fit the drift


DRIFT_MAX_LAG_S = 30.0


DRIFT_TAUS_S = tuple(0.25 * 1.25 ** k for k in range(30))  # 0.25 s … 160 s


def fit_drift_start(steps: list[EngineStep], runs: list[tuple[int, int]], fit: StageFit,
                    kv_cache_tokens: KVCache, sizes: tuple[int, ...], tau_s: float,
                    keep: set[int], min_step_s: float = 0.02) -> float:
    """Where a fresh server's drift starts (log units): the mean log residual of each run's long
    steps (indices in ``keep``) over its first ``τ`` seconds, less the run's own mean, divided by
    the mean of ``exp(−t/τ)`` over that window — the offset an OU process starting there and
    relaxing with ``τ`` would show. 0 when no run has steps early enough."""
    num = den = 0.0
    for a, b in runs:
        rows = []
        for i in range(a, b):
            s = steps[i]
            if i not in keep or s.duration_s <= 0:
                continue
            pred = step_prediction(fit, s, kv_cache_tokens, sizes)
            if pred >= min_step_s:
                rows.append((s.t_s - s.duration_s, math.log(s.duration_s / pred)))
        if len(rows) < DRIFT_MIN_STEPS:
            continue
        t0 = min(r[0] for r in rows)
        mean = sum(r[1] for r in rows) / len(rows)
        early = [(t - t0, r - mean) for t, r in rows if t - t0 < tau_s]
        num += sum(r for _, r in early)
        den += sum(math.exp(-t / tau_s) for t, _ in early)
    return num / den if den > 0 else 0.0


def fit_drift(steps: list[EngineStep], fit: StageFit, kv_cache_tokens: KVCache,
              sizes: tuple[int, ...] = (), min_step_s: float = 0.02) -> tuple[float, float, int]:
    """The machine's slow drift, from the residuals of the long steps (``steps``: ones no worker
    overlapped): ``r = log(measured / fitted)`` less its mean; the covariance of two steps
    ``Δt`` apart is modelled as ``sd²·exp(−Δt/τ)`` (an Ornstein–Uhlenbeck process) and fitted by
    least squares over every pair within ``DRIFT_MAX_LAG_S`` — ``sd²`` in closed form for each
    ``τ`` of a grid, the best pair kept. The rest of the residual variance is the steps' own
    noise. Returns ``(sd, τ, steps used)``; ``(0, 0, n)`` with too few steps or no positive
    covariance. Steps shorter than ``min_step_s`` are left out: their ratio is mostly jitter."""
    rows = []
    for s in steps:
        pred = step_prediction(fit, s, kv_cache_tokens, sizes)
        if s.duration_s > 0 and pred >= min_step_s:
            rows.append((s.t_s, math.log(s.duration_s / pred)))
    if len(rows) < DRIFT_MIN_STEPS:
        return 0.0, 0.0, len(rows)
    rows.sort()
    t = np.asarray([r[0] for r in rows])
    r = np.asarray([r[1] for r in rows])
    r -= r.mean()
    lags, prods = [], []
    for i in range(len(t) - 1):
        j = int(np.searchsorted(t, t[i] + DRIFT_MAX_LAG_S, side="right"))
        if j > i + 1:
            lags.append(t[i + 1:j] - t[i])
            prods.append(r[i] * r[i + 1:j])
    if not lags:
        return 0.0, 0.0, len(rows)
    dt, p = np.concatenate(lags), np.concatenate(prods)
    best: tuple[float, float, float] | None = None  # (sse, s2, tau)
    for tau in DRIFT_TAUS_S:
        e = np.exp(-dt / tau)
        s2 = float(p @ e / (e @ e))
        sse = float(p @ p) - s2 * float(p @ e)
        if s2 > 0 and (best is None or sse < best[0]):
            best = (sse, s2, tau)
    if best is None:
        return 0.0, 0.0, len(rows)
    s2 = min(best[1], float(r.var()))
    return math.sqrt(s2), best[2], len(rows)
