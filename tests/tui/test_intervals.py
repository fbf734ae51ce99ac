"""Interval arithmetic behind busy and stall times."""

from __future__ import annotations

from tui.intervals import BucketRanges, measure, subtract, union


def test_union_merges_overlapping_and_touching_intervals():
    assert union([(3.0, 4.0), (0.0, 1.0), (0.5, 2.0), (2.0, 2.5)]) == [(0.0, 2.5), (3.0, 4.0)]


def test_subtract_leaves_the_parts_not_covered():
    cpu = [(0.0, 1.0), (2.0, 5.0)]
    engine = [(0.5, 2.5), (3.0, 3.5), (4.5, 6.0)]
    assert subtract(cpu, engine) == [(0.0, 0.5), (2.5, 3.0), (3.5, 4.5)]
    assert measure(subtract(cpu, engine)) == 2.0
    assert subtract(cpu, []) == cpu and subtract([], engine) == []


def test_bucket_ranges_merge_and_answer_membership():
    r = BucketRanges()
    r.add(5, 9)
    r.add(0, 2)
    r.add(3, 4)  # adjacent on both sides: one range
    r.add(20, 20)
    assert r.ranges == [(0, 9), (20, 20)]
    assert 0 in r and 9 in r and 20 in r and 10 not in r and -1 not in r
    r.trim(4)
    assert r.ranges == [(5, 9), (20, 20)]
