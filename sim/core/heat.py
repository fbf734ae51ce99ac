"""A device's power, heat and clock: energy accounting, one RC node and its governor (DVFS).

Power is piecewise constant: ``static_w`` plus the busy servers' dynamic power
(:class:`~sim.core.unit_power.UnitPower`) times the clock level's ``power_scale``. Whenever a unit
starts or stops work the device calls :meth:`Heat.power_changed`: energy, throttled time and the
temperature are integrated exactly up to now, and the new power holds from now.

Two heat models answer the device the same way:

* :class:`NodeHeat` (here): one lumped RC node (:class:`~sim.core.thermal.ThermalNode`) and one
  governor for the whole device. *Step-wise*: the next trip-point crossing under the present power
  is an event of its own (re-planned at every power change), so no poll can miss it. *Power
  allocator*: a PID tick every ``interval_s`` (:class:`~sim.core.thermal.PowerAllocatorGovernor`),
  asleep while the node cannot reach the switch-on temperature even at full power.
* :class:`~sim.core.device_network.DeviceNetwork`: junction and skin nodes, a clock per unit and a
  governor per node (a ``thermal_network:`` profile).

A new clock level is handed to the device (``on_level(level)``), which stretches the work it
starts from then on and re-prices its decode batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from sim.core.loop import EventLoop
from sim.core.thermal import PowerAllocatorGovernor, StepWiseGovernor, ThermalNode
from sim.core.unit_power import UnitPower
from sim.scenario.profiles import DeviceProfile, GovernorKind


class Heat:
    """What a device asks of its heat model (see the module's docstring)."""

    def __init__(self, loop: EventLoop, power: UnitPower) -> None:
        self.loop = loop
        self.power = power
        self.static_w = power.static_w
        self.power_w = power.static_w
        self.energy_j = 0.0
        self.throttled_s = 0.0
        self.active = True  # cleared when the simulation drains: periodic governors stop

    def integrate(self, now: float) -> None:
        """Account energy, throttled time and temperature from the last change up to ``now``."""
        raise NotImplementedError

    def power_changed(self) -> None:
        """The busy servers changed: integrate up to now, the new power holds from now."""
        raise NotImplementedError

    def force(self, level: int) -> None:
        """Force a clock level (tests, what-if UIs); the governors may change it again."""
        raise NotImplementedError

    def junction_c(self) -> float:
        """The die's temperature as of the last integration."""
        raise NotImplementedError


class NodeHeat(Heat):
    """One RC node for the whole device, a step-wise or power-allocator governor, one clock."""

    def __init__(self, loop: EventLoop, power: UnitPower, profile: DeviceProfile,
                 on_level: Callable[[int], None]) -> None:
        super().__init__(loop, power)
        self.on_level = on_level
        self.power_scales = [lv.power_scale for lv in profile.dvfs]
        self.level = 0
        self._ps = self.power_scales[0]
        self.node = ThermalNode(profile.thermal, loop.now)
        self._t_last = loop.now
        self._dyn_nominal_j = 0.0  # dynamic energy at nominal power scale (the PID's demand)
        self.pid_cfg = profile.thermal.pid
        self.stepwise_gov = profile.thermal.governor is GovernorKind.STEP_WISE
        self.stepwise = StepWiseGovernor(profile.thermal, len(profile.dvfs))
        self.pid = PowerAllocatorGovernor(profile.thermal.pid)
        self._thermal_at = math.inf
        self._pid_last_j = 0.0
        self._pid_last_t = loop.now
        if not self.stepwise_gov:
            loop.after(self.pid_cfg.interval_s, self._on_pid)

    def start(self) -> None:
        """The step-wise governor's first look (once the device is assembled: it may throttle)."""
        if self.stepwise_gov:
            self.stepwise.update(self.node.temp_c)
            self.apply(self.stepwise.level)
            self._plan()

    def junction_c(self) -> float:
        return self.node.temp_c

    def integrate(self, now: float) -> None:
        dt = now - self._t_last
        if dt > 0.0:
            p = self.power_w
            self.energy_j += p * dt
            self._dyn_nominal_j += (p - self.static_w) / self._ps * dt
            if self.level:
                self.throttled_s += dt
            self._t_last = now
            self.node.advance(now, p)  # the node's clock is this model's (_t_last)

    def power_changed(self) -> None:
        self.integrate(self.loop.now)
        self.power_w = self.static_w + self.power.dyn_busy_w * self._ps
        if self.stepwise_gov:
            self._plan()

    def force(self, level: int) -> None:
        self.apply(max(0, min(level, len(self.power_scales) - 1)))

    def apply(self, level: int) -> None:
        """Run at clock ``level`` from now: power, then the device's clocks."""
        self.integrate(self.loop.now)
        self.level = level
        self._ps = self.power_scales[level]
        self.power_changed()
        self.on_level(level)

    def _plan(self) -> None:
        """Schedule the next trip-point crossing under the present power, if it comes sooner."""
        gov = self.stepwise
        th = self.node
        ss = th.steady_c(self.power_w)
        t = math.inf
        a = gov.active
        if a < gov.n_trips and ss > gov.trip_c[a]:
            t = th.time_to(gov.trip_c[a], self.power_w)
        elif a > 0 and ss < gov.release_c[a - 1]:
            t = th.time_to(gov.release_c[a - 1], self.power_w)
        if t < math.inf:
            at = self.loop.now + t
            if at < self._thermal_at:
                self._thermal_at = at
                self.loop.at(at, self._on_thermal, at)

    def _on_thermal(self, arg: Any) -> None:
        if arg != self._thermal_at:
            self.loop.superseded += 1
            return  # superseded by an earlier crossing
        self._thermal_at = math.inf
        self.integrate(self.loop.now)
        level = self.stepwise.update(self.node.temp_c, 1e-6)
        if level != self.level:
            self.apply(level)
        self._plan()

    def _on_pid(self, arg: Any) -> None:
        """Power-allocator tick. Far below the control temperature the governor sleeps: the next
        tick is when the node could first reach ``switch_on`` even at full power."""
        now = self.loop.now
        pid_cfg = self.pid_cfg
        self.integrate(now)
        dt = now - self._pid_last_t
        self._pid_last_t = now
        demand_w = (self._dyn_nominal_j - self._pid_last_j) / dt if dt > 0 else 0.0
        self._pid_last_j = self._dyn_nominal_j
        temp = self.node.temp_c
        switch_on = pid_cfg.control_temp_c - pid_cfg.switch_on_below_c
        if temp < switch_on:
            self.pid.reset()
            if self.level != 0:
                self.apply(0)
            wait = self.node.time_to(switch_on, self.static_w + self.power.max_dyn_w())
            wait = max(pid_cfg.interval_s, wait if wait < math.inf else pid_cfg.interval_s * 100)
        else:
            budget = self.pid.budget_w(temp, dt)
            level = self.pid.choose(budget, self.static_w, demand_w, self.power_scales)
            if level != self.level:
                self.apply(level)
            wait = pid_cfg.interval_s
        if self.active:
            self.loop.after(wait, self._on_pid)
