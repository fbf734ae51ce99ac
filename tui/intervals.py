"""Half-open time intervals ``(start_s, end_s)``: union, difference, total length.

The engine is busy while *any* request is in it, so its busy time is the length of the union of
the requests' engine intervals, not their sum; a stall is CPU-wait time minus engine-busy time.
"""

from __future__ import annotations


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
