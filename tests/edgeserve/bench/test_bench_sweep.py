"""Max sustainable rate: the highest rate whose TTFT p99 stays within the bound, no failures."""

from __future__ import annotations

import pytest

from edgeserve.bench.sweep import SweepResult, interpolated_max_rate, max_sustained_rate


def point(rate: float, p99_ms: float | None, failed: int = 0, completed: int = 30) -> dict:
    return {"request_rate": rate, "p99_ttft_ms": p99_ms, "failed": failed, "completed": completed,
            "num_prompts": completed + failed}


def test_the_highest_rate_under_the_bound_is_sustained() -> None:
    points = [point(1, 100), point(2, 500), point(4, 3000)]
    assert max_sustained_rate(points, 2000) == 2


def test_interpolation_finds_where_the_p99_curve_crosses_the_bound() -> None:
    points = [point(4, 3000), point(1, 100), point(2, 500)]  # order does not matter
    # between (2, 500) and (4, 3000): 2 + (2000 − 500)·2/2500 = 3.2
    assert interpolated_max_rate(points, 2000) == pytest.approx(3.2)


def test_failures_make_a_rate_unsustained_even_with_low_latency() -> None:
    points = [point(1, 100), point(2, 150, failed=3, completed=27), point(3, 200)]
    assert max_sustained_rate(points, 2000) == 1  # a later good rate does not count
    assert interpolated_max_rate(points, 2000) == 1


def test_nothing_sustained_is_none_and_a_clean_sweep_is_its_top_rate() -> None:
    assert max_sustained_rate([point(1, 5000)], 2000) is None
    assert interpolated_max_rate([point(1, 5000)], 2000) is None
    result = SweepResult(ttft_p99_bound_ms=2000, points=[point(1, 10), point(2, 20)])
    assert (result.max_rate_rps, result.max_rate_interp_rps) == (2, 2)


def test_sweep_results_round_trip_through_json() -> None:
    result = SweepResult(ttft_p99_bound_ms=1500, points=[point(1, 10), point(2, 2000)])
    data = result.to_json()
    assert data["max_sustained_rate"] == 1
    again = SweepResult.from_json(data)
    assert again.points == result.points and again.ttft_p99_bound_ms == 1500
