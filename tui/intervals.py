"""Half-open time intervals ``(start_s, end_s)``: union, difference, total length.

The engine is busy while *any* request is in it, so its busy time is the length of the union of
the requests' engine intervals, not their sum; a stall is CPU-wait time minus engine-busy time.
"""

from __future__ import annotations

import bisect


def union(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping intervals merged: sorted and disjoint."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def subtract(
    a: list[tuple[float, float]], b: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Disjoint sorted intervals ``a`` minus disjoint sorted intervals ``b``."""
    out = []
    j = 0
    for lo, hi in a:
        cur = lo
        while j < len(b) and b[j][1] <= cur:
            j += 1
        i = j
        while i < len(b) and b[i][0] < hi:
            if b[i][0] > cur:
                out.append((cur, b[i][0]))
            cur = max(cur, b[i][1])
            i += 1
        if cur < hi:
            out.append((cur, hi))
    return out


def measure(iv: list[tuple[float, float]]) -> float:
    """Total length of disjoint intervals."""
    return sum(b - a for a, b in iv)


class BucketRanges:
    """A set of whole time buckets, kept as merged inclusive ranges ``[first, last]``.

    A request that waits a minute in a queue covers sixty one-second buckets entirely; noting the
    range once is O(log n) instead of sixty appends, which keeps folding cheap when a replay runs
    an overloaded trace at high speed.
    """

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []

    def add(self, first: int, last: int) -> None:
        i = bisect.bisect_left(self.ranges, (first, first))
        if i > 0 and self.ranges[i - 1][1] >= first - 1:
            i -= 1
        j = i
        while j < len(self.ranges) and self.ranges[j][0] <= last + 1:
            first = min(first, self.ranges[j][0])
            last = max(last, self.ranges[j][1])
            j += 1
        self.ranges[i:j] = [(first, last)]

    def __contains__(self, k: int) -> bool:
        i = bisect.bisect_right(self.ranges, (k, 1 << 62)) - 1
        return i >= 0 and self.ranges[i][0] <= k <= self.ranges[i][1]

    def trim(self, oldest: int) -> None:
        """Forget buckets ``<= oldest``."""
        self.ranges = [(max(a, oldest + 1), b) for a, b in self.ranges if b > oldest]

    def clear(self) -> None:
        self.ranges.clear()
