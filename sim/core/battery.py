"""A device's battery: a capacity, a starting charge and a low mark, drained by the energy drawn.

The device integrates its own energy and radio energy (:mod:`sim.core.device`); the battery turns
the joules drawn so far into what is left: ``max(0, initial_wh − drawn_j / 3600)``.
"""

from __future__ import annotations

from sim.scenario.profiles import BatteryConfig


class Battery:
    """The charge left of a battery after ``drawn_j`` joules."""

    __slots__ = ("capacity_wh", "low_fraction", "start_wh")

    def __init__(self, cfg: BatteryConfig) -> None:
        self.capacity_wh = cfg.capacity_wh
        self.start_wh = cfg.capacity_wh * cfg.initial_fraction
        self.low_fraction = cfg.low_fraction  # below this share of capacity the battery is low

    def left_wh(self, drawn_j: float) -> float:
        """Watt-hours left after ``drawn_j`` joules (never below zero)."""
        return max(0.0, self.start_wh - drawn_j / 3600.0)

    def fraction(self, drawn_j: float) -> float:
        """The share of capacity left after ``drawn_j`` joules."""
        return self.left_wh(drawn_j) / self.capacity_wh

    def low(self, drawn_j: float) -> bool:
        """Whether the charge left after ``drawn_j`` joules is below the low mark."""
        return self.fraction(drawn_j) < self.low_fraction
