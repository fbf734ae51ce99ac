"""Stage migration: the vision encoder leaves a hot accelerator and comes back once it cools.

Picture a phone whose NPU runs both the encoder and the language model: when the NPU's governor
has pulled it ``hot_level`` steps down, the encoder moves to the GPU (slower for it, but cooler
silicon, and it takes the encoder's heat off the NPU's budget); when the NPU is back at
``cool_level`` or above full clock the encoder returns. The gap between the two levels is the
hysteresis that keeps it from bouncing at every poll. Image preprocessing moves the same way
between a big and a little CPU cluster. Each move is a :class:`MigrationRecord`, as
each offload is a decision on its request's record.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.scenario.thermal_network_config import MigrationConfig


@dataclass(slots=True, frozen=True)
class MigrationRecord:
    """One move of a stage between units, and why."""

    t_s: float
    device: str
    stage: str
    from_unit: str
    to_unit: str
    reason: str
    from_level: int  # the units' clock levels when it was decided
    to_level: int
    from_efficiency: float | None  # work per joule at those levels (None: not in the profile)
    to_efficiency: float | None


class Migrator:
    """Decides, poll by poll, where one stage runs."""

    __slots__ = ("cfg", "on_home")

    def __init__(self, cfg: MigrationConfig) -> None:
        self.cfg = cfg
        self.on_home = True  # where the stage runs now

    @property
    def unit(self) -> str:
        return self.cfg.units[0] if self.on_home else self.cfg.units[1]

    @property
    def target(self) -> str:
        """The other unit."""
        return self.cfg.units[1] if self.on_home else self.cfg.units[0]

    def decide(self, home_level: int) -> str | None:
        """Given the home unit's clock level, the reason to move now, or None."""
        c = self.cfg
        if self.on_home and home_level >= c.hot_level:
            why = f"{c.units[0]} at clock level {home_level} >= {c.hot_level}"
        elif not self.on_home and home_level <= c.cool_level:
            why = f"{c.units[0]} back at clock level {home_level} <= {c.cool_level}"
        else:
            return None
        return why

    def moved(self) -> None:
        self.on_home = not self.on_home
