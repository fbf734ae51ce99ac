"""The measured side's own interval: a block bootstrap over arrival time (``sim.fit.bootstrap``)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.fit.bootstrap import block_ids, block_intervals


def mean_of(x: np.ndarray) -> list[float]:
    return [float(np.mean(x))]


def test_samples_of_one_request_share_a_block_and_no_block_spans_two_runs() -> None:
    arrivals = [0.0, 0.0, 4.0, 11.0, 25.0, 0.5, 12.0]
    runs = [0, 0, 0, 0, 0, 1, 1]
    ids = block_ids(arrivals, runs, block_s=10.0)
    assert ids[0] == ids[1] == ids[2]          # one request's samples, and the same 10 s
    assert len({ids[0], ids[3], ids[4]}) == 3  # 0–10, 10–20, 20–30 s
    assert not {ids[5], ids[6]} & {ids[0], ids[3], ids[4]}  # run 1's blocks are its own
    assert ids[5] != ids[6]                    # blocks count from each run's first arrival


def test_independent_samples_the_interval_covers_the_true_mean_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(3)
    hits = 0
    for k in range(120):
        x = rng.normal(1.0, 0.2, size=300)
        t = np.sort(rng.uniform(0, 300, size=300))
        iv = block_intervals(x, t, [0] * 300, mean_of, block_s=5.0, resamples=300, seed=k)
        assert iv is not None
        ((lo, hi),) = iv
        hits += lo <= 1.0 <= hi
    assert 0.85 <= hits / 120 <= 1.0


def test_bursts_widen_the_interval_that_single_requests_would_make_too_narrow() -> None:
    # 40 stretches of 10 s, each with its own level (a slow stretch of the machine): requests
    # within a stretch are not independent, so resampling them one by one understates the spread
    rng = np.random.default_rng(5)
    level = np.repeat(rng.normal(0.0, 0.3, size=40), 20)
    x = 1.0 + level + rng.normal(0.0, 0.05, size=800)
    t = np.repeat(np.arange(40) * 10.0, 20) + np.tile(np.linspace(0, 9.9, 20), 40)
    blocks = block_intervals(x, t, [0] * 800, mean_of, block_s=10.0, resamples=500)
    singles = block_intervals(x, t, [0] * 800, mean_of, block_s=1e-6, resamples=500)
    assert blocks is not None and singles is not None
    ((blo, bhi),), ((ilo, ihi),) = blocks, singles
    assert bhi - blo > 3 * (ihi - ilo)
    # the block width is what the 40 levels' own mean can move by: 1.96 × 0.3 / √40 ≈ 0.093
    assert 0.12 < bhi - blo < 0.28


def test_several_statistics_come_from_one_set_of_resamples_in_order() -> None:
    rng = np.random.default_rng(1)
    x = rng.exponential(1.0, size=2000)
    t = np.linspace(0, 200, 2000)
    ivs = block_intervals(x, t, [0] * 2000,
                          lambda v: [float(np.percentile(v, 50)), float(np.percentile(v, 99))])
    assert ivs is not None
    (m_lo, m_hi), (t_lo, t_hi) = ivs
    assert m_lo < np.log(2) < m_hi          # the exponential's median
    assert t_lo < -np.log(0.01) < t_hi      # and its p99
    assert m_hi < t_lo


def test_one_block_has_no_spread_to_read() -> None:
    assert block_intervals([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], [0, 0, 0], mean_of) is None
    assert block_intervals([], [], [], mean_of) is None


@pytest.mark.parametrize(("kwargs", "message"), [({"block_s": 0.0}, "block_s"),
                                                 ({"level": 1.0}, "level")])
def test_bad_parameters_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        block_intervals([1.0, 2.0], [0.0, 20.0], [0, 0], mean_of,
                        block_s=kwargs.get("block_s", 10.0), level=kwargs.get("level", 0.95))
