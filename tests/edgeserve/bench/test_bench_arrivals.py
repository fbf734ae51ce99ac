"""Arrival schedules: gamma gaps with mean 1/rate and CV 1/sqrt(burstiness), by count or duration."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgeserve.bench.arrivals import ArrivalConfig, arrival_offsets_s


def gaps(config: ArrivalConfig) -> np.ndarray:
    return np.diff(arrival_offsets_s(config))


def test_first_request_goes_at_time_zero_and_offsets_increase() -> None:
    offsets = arrival_offsets_s(ArrivalConfig(rate_rps=5.0, num_requests=50))
    assert offsets[0] == 0.0
    assert len(offsets) == 50
    assert np.all(np.diff(offsets) >= 0)


def test_poisson_gaps_have_mean_one_over_rate_and_unit_cv() -> None:
    g = gaps(ArrivalConfig(rate_rps=4.0, num_requests=40_001, seed=1))
    assert g.mean() == pytest.approx(0.25, rel=0.02)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_burstiness_sets_the_gap_cv_to_one_over_sqrt_k(burstiness: float) -> None:
    g = gaps(ArrivalConfig(rate_rps=2.0, burstiness=burstiness, num_requests=40_001, seed=2))
    assert g.mean() == pytest.approx(0.5, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_infinite_burstiness_is_a_metronome() -> None:
    g = gaps(ArrivalConfig(rate_rps=3.0, burstiness=math.inf, num_requests=10))
    assert np.allclose(g, 1 / 3)


def test_infinite_rate_sends_everything_at_once() -> None:
    assert np.all(arrival_offsets_s(ArrivalConfig(num_requests=7)) == 0.0)


def test_a_duration_bounds_the_arrivals_and_yields_about_rate_times_duration() -> None:
    offsets = arrival_offsets_s(ArrivalConfig(rate_rps=10.0, num_requests=None, duration_s=200.0))
    assert offsets.max() < 200.0
    assert len(offsets) == pytest.approx(2000, rel=0.08)  # Poisson: sd ≈ 45


def test_the_same_seed_gives_the_same_schedule_and_another_seed_does_not() -> None:
    a = arrival_offsets_s(ArrivalConfig(rate_rps=2.0, num_requests=20, seed=7))
    b = arrival_offsets_s(ArrivalConfig(rate_rps=2.0, num_requests=20, seed=7))
    c = arrival_offsets_s(ArrivalConfig(rate_rps=2.0, num_requests=20, seed=8))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate_rps": 0.0}, "rate must be > 0"),
        ({"burstiness": -1.0}, "burstiness must be > 0"),
        ({"num_requests": 10, "duration_s": 5.0}, "exactly one"),
        ({"num_requests": None, "duration_s": 5.0}, "finite request rate"),
        ({"max_concurrency": 0}, "concurrency must be >= 1"),
    ],
)
def test_bad_configs_are_refused_with_a_reason(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ArrivalConfig(**kwargs)
