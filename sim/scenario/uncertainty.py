"""How sure a calibrated profile is: its coefficients' intervals and the spread of servers' levels.

``edgeserve calibrate`` bootstraps every fitted model (:mod:`sim.fit.coef_bootstrap`) and writes
what it found into the profile's ``uncertainty:`` section::

    uncertainty:
      level: 0.9                      # the intervals' coverage
      resamples: 1000
      block_s: 10.0                   # rows resampled in blocks of this much time
      models:
        step:                         # the engine step's own time (llm.step, gap excluded)
          terms:
            base_s: {value: 0.0041, interval: [0.0038, 0.0044], se: 0.00018, n: 2310}
            decode_tokens: {value: 0.0003, interval: [...], se: ..., n: 1800}
          covariance: [[...], [...]]  # of the terms above, in that order (for drawing)
          dropped: {encoder_tokens_sq: "90 % interval -1.2e-09 … 4.1e-09 crosses zero"}
        step_gap: {...}
        contention: {terms: {step_extra_s_per_worker_s: {...}}, shrunk_from: {step_extra_s_per_worker_s: 1.21}}
        image_decode: {...}
      level_sd: 0.06                  # sd of log speed level between fresh servers (≥ 2 traces)
      levels: [0.97, 1.05, 1.01]
      worker_level_sd: 0.02           # the same for the preprocessing workers' stages
      worker_levels: [0.96, 0.99, 0.98]
      worker_stages: [image_decode, resize, normalize, encode]   # the stages the workers run

With ``n`` ≥ 2 levels a fresh server's level is drawn as the prediction for one more draw from
the same normal: ``sd · √(1 + 1/n)`` times Student's t with ``n − 1`` degrees of freedom
(:func:`sim.fit.prediction.level_factor`), so two calibration servers give a wide interval and
more servers a narrower one.

A profile without the section is as valid as before; the simulator's point estimate ignores it,
and prediction intervals (:mod:`sim.fit.prediction`) draw profiles from it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sim.scenario.schema import fraction, non_negative, require


@dataclass(slots=True, frozen=True)
class TermUncertainty:
    """One coefficient: its fitted value, its interval, its bootstrap standard error, and how
    many rows had the term's feature non-zero (the intercept: all rows)."""

    value: float
    interval: tuple[float, float]
    se: float
    n: int = 0

    def __post_init__(self) -> None:
        non_negative(self.se, "se")
        require(self.interval[0] <= self.interval[1], "interval", "low end above the high end")


@dataclass(slots=True, frozen=True)
class ModelUncertainty:
    """The uncertainty of one fitted model: its terms, their covariance (for drawing), and the
    terms the data could not identify, each with why."""

    terms: dict[str, TermUncertainty]
    covariance: list[list[float]] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    # coefficients shrunk towards 0 (the contention's κ, κ₊): term → its raw value
    shrunk_from: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        k = len(self.terms)
        require(not self.covariance or (len(self.covariance) == k
                                        and all(len(r) == k for r in self.covariance)),
                "covariance", f"needs {k}×{k} entries, one row and column per term")


@dataclass(slots=True, frozen=True)
class ProfileUncertainty:
    """A calibrated profile's ``uncertainty:`` section (see the module docstring)."""

    models: dict[str, ModelUncertainty] = field(default_factory=dict)
    level: float = 0.9
    resamples: int = 0
    block_s: float = 10.0
    level_sd: float = 0.0  # sd of log speed level between calibration traces (0: not measured)
    levels: list[float] = field(default_factory=list)
    # the same for the preprocessing workers' stages (Σ measured / Σ modelled worker time)
    worker_level_sd: float = 0.0
    worker_levels: list[float] = field(default_factory=list)
    worker_stages: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        fraction(self.level, "level")
        non_negative(self.level_sd, "level_sd")
        non_negative(self.worker_level_sd, "worker_level_sd")
        non_negative(self.block_s, "block_s")

    def as_dict(self) -> dict[str, Any]:
        """The section as plain YAML data (intervals as lists)."""
        def plain(v: Any) -> Any:
            if isinstance(v, dict):
                return {k: plain(x) for k, x in v.items() if x is not None}
            if isinstance(v, list | tuple):
                return [plain(x) for x in v]
            return v
        out: dict[str, Any] = plain(asdict(self))
        return out
