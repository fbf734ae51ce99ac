"""Token-length distributions with stated statistics, and the statistics of drawn lengths.

A serving benchmark's result depends on how long its prompts and answers are: a server that is
fast on 32-token answers may be slow on 300-token ones, and prefill-heavy traffic stresses other
parts of the engine than decode-heavy traffic. So every dataset states its lengths and prints
what it drew (min, max, mean, median, std) before a run.

:class:`LengthDist` is a *discretized, truncated lognormal*: the lognormal whose mean and standard
deviation are ``mean`` and ``std`` (before truncation), rounded to whole tokens and restricted to
``[min, max]``. Chat traffic is right-skewed — most turns are short, a few are long — which a
lognormal captures and a normal does not. Because the distribution is discrete and bounded, its
exact probabilities over ``min..max`` are computed once; draws are by inverse CDF over them, and
:meth:`LengthDist.expected_mean` / :meth:`LengthDist.expected_std` are the exact moments of what
is drawn (truncation included), so "what it promises" is a number a test can hold draws to.
``std = 0`` is the constant ``mean``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_ERF = np.frompyfunc(math.erf, 1, 1)


def _norm_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.asarray(_ERF(x / math.sqrt(2.0)), dtype=float))


@dataclass(slots=True, frozen=True)
class LengthDist:
    """Token lengths: lognormal of ``mean``/``std`` rounded to tokens, kept within bounds."""

    mean: float
    std: float = 0.0
    min: int = 1
    max: int = 1 << 16  # 65536 tokens: longer than any context here
    _values: np.ndarray = field(init=False, repr=False, compare=False)
    _probs: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.mean > 0:
            raise ValueError(f"a mean length must be > 0 tokens, got {self.mean:g}")
        if self.std < 0:
            raise ValueError(f"a length spread must be >= 0 tokens, got {self.std:g}")
        if not 1 <= self.min <= self.max:
            raise ValueError(f"length bounds need 1 <= min <= max, got [{self.min}, {self.max}]")
        if self.std == 0:
            value = min(self.max, max(self.min, round(self.mean)))
            values, probs = np.array([value]), np.array([1.0])
        else:
            if self.max - self.min > 1_000_000:
                raise ValueError("length bounds span more than a million tokens: set max")
            # lognormal parameters from the mean and std of the untruncated distribution
            s2 = math.log1p((self.std / self.mean) ** 2)
            mu = math.log(self.mean) - s2 / 2
            values = np.arange(self.min, self.max + 1)
            # P(round(X) = k) = P(k − ½ <= X < k + ½), the bounds cut at min − ½ and max + ½
            edges = np.log(np.maximum(np.arange(self.min - 0.5, self.max + 1.0), 1e-300))
            cdf = _norm_cdf((edges - mu) / math.sqrt(s2))
            probs = np.diff(cdf)
            if not probs.sum() > 0:
                raise ValueError(f"lengths of mean {self.mean:g} and std {self.std:g} never fall "
                                 f"within [{self.min}, {self.max}]")
            probs = probs / probs.sum()
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_probs", probs)

    @classmethod
    def parse(cls, spec: str) -> LengthDist:
        """``"256"`` (constant) | ``"mean:std"`` | ``"mean:std:min:max"`` (tokens)."""
        parts = [p.strip() for p in spec.split(":")]
        ok = len(parts) in (1, 2, 4) and all(re.fullmatch(r"\d+(\.\d+)?", p) for p in parts)
        if not ok:
            raise ValueError(f"bad length distribution {spec!r}: use N, MEAN:STD or "
                             "MEAN:STD:MIN:MAX (tokens)")
        mean = float(parts[0])
        std = float(parts[1]) if len(parts) > 1 else 0.0
        if len(parts) == 4:
            return cls(mean, std, int(float(parts[2])), int(float(parts[3])))
        return cls(mean, std)

    @property
    def label(self) -> str:
        if self.std == 0:
            return f"{int(self._values[0])}"
        return f"lognormal mean {self.mean:g} std {self.std:g} in [{self.min}, {self.max}]"

    def expected_mean(self) -> float:
        """Exact mean of the drawn lengths (rounding and truncation included)."""
        return float(self._values @ self._probs)

    def expected_std(self) -> float:
        m = self.expected_mean()
        return float(math.sqrt(((self._values - m) ** 2) @ self._probs))

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths (int64)."""
        if len(self._values) == 1:
            return np.full(n, int(self._values[0]), dtype=np.int64)
        return np.asarray(rng.choice(self._values, size=n, p=self._probs), dtype=np.int64)

    @property
    def upper(self) -> int:
        """The longest length this can draw."""
        return int(self._values[-1])


def length_stats(values: Sequence[int] | np.ndarray) -> dict[str, float]:
    """``min``/``max``/``mean``/``median``/``std`` of lengths (empty: all zero)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {"min": 0.0, "max": 0.0, "mean": 0.0, "median": 0.0, "std": 0.0}
    return {"min": float(arr.min()), "max": float(arr.max()), "mean": float(arr.mean()),
            "median": float(np.median(arr)), "std": float(arr.std())}


def format_length_stats(title: str, stats: dict[str, Any]) -> str:
    """A small table: one row per length kind (``prompt``, ``output``, …) of a dataset."""
    lines = [f"{title}:", f"  {'tokens':<22}{'min':>8}{'max':>8}{'mean':>9}{'median':>9}{'std':>9}"]
    for name, s in stats.items():
        if isinstance(s, dict) and "mean" in s:
            lines.append(f"  {name:<22}{s['min']:>8.0f}{s['max']:>8.0f}{s['mean']:>9.1f}"
                         f"{s['median']:>9.1f}{s['std']:>9.1f}")
    for name, s in stats.items():
        if not isinstance(s, dict):
            lines.append(f"  {name}: {s}")
    return "\n".join(lines)
