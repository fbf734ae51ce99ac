"""Stall accounting: engine idle time while admitted work sits in a CPU stage.

Each test draws a timeline (seconds) and checks the settled busy and stall seconds against the
numbers read off the drawing.
"""

from __future__ import annotations

import pytest

from edgeserve.stalls import StallMeter


def meter() -> StallMeter:
    return StallMeter(start_s=0.0, lag_s=0.0)


def test_idle_engine_while_a_request_preprocesses_is_a_stall() -> None:
    # cpu:    1 ████ 3
    # engine: (nothing)
    m = meter()
    m.cpu_enter(1.0)
    m.cpu_exit(3.0)
    w = m.settle(10.0)
    assert (w.busy_s, w.stall_s) == (0.0, 2.0)


def test_engine_stepping_during_preprocessing_is_no_stall() -> None:
    # cpu:    1 ████████ 5
    # engine: 0 ██████████████ 7   (steps reported when they end)
    m = meter()
    m.cpu_enter(1.0)
    for end in range(1, 8):
        m.engine_step(received_s=float(end), elapsed_s=1.0)
    m.cpu_exit(5.0)
    w = m.settle(10.0)
    assert w.busy_s == pytest.approx(7.0)
    assert w.stall_s == pytest.approx(0.0)


def test_partial_overlap_counts_only_the_uncovered_part() -> None:
    # cpu:    2 ██████ 6
    # engine: 0 ████ 3        5 █ 6
    m = meter()
    m.cpu_enter(2.0)
    m.engine_step(received_s=3.0, elapsed_s=3.0)
    m.engine_step(received_s=6.0, elapsed_s=1.0)
    m.cpu_exit(6.0)
    w = m.settle(10.0)
    assert w.busy_s == pytest.approx(4.0)
    assert w.stall_s == pytest.approx(2.0)  # 3..5


def test_overlapping_cpu_requests_count_once() -> None:
    # a: 1 ████ 4 ;  b: 2 ████ 6  → occupied 1..6
    m = meter()
    m.cpu_enter(1.0)
    m.cpu_enter(2.0)
    m.cpu_exit(4.0)
    m.cpu_exit(6.0)
    assert m.settle(10.0).stall_s == pytest.approx(5.0)


def test_bunched_reports_are_laid_end_to_end() -> None:
    # Three 1-s steps reported at the same instant (the event loop was blocked): they are placed
    # back to back ending no earlier than the report, so total busy time is kept.
    m = meter()
    for _ in range(3):
        m.engine_step(received_s=5.0, elapsed_s=1.0)
    w = m.settle(10.0)
    assert w.busy_s == pytest.approx(3.0)


def test_windows_settle_lag_seconds_behind_and_carry_open_stages_over() -> None:
    m = StallMeter(start_s=0.0, lag_s=1.0)
    m.cpu_enter(1.0)
    w1 = m.settle(3.0)  # settles 0..2
    assert (w1.start_s, w1.end_s, w1.stall_s) == (0.0, 2.0, 1.0)
    m.cpu_exit(4.0)
    w2 = m.settle(6.0)  # settles 2..5: occupied 2..4
    assert (w2.start_s, w2.end_s) == (2.0, 5.0)
    assert w2.stall_s == pytest.approx(2.0)
    assert m.stall_total_s == pytest.approx(3.0)
    assert m.in_cpu_stage == 0


def test_busy_fraction_of_a_window() -> None:
    m = meter()
    m.engine_step(received_s=4.0, elapsed_s=2.0)
    assert m.settle(8.0).busy_fraction == pytest.approx(0.25)


def test_windows_report_where_the_engine_stepped_and_where_it_stalled() -> None:
    # cpu:    2 ██████ 6
    # engine: 0 ████ 3        5 █ 6
    m = meter()
    m.cpu_enter(2.0)
    m.engine_step(received_s=3.0, elapsed_s=3.0)
    m.engine_step(received_s=6.0, elapsed_s=1.0)
    m.cpu_exit(6.0)
    w = m.settle(10.0)
    assert w.busy_spans == [(0.0, 3.0), (5.0, 6.0)]
    assert w.stall_spans == [(3.0, 5.0)]
