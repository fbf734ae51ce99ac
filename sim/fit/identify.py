"""Which fitted terms the calibration's data identify, and how sure each coefficient is.

Every fit of a calibration is bootstrapped (:mod:`sim.fit.coef_bootstrap`: rows resampled in
blocks of time, refitted). A term is *not identified* when fewer than :data:`MIN_TERM_ROWS` rows
had its feature non-zero, or when its 90 % interval reaches zero — the data cannot tell it from
nothing, and a coefficient fitted on noise is then applied at full weight to every request of a
prediction. Such a term (of the step model, the gap between steps or a request-level stage) is
dropped and the model refitted without it, one term at a time; the contention coefficients (κ,
and κ₊ beyond the free cores, fitted after the step model on the steps a worker overlapped) are
each dropped the same way, and otherwise shrunk towards zero by ``κ² / (κ² + se²)`` (the posterior mean under a prior as
wide as the estimate itself): 1.21 with a standard error of 0.5 becomes 1.03, 0.30 with 0.05
stays 0.29. Each such change is one line of :attr:`Calibration.identification`, which
``edgeserve calibrate`` prints.
"""

from __future__ import annotations

import math

import numpy as np

from edgeserve.records import EngineStep
from sim.fit.calibration import Calibration
from sim.fit.coef_bootstrap import (
    BLOCK_S,
    LEVEL,
    RESAMPLES,
    FitSamples,
    bootstrap_fit,
    collinear,
)
from sim.fit.engine_kv import KVCache
from sim.fit.host_effects import Intervals, contention_rows
from sim.fit.least_squares import StageFit, fit_linear
from sim.fit.step_fit import STEP_FEATURES, fit_step_gap, fit_steps, gap_rows, step_rows
from sim.scenario.uncertainty import ModelUncertainty, ProfileUncertainty

MIN_TERM_ROWS = 10  # rows with a term's feature non-zero below which it is not fitted
CONTENTION_TERM = "step_extra_s_per_worker_s"
CONTENTION_OVER_TERM = "step_extra_s_per_oversubscribed_worker_s"


def unidentified(u: ModelUncertainty) -> dict[str, str]:
    """Term → why the data do not identify it (the intercept is always kept)."""
    out = {}
    for k, t in u.terms.items():
        if k == "base_s":
            continue
        if t.n < MIN_TERM_ROWS:
            out[k] = f"only {t.n} rows with it non-zero (need {MIN_TERM_ROWS})"
        elif t.interval[0] <= 0:
            out[k] = (f"its {LEVEL * 100:.0f} % interval {t.interval[0]:.3g} … "
                      f"{t.interval[1]:.3g} reaches zero")
    return out


def worst(u: ModelUncertainty, bad: dict[str, str]) -> dict[str, str]:
    """Of the unidentified terms ``bad``, the ones to drop now: every term with too few rows
    (no other term changes that), else the one term least distinguishable from zero (smallest
    value / standard error). One at a time, because two terms that move together (image tokens
    and their square, over a few image sizes) each look unidentified beside the other, while
    either alone is well measured."""
    few = {k: why for k, why in bad.items() if u.terms[k].n < MIN_TERM_ROWS}
    if few or not bad:
        return few
    k = min(bad, key=lambda k: u.terms[k].value / u.terms[k].se if u.terms[k].se > 0 else math.inf)
    return {k: bad[k]}


def step_samples(steps: list[EngineStep], fit: StageFit, kv: KVCache, sizes: tuple[int, ...],
                 embeds: bool, run_of: dict[int, int], exclude: frozenset[str],
                 window: int = 1, by_seconds: bool = False) -> FitSamples:
    """The step model's rows with the final pass's weights (1/fitted, as :func:`fit_steps`;
    none ``by_seconds``)."""
    arr = step_rows(steps, kv, sizes, embeds, exclude, window)
    coef = np.asarray([fit.per.get(k, 0.0) for k in STEP_FEATURES])
    pred = fit.base_s + arr[:, 2:] @ coef
    floor = max(float(np.median(arr[:, 0])) * 0.1, 1e-6) if len(arr) else 1e-6
    by_t = {s.t_s: run_of.get(id(s), 0) for s in steps}
    runs = [by_t.get(t, 0) for t in arr[:, 1]] if window <= 1 else [0] * len(arr)
    return FitSamples.of(STEP_FEATURES, arr[:, 2:], arr[:, 0], arr[:, 1], runs,
                         None if by_seconds else 1.0 / np.maximum(pred, floor))


def identify_step(cal: Calibration, steps: list[EngineStep], kv: KVCache, sizes: tuple[int, ...],
                  embeds: bool, run_of: dict[int, int], *, seed: int = 0,
                  window: int = 1, exclude: frozenset[str] = frozenset(),
                  by_seconds: bool = False) -> ModelUncertainty | None:
    """Bootstrap ``cal.step`` (fitted on ``steps``), drop the terms it does not identify and refit
    without them until every kept term is identified; ``cal.step`` becomes the final fit."""
    if cal.step is None:
        return None
    dropped: dict[str, str] = {}
    for _ in range(len(STEP_FEATURES) + 1):
        s = step_samples(steps, cal.step, kv, sizes, embeds, run_of, exclude | frozenset(dropped),
                         window, by_seconds)
        bad = collinear(s, [k for k in STEP_FEATURES if k in cal.step.per])
        u = bootstrap_fit(s, cal.step.base_s, cal.step.per, seed=seed)
        bad = bad or worst(u, unidentified(u))
        if not bad:
            break
        fit = fit_steps(steps, kv, sizes, embeds,
                        exclude=exclude | frozenset(dropped) | frozenset(bad), window=window,
                        by_seconds=by_seconds)
        if fit is None:
            break
        for k, why in bad.items():
            cal.identification.append(f"engine step term {k} dropped: {why}")
        dropped.update(bad)
        cal.step = fit
    return ModelUncertainty(u.terms, u.covariance, dropped)


def identify_gap(cal: Calibration, steps: list[EngineStep], features: tuple[str, ...],
                 run_of: dict[int, int], *, seed: int = 0) -> ModelUncertainty | None:
    """The intervals of the gap between steps; a slope the gaps do not identify is dropped and
    the gap refitted without it (:func:`~sim.fit.step_fit.fit_step_gap`)."""
    arr = gap_rows(steps, features)
    if cal.step is None or len(arr) == 0:
        return None
    by_t = {s.t_s: run_of.get(id(s), 0) for s in steps}
    s = FitSamples.of(features, arr[:, 2:], arr[:, 0], arr[:, 1], [by_t.get(t, 0) for t in arr[:, 1]])
    dropped: dict[str, str] = {}
    for _ in range(len(features) + 1):
        u = bootstrap_fit(s, cal.step_gap_s, cal.step_gap_per, seed=seed)
        bad = worst(u, unidentified(u))
        if not bad:
            break
        for k, why in bad.items():
            cal.identification.append(f"gap between steps term {k} dropped: {why}")
        dropped.update(bad)
        cal.step_gap_s, cal.step_gap_per = fit_step_gap(
            steps, features=tuple(f for f in features if f not in dropped))
    return ModelUncertainty(u.terms, u.covariance, dropped)


def identify_contention(cal: Calibration, steps: list[EngineStep], kv: KVCache,
                        workers: dict[int, Intervals], sizes: tuple[int, ...],
                        run_of: dict[int, int], *, seed: int = 0) -> ModelUncertainty | None:
    """Bootstrap κ (and κ₊, where fitted); drop each that is not identified, else shrink it by
    ``κ²/(κ² + se²)``. A dropped κ₊ falls back to κ (None), a dropped κ to 0; either way the
    raw value is kept in ``shrunk_from``."""
    if cal.step is None or not cal.contention_n:
        return None
    arr = contention_rows(steps, cal.step, kv, workers, sizes, cal.free_cores, cal.gap_s)
    by_t = {s.t_s: run_of.get(id(s), 0) for s in steps}
    raw = {CONTENTION_TERM: cal.contention}
    if cal.contention_over is not None:
        raw[CONTENTION_OVER_TERM] = cal.contention_over
    names = [CONTENTION_TERM, CONTENTION_OVER_TERM]
    s = FitSamples.of(names, arr[:, :2], arr[:, 2], arr[:, 4],
                      [by_t.get(t, 0) for t in arr[:, 4]], arr[:, 3], intercept=False)
    u = bootstrap_fit(s, 0.0, raw, seed=seed)
    bad = {k: why for k, why in unidentified(u).items() if raw[k] > 0}
    shrunk: dict[str, float] = {}
    for k, value in raw.items():
        if value <= 0:
            continue
        t = u.terms[k]
        what = ("contention" if k == CONTENTION_TERM
                else "contention beyond the free cores")
        if k in bad:
            new = 0.0 if k == CONTENTION_TERM else None
            shrunk[k] = value
            cal.identification.append(f"{what} {value:.3g} s per worker-second dropped: "
                                      f"{bad[k]} ({cal.contention_n} steps)")
        else:
            factor = value * value / (value * value + t.se * t.se)
            new = value * factor
            if factor < 1:
                shrunk[k] = value
            if factor < 0.95:
                cal.identification.append(
                    f"{what} {value:.3g} s per worker-second shrunk to {new:.3g}: its "
                    f"standard error {t.se:.2g} is {t.se / value * 100:.0f} % of it "
                    f"({cal.contention_n} steps, {LEVEL * 100:.0f} % interval "
                    f"{t.interval[0]:.3g} … {t.interval[1]:.3g})")
        if k == CONTENTION_TERM:
            cal.contention = float(new or 0.0)
        else:
            cal.contention_over = new
    return ModelUncertainty(u.terms, u.covariance, dict(bad), shrunk_from=shrunk)


def identify_stage(cal: Calibration, stage: str, *, seed: int = 0) -> ModelUncertainty:
    """:func:`identify_step` for a request-level stage fit (rows: requests, blocked by their
    arrival): terms the requests do not identify are dropped and the stage refitted without
    them. Where every request had one size, a fixed cost and a per-pixel one cannot be told
    apart: the stage keeps its first term through zero (that size's mean time per unit)."""
    cal.fits[stage], u = identify_rows(cal.samples[stage], cal.fits[stage], stage,
                                       cal.identification, seed=seed)
    return u


def identify_rows(s: FitSamples, fit: StageFit, stage: str, notes: list[str], *,
                  seed: int = 0) -> tuple[StageFit, ModelUncertainty]:
    """:func:`identify_stage` on the rows ``s`` of ``fit``: the final fit and its uncertainty;
    a line per dropped term goes to ``notes``."""
    dropped: dict[str, str] = {}
    live = [k for k in s.names if k in fit.per]
    if live and all(np.ptp(s.x[:, s.names.index(k)]) == 0 for k in live):
        # one size only: a fixed cost and a per-unit one predict alike here; the per-unit reading
        # (through zero) is kept, as the work of decoding or resizing grows with the pixels
        keep, j = live[0], s.names.index(live[0])
        for k in live[1:]:
            dropped[k] = f"every row has one size: it cannot be told from {keep}"
            notes.append(f"{stage} term {k} dropped: {dropped[k]}")
        x = np.zeros_like(s.x)
        x[:, j] = s.x[:, j]
        coef = float(s.y.sum() / x[:, j].sum())
        ratio = s.y / (coef * x[:, j])
        fit = StageFit(stage, len(s.y), 0.0, {keep: coef}, float(np.std(ratio)), 0.0, fit.note)
        s = FitSamples(s.names, x, s.y, s.t_s, s.run, s.weights, intercept=False)
    for _ in range(len(s.names) + 1):
        bad = collinear(s, [k for k in s.names if k in fit.per])
        u = bootstrap_fit(s, fit.base_s, fit.per, seed=seed)
        bad = bad or worst(u, unidentified(u))
        if not bad:
            break
        x = s.x.copy()
        for k in bad:
            x[:, s.names.index(k)] = 0.0
            notes.append(f"{stage} term {k} dropped: {bad[k]}")
        dropped.update(bad)
        note = fit.note
        fit = fit_linear(stage, x, s.y, s.names)
        fit.note = note
        s = FitSamples(s.names, x, s.y, s.t_s, s.run, s.weights, intercept=True)
    return fit, ModelUncertainty(u.terms, u.covariance, dropped)


def stage_uncertainty(cal: Calibration, *, seed: int = 0) -> dict[str, ModelUncertainty]:
    """:func:`identify_stage` for every request-level stage fit that kept its rows."""
    return {stage: identify_stage(cal, stage, seed=seed)
            for stage in list(cal.fits) if stage in cal.samples}


def level_spread(levels: list[float]) -> float:
    """The sample standard deviation of the log speed levels of several calibration traces
    (0 with fewer than two): how far a fresh server's level falls from another's."""
    logs = [math.log(v) for v in levels if v > 0]
    return float(np.std(logs, ddof=1)) if len(logs) >= 2 else 0.0


def profile_uncertainty(models: dict[str, ModelUncertainty | None], levels: list[float],
                        worker_levels: list[float] | None = None,
                        worker_stages: list[str] | None = None) -> ProfileUncertainty:
    wl = worker_levels or []
    return ProfileUncertainty({k: m for k, m in models.items() if m is not None}, LEVEL,
                              RESAMPLES, BLOCK_S, round(level_spread(levels), 4),
                              [round(v, 4) for v in levels], round(level_spread(wl), 4),
                              [round(v, 4) for v in wl], list(worker_stages or []) if wl else [])
