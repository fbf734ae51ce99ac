"""Interval arithmetic behind busy and stall times."""

from __future__ import annotations

from tui.intervals import measure, subtract, union


def test_union_merges_overlapping_and_touching_intervals():
    assert union([(3.0, 4.0), (0.0, 1.0), (0.5, 2.0), (2.0, 2.5)]) == [(0.0, 2.5), (3.0, 4.0)]


def test_subtract_leaves_the_parts_not_covered():
    cpu = [(0.0, 1.0), (2.0, 5.0)]
    engine = [(0.5, 2.5), (3.0, 3.5), (4.5, 6.0)]
    assert subtract(cpu, engine) == [(0.0, 0.5), (2.5, 3.0), (3.5, 4.5)]
    assert measure(subtract(cpu, engine)) == 2.0
    assert subtract(cpu, []) == cpu and subtract([], engine) == []
