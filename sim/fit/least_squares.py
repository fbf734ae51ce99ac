"""Least squares with non-negative coefficients, and the fitted linear model it yields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

MIN_SAMPLES = 5


@dataclass(slots=True)
class StageFit:
    stage: str
    n: int
    base_s: float
    per: dict[str, float]
    cv: float
    r2: float
    note: str = ""

    def model(self) -> dict[str, Any]:
        m: dict[str, Any] = {"kind": "lognormal" if self.cv >= 0.005 else "deterministic",
                             "base_s": float(f"{self.base_s:.6g}"),
                             "per": {k: float(f"{v:.6g}") for k, v in self.per.items()}}
        if m["kind"] == "lognormal":
            m["cv"] = round(self.cv, 4)
        return m


def within_group_cv(x: np.ndarray, y: np.ndarray) -> float | None:
    """The spread of ``y`` among rows of the same features: the pooled relative standard
    deviation about each group's mean, over the groups of identical ``x`` rows with at least three
    members; None where those hold fewer than half the rows or there is one group.

    A stage's cv is its noise: what two images of one size differ by. Taken over all rows it also
    holds the model's misfit between sizes — on one shared core (AMX Xeon, 2026-12-07) the worker
    encoder's tokens² model was 2.5× short for the smallest images, and that bias, drawn as noise,
    gave 1280×720 images a lognormal tail to 1.2 s where none took over 0.42 s."""
    _, inverse, counts = np.unique(x, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    big = counts[inverse] >= 3
    groups = int(np.sum(counts >= 3))
    if groups < 2 or big.sum() < len(y) / 2:
        return None
    sums = np.bincount(inverse[big], weights=y[big], minlength=len(counts))
    means = sums / np.maximum(counts, 1)
    rel = y[big] / np.where(means[inverse[big]] > 0, means[inverse[big]], np.nan) - 1.0
    dof = max(int(big.sum()) - groups, 1)
    return float(np.sqrt(np.nansum(rel ** 2) / dof))


def fit_linear(stage: str, x: np.ndarray, y: np.ndarray, names: list[str],
               weights: np.ndarray | None = None, cv_within_groups: bool = False) -> StageFit:
    """Least squares ``y ≈ b + x·w`` with ``b, w ≥ 0`` (negative terms are dropped and refitted);
    ``weights`` scale each row's residual (``1/ŷ``: relative errors count, not seconds).
    ``cv_within_groups``: the cv is :func:`within_group_cv` where the rows allow it."""
    keep = list(range(len(names)))
    w = np.ones(len(y)) if weights is None else weights
    while True:
        a = np.column_stack([np.ones(len(y))] + [x[:, i] for i in keep])
        coef, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
        neg = [j for j, c in enumerate(coef[1:]) if c < 0]
        if not neg:
            break
        keep.pop(neg[0])
    base = float(coef[0])
    if base < 0:  # refit through the origin
        a0 = np.column_stack([x[:, i] for i in keep]) if keep else np.zeros((len(y), 0))
        coef0, *_ = np.linalg.lstsq(a0 * w[:, None], y * w, rcond=None) if keep else (np.zeros(0),)
        coef = np.concatenate([[0.0], np.maximum(coef0, 0.0)])
        base = 0.0
        a = np.column_stack([np.ones(len(y))] + [x[:, i] for i in keep])
    pred = a @ coef
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    ratio = y / np.where(pred > 0, pred, np.nan)
    cv = float(np.nanstd(ratio)) if len(y) > 1 else 0.0
    if cv_within_groups:
        within = within_group_cv(x, y)
        cv = cv if within is None else within
    # a feature zero in every row has no coefficient (lstsq may leave round-off on it)
    per = {names[i]: float(c) for i, c in zip(keep, coef[1:], strict=True)
           if c > 0 and np.any(x[:, i])}
    return StageFit(stage, len(y), base, per, cv, 1 - ss_res / ss_tot if ss_tot > 0 else 1.0)
