"""What the host adds to a step: busy preprocessing workers, cold shapes, the machine's drift."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable

import numpy as np

from edgeserve.records import EngineStep, RequestRecord
from sim.fit.engine_kv import KVCache
from sim.fit.least_squares import MIN_SAMPLES, StageFit
from sim.fit.step_fit import step_prediction

Gap = Callable[[EngineStep], float]  # the modelled gap between a step and the next


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

    def pieces(self, a: float, b: float) -> list[tuple[float, float]]:
        """The covered parts of [a, b]."""
        out = []
        i = bisect.bisect_right(self.ends, a)
        while i < len(self.starts) and self.starts[i] < b:
            lo, hi = max(a, self.starts[i]), min(b, self.ends[i])
            if hi > lo:
                out.append((lo, hi))
            i += 1
        return out


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


def worker_seconds_split(s: EngineStep, workers: dict[int, Intervals], own_s: float,
                         free_cores: int) -> tuple[float, float]:
    """The seconds workers were busy in the first ``own_s`` seconds of step ``s`` — its period as
    the step model prices it, not the span it ran, which the contention has already lengthened
    (the simulator lengthens a step by κ per second of that overlap,
    :meth:`sim.core.cpu_pool.CpuPool.step_stretch`) — in two parts: the worker-seconds while at
    most ``free_cores`` workers were busy (the cores the engine's threads leave free), and those
    of the workers beyond them, which take cores from the engine. Measured on the 2-core Zen 4 (one engine
    thread), a decode step beside one busy worker took 1.17 × its quiet time, beside two 2.2 ×:
    the second worker costs the step several times what the first does."""
    a = s.t_s - s.duration_s
    edges = sorted(e for iv in workers.values() for lo, hi in iv.pieces(a, a + own_s)
                   for e in ((lo, 1), (hi, -1)))
    inside = beyond = 0.0
    n, t = 0, a
    for e, d in edges:
        if e > t:
            inside += min(n, free_cores) * (e - t)
            beyond += max(0, n - free_cores) * (e - t)
            t = e
        n += d
    return inside, beyond


def contention_s(s: EngineStep, workers: dict[int, Intervals], period_s: float, free_cores: int,
                 kappa: float, kappa_over: float | None) -> float:
    """The seconds the busy workers add to step ``s`` (``period_s`` its modelled period: its own
    time and the gap before the next), as the simulator prices it: κ per worker-second within
    the free cores, ``kappa_over`` (κ when None) per worker-second beyond them."""
    inside, beyond = worker_seconds_split(s, workers, period_s, free_cores)
    return kappa * inside + (kappa if kappa_over is None else kappa_over) * beyond


def _worker_spans(recs: list[RequestRecord], steps: list[EngineStep],
                  through_encode: bool) -> list[tuple[RequestRecord, int, float, float]]:
    """Each preprocessed request's (record, workers busy as it started — itself included —,
    span ``T``, seconds ``O`` of it inside steps). A gap under ``ENGINE_GAP_S`` between two steps
    counts as inside: the simulated engine runs its steps back to back, the gap in their time."""
    busy = worker_busy(recs, through_encode=through_encode)
    spans = sorted((x.t_s - x.duration_s, x.t_s) for x in steps)
    stepping = Intervals((a, nxt[0] if nxt[0] - b < ENGINE_GAP_S else b)
                         for (a, b), nxt in zip(spans, [*spans[1:], (math.inf, math.inf)],
                                                strict=True))
    out = []
    for r in recs:
        t = float(r.preproc_start_s)  # type: ignore[arg-type]
        end = r.encode_end_s if through_encode and r.encode_end_s is not None \
            else r.normalize_end_s
        demand = sum(1 for iv in busy.values() if iv.fraction(t, t + 1e-6) > 0.5)
        span = float(end) - t if end is not None else 0.0
        inside = stepping.fraction(t, t + span) * span if span > 0.0 else 0.0
        out.append((r, max(demand, 1), span, inside))
    return out


def _work_s(span: float, inside: float, busy: int, host_cores: int, engine_demand: float) -> float:
    s_out = max(1.0, busy / host_cores)
    s_in = max(1.0, (busy + engine_demand) / host_cores)
    return (span - inside) / s_out + inside / s_in


def worker_stretch(recs: Iterable[RequestRecord], steps: list[EngineStep], host_cores: int,
                   engine_demand: float, through_encode: bool = False) -> dict[int, float]:
    """Each request's preprocessing stretch as the simulator prices it
    (:class:`sim.core.cpu_pool.CpuPool`): its span ran ``s_out = max(1, busy / host_cores)``
    times its work while the engine was between steps and ``s_in = max(1, (busy +
    engine_demand) / host_cores)`` times while a step ran (``busy``: the workers busy as its
    work started, itself included; ``engine_demand``: the threads a step keeps busy, or
    :func:`fit_engine_demand`'s figure). With ``O`` the seconds of its span ``T`` inside steps,
    its work is ``W = (T − O) / s_out + O / s_in`` and its stretch ``T / W``. Keyed by
    ``id(record)``; the calibration divides the measured stage times by it, so that the
    simulator, stretching them again, gives back what was measured instead of counting the
    contention twice."""
    recs = [r for r in recs if r.preproc_start_s is not None and r.worker is not None]
    if host_cores <= 0:
        return {id(r): 1.0 for r in recs}
    out = {}
    for r, busy, span, inside in _worker_spans(recs, steps, through_encode):
        if span <= 0.0:
            out[id(r)] = max(1.0, busy / host_cores)
            continue
        out[id(r)] = span / _work_s(span, inside, busy, host_cores, engine_demand)
    return out


DEMAND_STEP = 0.05  # the resolution of fit_engine_demand's search, in threads
MIN_OVERLAPPED = 12  # requests with some of their span inside steps, for fit_engine_demand


def fit_engine_demand(recs: Iterable[RequestRecord], steps: list[EngineStep], host_cores: int,
                      engine_threads: int, through_encode: bool = False
                      ) -> tuple[float, int] | None:
    """The engine's demand on the shared cores while a step runs, in threads, and the requests
    it rests on; None where the trace does not tell it.

    ``s_in = (busy + D) / host_cores`` with ``D`` the engine's threads assumes the scheduler
    shares the cores evenly. It does not: on one core shared by a worker and vLLM's CPU engine
    (AMX Xeon, 2026-12-07) a worker's stage took 0.67–0.78 s longer per second inside steps, a
    quarter of its speed where an even share gives half. The requests of one source size do the
    same work, whatever part of their span the steps covered; ``D`` is the value (searched from
    0 to ``4 × host_cores`` threads) under which their works ``W`` (:func:`worker_stretch`)
    spread least, as the sum over sizes of the variance of ``log W``. Sizes with fewer than three
    requests are left out, and at least ``MIN_OVERLAPPED`` requests that ran partly or wholly
    inside steps must be of sizes whose requests' inside fractions span 0.3 or more (the
    contrast that tells the two rates apart)."""
    recs = [r for r in recs if r.preproc_start_s is not None and r.worker is not None]
    if host_cores <= 0 or not steps:
        return None
    groups: dict[tuple[int, int], list[tuple[int, float, float]]] = {}
    for r, busy, span, inside in _worker_spans(recs, steps, through_encode):
        if span > 0.0:
            groups.setdefault((r.source_width, r.source_height), []).append((busy, span, inside))
    rows = [g for g in groups.values() if len(g) >= 3]
    # a size tells the in-step rate where its requests ran inside steps to different extents
    told = [g for g in rows if np.ptp([inside / span for _, span, inside in g]) >= 0.3]
    if sum(1 for g in told for _, span, inside in g if inside / span > 0.05) < MIN_OVERLAPPED:
        return None
    arrays = [np.asarray(g, dtype=float) for g in rows]

    def spread(d: float) -> float:
        total = 0.0
        for a in arrays:
            busy, span, inside = a[:, 0], a[:, 1], a[:, 2]
            s_out = np.maximum(1.0, busy / host_cores)
            s_in = np.maximum(1.0, (busy + d) / host_cores)
            total += float(np.var(np.log((span - inside) / s_out + inside / s_in)))
        return total

    grid = np.arange(0.0, 4.0 * host_cores + DEMAND_STEP / 2, DEMAND_STEP)
    best = float(grid[int(np.argmin([spread(float(d)) for d in grid]))])
    return round(best, 2), sum(len(g) for g in rows)


ENGINE_GAP_S = 0.05  # two steps closer than this: the engine worked between them


def contention(steps: list[EngineStep], fit: StageFit, kv_cache_tokens: KVCache,
               workers: dict[int, Intervals], sizes: tuple[int, ...] = (),
               free_cores: int = 1, gap: Gap | None = None) -> tuple[float, float | None, int]:
    """How much busy preprocessing workers lengthen an engine step:
    ``step ≈ fitted + κ·x₁ + κ₊·x₂``, ``x₁`` the worker-seconds of the step's fitted time while
    at most ``free_cores`` workers were busy and ``x₂`` those beyond them
    (:func:`worker_seconds_split`); least squares through the origin, non-negative, on the steps
    that overlapped a worker, each weighted by 1/fitted² — a step's own noise grows with its
    length (a cv), so a 1 s encoder step that a worker overlapped for 25 ms says next to nothing
    about κ, while a 5 ms decode step overlapped throughout says much. Returns ``(κ, κ₊, steps)``;
    κ₊ is None where fewer than MIN_SAMPLES steps had workers beyond the free cores (the
    simulator then uses κ for them too). κ = 1 means each second of worker activity costs the
    step a second. ``gap``: the modelled gap after a step; the worker-seconds are counted over
    the step's fitted time and that gap, the period the simulated engine lengthens."""
    rows = contention_rows(steps, fit, kv_cache_tokens, workers, sizes, free_cores, gap)
    if len(rows) < MIN_SAMPLES:
        return 0.0, None, len(rows)
    k1, k2 = fit_kappas(rows)
    return k1, k2, len(rows)


def fit_kappas(rows: np.ndarray) -> tuple[float, float | None]:
    """``(κ, κ₊)`` from :func:`contention_rows`' rows (non-negative weighted least squares
    through the origin; κ₊ None with fewer than MIN_SAMPLES rows beyond the free cores)."""
    x, y, w = rows[:, :2], rows[:, 2], rows[:, 3] ** 2
    over = int(np.count_nonzero(x[:, 1] > 0))
    cols = [0, 1] if over >= MIN_SAMPLES else [0]
    while True:
        a = x[:, cols]
        gram = (a * w[:, None]).T @ a
        rhs = (a * w[:, None]).T @ y
        coef = np.linalg.lstsq(gram, rhs, rcond=None)[0]
        if len(cols) == 1 or (coef >= 0).all():
            break
        cols = [c for c, v in zip(cols, coef, strict=True) if v >= 0] or [0]
    got = dict(zip(cols, (max(0.0, float(v)) for v in coef), strict=True))
    k1 = got.get(0, 0.0)
    k2 = got.get(1, 0.0) if over >= MIN_SAMPLES else None
    return k1, k2


def contention_rows(steps: list[EngineStep], fit: StageFit, kv_cache_tokens: KVCache,
                    workers: dict[int, Intervals], sizes: tuple[int, ...] = (),
                    free_cores: int = 1, gap: Gap | None = None) -> np.ndarray:
    """The rows :func:`contention` fits, one per step a worker overlapped for at least 5 % of
    its fitted time: ``[x₁, x₂, step − fitted, 1/fitted (the residual's weight), t_s]``
    (worker-seconds in the step's fitted time within and beyond the free cores,
    :func:`worker_seconds_split`)."""
    rows = []
    for s in steps:
        if s.duration_s <= 0:
            continue
        pred = step_prediction(fit, s, kv_cache_tokens, sizes)
        if pred <= 0:
            continue
        period = pred + (gap(s) if gap is not None else 0.0)
        inside, beyond = worker_seconds_split(s, workers, period, free_cores)
        if inside + beyond < 0.05 * period:
            continue
        rows.append((inside, beyond, s.duration_s - pred, 1.0 / pred, s.t_s))
    return np.asarray(rows, dtype=float).reshape(len(rows), 5)


def cold_shape_factor(cold: list[EngineStep], fit: StageFit, kv_cache_tokens: KVCache,
                      workers: dict[int, Intervals], sizes: tuple[int, ...],
                      kappa: float, kappa_over: float | None = None,
                      free_cores: int = 1, gap: Gap | None = None) -> tuple[float, int]:
    """How much longer the steps that ran a shape the first time took than the model says
    (contention included): ``Σ measured / Σ modelled − 1`` over them, at least 0."""
    if len(cold) < MIN_SAMPLES:
        return 0.0, len(cold)
    measured = modelled = 0.0
    for s in cold:
        own = step_prediction(fit, s, kv_cache_tokens, sizes)
        period = own + (gap(s) if gap is not None else 0.0)
        modelled += contention_s(s, workers, period, free_cores, kappa, kappa_over) + own
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
