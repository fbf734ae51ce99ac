"""Predictions with intervals: profiles drawn from a calibration's uncertainty, replayed over seeds.

A calibrated profile is one estimate; its ``uncertainty:`` section (:mod:`sim.scenario.uncertainty`)
says how far each coefficient could have fallen and how far fresh servers' speed levels spread.
A prediction interval replays the same workload through ``draws`` profiles, each with

* every fitted model's coefficients drawn together from a normal with their bootstrap covariance
  (clipped at zero: no stage gets faster than free), the contention coefficient from its own
  standard error (narrowed by its shrinkage, :mod:`sim.fit.identify`);
* one speed level per server scaling the step's own time (not the gap between steps), as
  :func:`sim.fit.speed_level.with_speed_level` does, and another scaling the preprocessing
  workers' stages (``worker_level_sd``; the two were uncorrelated over ten fresh servers,
  docs/sim.md): each ``exp(z)``, ``z`` the prediction for one more server from the ``n``
  calibration servers' log levels, ``level_sd · √(1 + 1/n) · t(n − 1)`` (:func:`level_factor`;
  ``N(0, level_sd)`` where the profile lists no levels) — two servers cannot pin the spread, and
  the interval says so;
* its own seed (arrivals replayed, service noise and drift drawn afresh),

and reads each latency figure's ``level`` interval off the draws' figures (order statistics:
:func:`intervals`). The point estimate
(the profile as fitted, the first seed) stays what a run prints first.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

DRAWS = 20  # profiles drawn for an interval (a 90 % interval from 20: the 2nd and 19th figures)
LEVEL = 0.9

Figures = Mapping[str, float | None]


def _delta(model: Mapping[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """One draw of a model's coefficients, as offsets from their fitted values."""
    terms = list(model.get("terms", {}))
    cov = np.asarray(model.get("covariance") or [], dtype=float)
    if not terms or cov.shape != (len(terms), len(terms)):
        return {}
    d = rng.multivariate_normal(np.zeros(len(terms)), cov, method="eigh", check_valid="ignore")
    return dict(zip(terms, (float(v) for v in d), strict=True))


def _shift(target: dict[str, Any], delta: Mapping[str, float]) -> None:
    """Add ``delta`` to a ``{base_s, per}`` mapping in place, each coefficient kept ≥ 0."""
    for k, d in delta.items():
        if k == "base_s":
            target["base_s"] = max(0.0, float(target.get("base_s", 0.0)) + d)
        else:
            per = target.setdefault("per", {})
            per[k] = max(0.0, float(per.get(k, 0.0)) + d)


def has_uncertainty(profile: Mapping[str, Any]) -> bool:
    return bool(isinstance(profile.get("uncertainty"), Mapping)
                and profile["uncertainty"].get("models"))


def draw_profile(profile: Mapping[str, Any], rng: np.random.Generator, *,
                 coefficients: bool = True, level: bool = True) -> dict[str, Any]:
    """``profile`` with its coefficients (``coefficients``) and its server's speed level
    (``level``) drawn from its ``uncertainty`` section; a copy of it without one."""
    out = copy.deepcopy(dict(profile))
    u = out.get("uncertainty")
    if not isinstance(u, Mapping):
        return out
    models: Mapping[str, Any] = u.get("models", {})
    step = (out.get("llm") or {}).get("step")
    if coefficients:
        for stage, m in models.items():
            entry = out.get("stages", {}).get(stage)
            if isinstance(entry, dict) and isinstance(entry.get("model"), dict):
                _shift(entry["model"], _delta(m, rng))
        if isinstance(step, dict):
            # llm.step holds the step's own time (models.step) plus the gap before it (step_gap)
            for name in ("step", "step_gap"):
                if name in models:
                    _shift(step, _delta(models[name], rng))
        inp = (out.get("llm") or {}).get("input_processing")
        if isinstance(inp, dict) and "input_processing" in models:
            _shift(inp, _delta(models["input_processing"], rng))  # vLLM's own processing
        c = models.get("contention")
        host = out.get("host")
        if isinstance(c, Mapping) and isinstance(host, dict):
            raws = c.get("shrunk_from") or {}
            for name, t in c.get("terms", {}).items():
                if not host.get(name):  # dropped, or never fitted: nothing to draw
                    continue
                kappa = float(host[name])
                raw = float(raws.get(name, kappa)) if isinstance(raws, Mapping) else kappa
                sd = float(t["se"]) * math.sqrt(kappa / raw if raw > 0 else 1.0)
                host[name] = max(0.0, kappa + float(rng.normal(0.0, sd)))
    if level:
        sd_level = float(u.get("level_sd", 0.0))
        if sd_level > 0 and isinstance(step, dict):
            _scale_own_time(step, models.get("step_gap"),
                            level_factor(rng, sd_level, len(u.get("levels") or [])))
        sd_worker = float(u.get("worker_level_sd", 0.0))
        if sd_worker > 0:
            f = level_factor(rng, sd_worker, len(u.get("worker_levels") or []))
            for stage in u.get("worker_stages") or []:
                entry = out.get("stages", {}).get(stage)
                if isinstance(entry, dict) and isinstance(entry.get("model"), dict):
                    _scale(entry["model"], f)
    return out


MAX_LEVEL = 2.0  # a server more than twice as slow or fast as the model is another machine


def level_factor(rng: np.random.Generator, sd: float, n: int) -> float:
    """A fresh server's speed level, ``exp(z)``: with ``n`` ≥ 2 measured levels of log sample
    spread ``sd``, ``z = sd · √(1 + 1/n) · t`` with ``t`` Student's t on ``n − 1`` degrees of
    freedom (the prediction for one more draw of a normal whose spread is itself estimated);
    ``z ~ N(0, sd)`` otherwise. Kept within [1/``MAX_LEVEL``, ``MAX_LEVEL``]."""
    if n >= 2:
        z = sd * math.sqrt(1.0 + 1.0 / n) * float(rng.standard_t(n - 1))
    else:
        z = float(rng.normal(0.0, sd))
    cap = math.log(MAX_LEVEL)
    return math.exp(min(cap, max(-cap, z)))


def _scale(model: dict[str, Any], factor: float) -> None:
    """Scale a ``{base_s, per}`` service model's time by ``factor`` in place."""
    model["base_s"] = float(model.get("base_s", 0.0)) * factor
    model["per"] = {k: float(v) * factor for k, v in (model.get("per") or {}).items()}


def _scale_own_time(step: dict[str, Any], gap: Mapping[str, Any] | None, factor: float) -> None:
    """Scale the step's own time by ``factor``, leaving the gap's fitted share as it is."""
    g = {k: float(t["value"]) for k, t in (gap or {}).get("terms", {}).items()}
    step["base_s"] = max(0.0, (float(step["base_s"]) - g.get("base_s", 0.0)) * factor
                         + g.get("base_s", 0.0))
    step["per"] = {k: max(0.0, (float(v) - g.get(k, 0.0)) * factor + g.get(k, 0.0))
                   for k, v in step.get("per", {}).items()}


def intervals(draws: Sequence[Figures], level: float = LEVEL) -> dict[str, tuple[float, float]]:
    """Each figure's ``level`` prediction interval over the draws: the ``j``-th smallest and
    ``j``-th largest of ``n`` draws, ``j = ⌊(n + 1)(1 − level)/2⌋`` (at least 1). Another draw
    of the same kind falls between them with probability ``(n + 1 − 2j)/(n + 1)`` — 0.905 for
    20 draws at 90 %, where the 5th and 95th percentiles of the draws would hold only ~0.81 of
    them. Figures missing from a draw are left out; none with fewer than two draws."""
    out: dict[str, tuple[float, float]] = {}
    for k in dict.fromkeys(k for d in draws for k in d):
        xs = sorted(float(v) for d in draws
                    if (v := d.get(k)) is not None and math.isfinite(float(v)))
        n = len(xs)
        if n >= 2:
            j = max(1, math.floor((n + 1) * (1 - level) / 2))
            out[k] = (xs[j - 1], xs[n - j])
    return out


def predict(profile: Mapping[str, Any], run: Callable[[list[dict[str, Any]], int], Figures], *,
            servers: int = 1, draws: int = DRAWS, level: float = LEVEL,
            seed: int = 0) -> dict[str, tuple[float, float]]:
    """Prediction intervals: ``run(profiles, seed)`` (one profile per server, ``servers`` of
    them, each its own speed level, all sharing the draw's coefficients) for ``draws`` draws."""
    rng = np.random.default_rng(seed)
    figures = []
    for k in range(draws):
        shared = draw_profile(profile, rng, level=False)
        each = [draw_profile(shared, rng, coefficients=False) for _ in range(servers)]
        figures.append(run(each, 1000 + k))
    return intervals(figures, level)
