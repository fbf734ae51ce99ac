"""WindowedHistogram: percentiles within a bucket of the exact ones, over a sliding window."""

from __future__ import annotations

import numpy as np
import pytest

from tui.histogram import WindowedHistogram

TOL = 0.06


def test_quantiles_of_a_lognormal_sample_are_within_a_bucket_of_numpy():
    values = np.random.default_rng(1).lognormal(mean=-3.0, sigma=1.0, size=20_000)
    h = WindowedHistogram(step_s=1.0, keep_steps=60)
    h.add(0.5, values)
    p50, p90, p99 = h.quantiles(0.5, 60.0, (0.5, 0.9, 0.99))
    assert p50 == pytest.approx(np.percentile(values, 50), rel=TOL)
    assert p90 == pytest.approx(np.percentile(values, 90), rel=TOL)
    assert p99 == pytest.approx(np.percentile(values, 99), rel=TOL)


def test_values_older_than_the_window_do_not_count():
    h = WindowedHistogram(step_s=1.0, keep_steps=100)
    h.add(1.5, [10.0] * 100)  # slow, long ago
    h.add(50.5, [0.1] * 100)
    assert h.quantiles(50.5, 10.0, (0.99,))[0] == pytest.approx(0.1, rel=TOL)
    assert h.quantiles(50.5, 60.0, (0.99,))[0] == pytest.approx(10.0, rel=TOL)


def test_an_empty_window_has_no_quantiles_and_old_steps_are_dropped():
    h = WindowedHistogram(step_s=1.0, keep_steps=5)
    assert h.quantiles(0.0, 10.0, (0.5,)) == [None]
    h.add(0.5, [1.0])
    h.add(20.5, [2.0])
    h.add(0.7, [3.0])  # older than anything kept: ignored
    assert int(h.counts(20.5, 100.0).sum()) == 1
