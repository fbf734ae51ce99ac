"""A mean over independent runs (seeds) and the half-width of its 95 % confidence interval."""

from __future__ import annotations

import math

# two-sided 95 % Student-t quantiles t(0.975, df) for df = 1..30
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def mean_ci95(xs: list[float]) -> tuple[float, float]:
    """Mean and half-width of its 95 % confidence interval (Student t; 0 for one value)."""
    vals = [x for x in xs if x is not None and not math.isnan(x)]
    n = len(vals)
    if n == 0:
        return math.nan, math.nan
    m = sum(vals) / n
    if n == 1:
        return m, 0.0
    var = sum((x - m) ** 2 for x in vals) / (n - 1)
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    return m, t * math.sqrt(var / n)
