"""How far a measured run's own statistics could have fallen: a block bootstrap over arrival time.

A p99 of a few hundred requests is its handful of worst ones, and those come together — one burst,
one stretch of slow seconds — so the same workload on a fresh server moves a p99 by as much as a
model's error (docs/sim.md, "runtime vs itself"). Before a simulated p99 is called wrong, the
measured one's own uncertainty has to be known. Resampling single requests would treat a burst's requests
as independent and make the interval too narrow; this cuts each run into blocks of ``block_s``
seconds of arrivals (longer than the machine's drift and a queue's life, ~10 s) and resamples
whole blocks with replacement, run by run (Künsch's block bootstrap, non-overlapping blocks,
percentile interval).

    (lo, hi), = block_intervals(values, arrivals_s, runs, lambda x: [np.median(x)])

The interval is what another run of the same load could have shown, as far as one run's blocks
tell; it does not contain the run-to-run drift between servers that no single run sees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Statistics = Callable[[np.ndarray], Sequence[float]]


def block_ids(arrivals_s: Sequence[float] | np.ndarray, runs: Sequence[int] | np.ndarray,
              block_s: float) -> np.ndarray:
    """One integer per sample naming its (run, block of ``block_s`` seconds from the run's first
    arrival); samples of one request share its arrival, so they share its block."""
    if block_s <= 0:
        raise ValueError(f"block_s must be positive, got {block_s}")
    t = np.asarray(arrivals_s, dtype=float)
    r = np.asarray(runs, dtype=np.int64)
    if t.shape != r.shape:
        raise ValueError("arrivals_s and runs must have one entry per sample")
    out = np.empty(len(t), dtype=np.int64)
    next_id = 0
    for run in np.unique(r):
        sel = r == run
        k = np.floor((t[sel] - t[sel].min()) / block_s).astype(np.int64)
        _, dense = np.unique(k, return_inverse=True)
        out[sel] = dense + next_id
        next_id += int(dense.max()) + 1
    return out


def block_intervals(values: Sequence[float], arrivals_s: Sequence[float], runs: Sequence[int],
                    stats: Statistics, *, block_s: float = 10.0, resamples: int = 1000,
                    level: float = 0.95, seed: int = 0) -> list[tuple[float, float]] | None:
    """Percentile interval of each of ``stats``' values over ``resamples`` block-bootstrap
    resamples (several statistics of one resample are computed together).

    Each resample draws, for every run, as many blocks as the run has, with replacement, and
    evaluates ``stats`` on their samples together. ``None`` when there are fewer than two blocks
    (one block resampled is itself: no spread to read)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return None
    ids = block_ids(arrivals_s, runs, block_s)
    r = np.asarray(runs, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    x, ids_sorted = x[order], ids[order]
    starts = np.flatnonzero(np.r_[True, ids_sorted[1:] != ids_sorted[:-1]])
    ends = np.r_[starts[1:], len(x)]
    blocks = [x[a:b] for a, b in zip(starts, ends, strict=True)]
    if len(blocks) < 2:
        return None
    run_of_block = r[order][starts]
    per_run = [np.flatnonzero(run_of_block == run) for run in np.unique(run_of_block)]
    rng = np.random.default_rng(seed)
    est = np.array([stats(np.concatenate([blocks[j] for idx in per_run
                                          for j in rng.choice(idx, size=len(idx))]))
                    for _ in range(resamples)], dtype=float)
    a = (1 - level) / 2
    lo, hi = np.quantile(est, [a, 1 - a], axis=0)
    return [(float(u), float(v)) for u, v in zip(np.atleast_1d(lo), np.atleast_1d(hi), strict=True)]
