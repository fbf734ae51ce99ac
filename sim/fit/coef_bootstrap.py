"""How far a fitted coefficient could have fallen: a block bootstrap over the rows it was fitted on.

A step model fitted from a few hundred steps, or a contention coefficient from fifty, is one draw
of what the machine does; another recording of the same load gives other numbers (the same 2-core
host gave κ = 1.21 from 64 steps and 0.30 from 53). This module resamples the rows a linear fit
was made from and refits on each resample, all resamples at once: every resample is a vector of
row counts, so its normal equations are ``Σ count·x xᵀ`` — one matrix product over all resamples
and one batched solve, a thousand refits in milliseconds.

Rows close in time are not independent (the machine drifts, a burst slows several steps), so rows
are resampled in blocks of ``block_s`` seconds, run by run, as :mod:`sim.fit.bootstrap` does for
latency figures (cut shorter where that leaves too few blocks to resample). The refit keeps the point fit's terms and weights (the non-negative fit's choice
of terms is not redone per resample), so an interval reaching below zero says the data do not
tell the term from nothing.

    s = FitSamples(["decode_tokens"], x, y, t_s, run)
    iv = bootstrap_fit(s, base_s=0.004, per={"decode_tokens": 3e-4})
    iv.terms["decode_tokens"].interval  # (2.8e-4, 3.2e-4)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.fit.bootstrap import block_ids
from sim.scenario.uncertainty import ModelUncertainty, TermUncertainty

RESAMPLES = 1000
LEVEL = 0.9
BLOCK_S = 10.0
MIN_BLOCKS = 20  # blocks below which they are cut shorter (usable_block_s)


@dataclass(slots=True)
class FitSamples:
    """The rows a linear fit ``y ≈ b + x·w`` was made from, kept for its bootstrap.

    ``weights`` scale each row's residual as in :func:`sim.fit.least_squares.fit_linear`;
    ``t_s`` and ``run`` place each row in time (the blocks); ``intercept=False`` for a fit
    through the origin."""

    names: list[str]
    x: np.ndarray  # (rows, len(names))
    y: np.ndarray
    t_s: np.ndarray
    run: np.ndarray
    weights: np.ndarray | None = None
    intercept: bool = True

    @staticmethod
    def of(names: Sequence[str], x: object, y: object, t_s: object, run: object = None,
           weights: object = None, intercept: bool = True) -> FitSamples:
        ya = np.asarray(y, dtype=float)
        xa = np.asarray(x, dtype=float).reshape(len(ya), len(names))
        ra = np.zeros(len(ya), dtype=np.int64) if run is None else np.asarray(run, dtype=np.int64)
        wa = None if weights is None else np.asarray(weights, dtype=float)
        return FitSamples(list(names), xa, ya, np.asarray(t_s, dtype=float), ra, wa, intercept)


def resample_counts(t_s: np.ndarray, run: np.ndarray, *, block_s: float, resamples: int,
                    rng: np.random.Generator) -> np.ndarray:
    """``(resamples, rows)`` counts: how often each row appears in each block-bootstrap resample
    (every run draws as many of its blocks as it has, with replacement)."""
    ids = block_ids(t_s, run, block_s)
    nblocks = int(ids.max()) + 1 if len(ids) else 0
    block_run = np.zeros(nblocks, dtype=np.int64)
    block_run[ids] = run
    counts = np.zeros((resamples, nblocks))
    for r in np.unique(block_run):
        mine = np.flatnonzero(block_run == r)
        draws = rng.choice(mine, size=(resamples, len(mine)))
        np.add.at(counts, (np.arange(resamples)[:, None], draws), 1.0)
    return counts[:, ids]


def refit(s: FitSamples, counts: np.ndarray) -> np.ndarray:
    """The weighted least-squares coefficients ``[b, w…]`` (``[w…]`` without intercept) of every
    resample in ``counts`` at once: ``(resamples, terms)``."""
    cols = ([np.ones(len(s.y))] if s.intercept else []) + [s.x[:, j] for j in range(s.x.shape[1])]
    a = np.column_stack(cols) if cols else np.zeros((len(s.y), 0))
    w = np.ones(len(s.y)) if s.weights is None else s.weights
    aw, yw = a * w[:, None], s.y * w
    p = aw.shape[1]
    if p == 0:
        return np.zeros((len(counts), 0))
    gram = (counts @ (aw[:, :, None] * aw[:, None, :]).reshape(len(yw), p * p)).reshape(-1, p, p)
    rhs = counts @ (aw * yw[:, None])
    # a resample that drew none of a term's rows leaves it unidentified: a ridge far below the
    # data's scale keeps the solve finite and that term at 0
    scale = np.maximum(np.einsum("bii->bi", gram), 1e-300)
    gram = gram + np.eye(p)[None] * (scale * 1e-12)[:, None, :]
    return np.linalg.solve(gram, rhs[..., None])[..., 0]


def usable_block_s(s: FitSamples, block_s: float) -> float:
    """``block_s``, halved until the rows fall into at least :data:`MIN_BLOCKS` blocks (or one
    row each): a resample of three blocks is one of ten possible, and its spread says nothing —
    fifty contention steps within 25 s would get an interval far too narrow."""
    if len(s.y) == 0:
        return block_s
    want = min(MIN_BLOCKS, len(np.unique(np.column_stack([s.t_s, s.run]), axis=0)))
    while len(np.unique(block_ids(s.t_s, s.run, block_s))) < want and block_s > 1e-6:
        block_s /= 2
    return block_s


def bootstrap_fit(s: FitSamples, base_s: float, per: dict[str, float], *,
                  resamples: int = RESAMPLES, level: float = LEVEL, block_s: float = BLOCK_S,
                  seed: int = 0) -> ModelUncertainty:
    """The percentile interval (``level``), standard error and covariance of each coefficient of a
    fit (``base_s`` and ``per``: the point fit; its terms are the ones refitted), from
    ``resamples`` block-bootstrap refits of ``s``. A fit through the origin has no ``base_s``
    term. With fewer than two blocks every interval is the point itself (nothing to resample)."""
    kept = [j for j, k in enumerate(s.names) if k in per]
    # a non-negative fit whose intercept came out below zero was refitted through the origin
    # (sim.fit.least_squares): so is every resample
    intercept = s.intercept and not (base_s == 0.0 and kept)
    sub = FitSamples([s.names[j] for j in kept], s.x[:, kept], s.y, s.t_s, s.run, s.weights,
                     intercept)
    names = (["base_s"] if intercept else []) + sub.names
    point = np.asarray(([base_s] if intercept else []) + [per[k] for k in sub.names])
    nonzero = ([len(s.y)] if intercept else []) + [int(np.count_nonzero(sub.x[:, j]))
                                                     for j in range(len(sub.names))]
    block_s = usable_block_s(s, block_s)
    if len(s.y) == 0 or len(np.unique(block_ids(s.t_s, s.run, block_s))) < 2:
        draws = np.tile(point, (2, 1))
    else:
        counts = resample_counts(s.t_s, s.run, block_s=block_s, resamples=resamples,
                                 rng=np.random.default_rng(seed))
        draws = refit(sub, counts)
    a = (1 - level) / 2
    lo, hi = np.quantile(draws, [a, 1 - a], axis=0)
    se = draws.std(axis=0, ddof=1)
    cov = np.atleast_2d(np.cov(draws, rowvar=False)) if len(names) else np.zeros((0, 0))
    terms = {k: TermUncertainty(float(f"{point[i]:.6g}"), (float(f"{lo[i]:.6g}"),
                                                          float(f"{hi[i]:.6g}")),
                                float(f"{se[i]:.4g}"), nonzero[i])
             for i, k in enumerate(names)}
    return ModelUncertainty(terms, [[float(f"{v:.4g}") for v in row] for row in cov])


def collinear(s: FitSamples, terms: Sequence[str], *, tol: float = 1e-6) -> dict[str, str]:
    """Terms (of ``terms``, in that order of priority) that the rows cannot tell apart from the
    intercept and the terms before them: adding the term's (weighted, unit-scaled) column leaves
    the design's rank unchanged — one image size makes image tokens, image tokens² and prompt
    tokens move together. Term → why."""
    w = np.ones(len(s.y)) if s.weights is None else s.weights
    cols = [np.ones(len(s.y)) * w] if s.intercept else []
    kept_names: list[str] = []
    out: dict[str, str] = {}
    for k in terms:
        c = s.x[:, s.names.index(k)] * w
        norm = float(np.linalg.norm(c))
        if norm == 0:
            out[k] = "its feature is zero in every row"
            continue
        trial = np.column_stack([*cols, c / norm]) if cols else (c / norm)[:, None]
        sv = np.linalg.svd(trial, compute_uv=False)
        if sv[-1] <= tol * sv[0]:
            with_ = ", ".join((["the intercept"] if s.intercept else []) + kept_names)
            out[k] = f"it moves with {with_} in these rows (too few distinct shapes to separate them)"
            continue
        cols.append(c / norm)
        kept_names.append(k)
    return out
