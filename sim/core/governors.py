"""Governors of the thermal network: each reads one node at every poll and asks for a clock level.

- :class:`StepWise` (Linux ``step_wise``) on the junction: one level deeper at each poll above the
  trip, one back below ``trip − hysteresis``. The junction's time constant is seconds, so it
  throttles within seconds of the trip and then holds the die near it.
- :class:`PowerAllocator` (Linux ``power_allocator``, IPA) on the skin: a PID on the error to the
  control temperature (:class:`sim.core.thermal.PidBudget`, the single node's too) sets a power
  budget; the fastest level whose power fits it is chosen.
- :class:`Firmware` (Raspberry Pi firmware): stepped down from the soft limit (80 °C) to a floor,
  dropped at once to a deep level at the hard limit (85 °C).

A unit's level is the deepest any governor of it asks for (:mod:`sim.core.device_network`).
"""

from __future__ import annotations

from collections.abc import Callable

from sim.core.thermal import PidBudget
from sim.scenario.thermal_network_config import (
    AllocatorConfig,
    FirmwareConfig,
    NetGovernorConfig,
    StepWiseConfig,
)

#: the governed units' power (W) at a clock level, under their present load
PowerAt = Callable[[int], float]


class StepWise:
    __slots__ = ("cfg", "level", "max_level")

    def __init__(self, cfg: StepWiseConfig, max_level: int) -> None:
        self.cfg = cfg
        self.max_level = max_level
        self.level = 0

    def update(self, temp_c: float, dt_s: float, power_at: PowerAt) -> int:
        c = self.cfg
        if temp_c >= c.trip_c:
            self.level = min(self.level + 1, self.max_level)
        elif temp_c < c.trip_c - c.hysteresis_c:
            self.level = max(self.level - 1, 0)
        return self.level


class Firmware:
    __slots__ = ("cfg", "level", "max_level")

    def __init__(self, cfg: FirmwareConfig, max_level: int) -> None:
        self.cfg = cfg
        self.max_level = max_level
        self.level = 0

    def update(self, temp_c: float, dt_s: float, power_at: PowerAt) -> int:
        c = self.cfg
        floor = min(c.soft_floor_level, self.max_level)
        if temp_c >= c.hard_c:
            self.level = max(self.level, min(c.hard_level, self.max_level))
        elif temp_c >= c.soft_c:
            if self.level < floor:
                self.level += 1
            elif self.level > floor:
                self.level -= 1
        elif temp_c < c.soft_c - c.hysteresis_c:
            self.level = max(self.level - 1, 0)
        return self.level


class PowerAllocator:
    __slots__ = ("cfg", "level", "max_level", "pid")

    def __init__(self, cfg: AllocatorConfig, max_level: int) -> None:
        self.cfg = cfg
        self.max_level = max_level
        self.level = 0
        self.pid = PidBudget(cfg.control_temp_c, cfg.sustainable_power_w, cfg.k_p, cfg.k_i, cfg.k_d)

    def update(self, temp_c: float, dt_s: float, power_at: PowerAt) -> int:
        c = self.cfg
        if temp_c < c.control_temp_c - c.switch_on_below_c:
            self.pid.reset()
            self.level = 0
            return 0
        budget = self.pid.budget_w(temp_c, dt_s)
        for lv in range(self.max_level + 1):
            if power_at(lv) <= budget:
                self.level = lv
                return lv
        self.level = self.max_level
        return self.level


Governor = StepWise | Firmware | PowerAllocator


def make_governor(cfg: NetGovernorConfig, max_level: int) -> Governor:
    if cfg.step_wise is not None:
        return StepWise(cfg.step_wise, max_level)
    if cfg.power_allocator is not None:
        return PowerAllocator(cfg.power_allocator, max_level)
    assert cfg.firmware is not None
    return Firmware(cfg.firmware, max_level)
