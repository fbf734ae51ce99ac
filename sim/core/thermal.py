"""A lumped RC thermal node and the governors that turn temperature into clock levels.

Picture the SoC as one lump of metal with heat capacity ``C`` (J/°C) joined to the air at
``T_amb`` through a thermal resistance ``R`` (°C/W). Power ``P`` heats it; the resistance leaks
heat away::

    C · dT/dt = P − (T − T_amb) / R

With constant ``P`` the solution is exact: ``T(t) = T_ss + (T0 − T_ss) · exp(−t / RC)`` with
steady state ``T_ss = T_amb + P·R``. In the simulator power is piecewise constant between events,
so :meth:`ThermalNode.advance` integrates exactly, whatever the time between events, and
:meth:`ThermalNode.time_to` says when the temperature will cross a trip point, so crossings are
events of their own rather than something a poll might miss.

Governors (Linux thermal framework, simplified):

- *step-wise*: trip points in rising order; crossing trip *i* upward makes it active, falling below
  ``temp_c − hysteresis_c`` releases it; the clock level is the number of active trips.
- *power allocator*: every ``interval_s`` a PID controller on ``control_temp_c − T`` sets a power
  budget; the fastest clock level whose expected power fits the budget is chosen.
"""

from __future__ import annotations

import math

from sim.scenario.profiles import PidConfig, ThermalConfig


class ThermalNode:
    """Temperature of one device, advanced exactly under piecewise-constant power."""

    __slots__ = ("ambient_c", "c_j_per_c", "r_c_per_w", "t_s", "tau_s", "temp_c")

    def __init__(self, cfg: ThermalConfig, t_s: float = 0.0) -> None:
        self.r_c_per_w = cfg.r_c_per_w
        self.c_j_per_c = cfg.c_j_per_c
        self.ambient_c = cfg.ambient_c
        self.tau_s = cfg.r_c_per_w * cfg.c_j_per_c
        self.temp_c = cfg.ambient_c if cfg.initial_c is None else cfg.initial_c
        self.t_s = t_s

    def steady_c(self, power_w: float) -> float:
        return self.ambient_c + power_w * self.r_c_per_w

    def advance(self, t_s: float, power_w: float) -> float:
        """Move to time ``t_s`` having dissipated ``power_w`` since the last call; returns T."""
        dt = t_s - self.t_s
        if dt > 0.0:
            ss = self.ambient_c + power_w * self.r_c_per_w
            self.temp_c = ss + (self.temp_c - ss) * math.exp(-dt / self.tau_s)
            self.t_s = t_s
        return self.temp_c

    def time_to(self, target_c: float, power_w: float) -> float:
        """Seconds until T reaches ``target_c`` under constant ``power_w`` (``inf`` if never)."""
        ss = self.ambient_c + power_w * self.r_c_per_w
        gap0 = self.temp_c - ss
        gap1 = target_c - ss
        if gap0 == 0.0 or gap1 == 0.0 or (gap0 > 0) != (gap1 > 0) or abs(gap1) > abs(gap0):
            return 0.0 if target_c == self.temp_c else math.inf
        return self.tau_s * math.log(gap0 / gap1)


class StepWiseGovernor:
    """Trip points with hysteresis; the clock level is the number of active trips."""

    __slots__ = ("active", "max_level", "n_trips", "release_c", "trip_c")

    def __init__(self, cfg: ThermalConfig, levels: int) -> None:
        self.trip_c = [t.temp_c for t in cfg.trips]
        self.release_c = [t.temp_c - t.hysteresis_c for t in cfg.trips]
        self.n_trips = len(self.trip_c)
        self.active = 0
        self.max_level = levels - 1

    @property
    def level(self) -> int:
        return min(self.active, self.max_level)

    def update(self, temp_c: float, eps: float = 1e-9) -> int:
        """Activate/release trips for temperature ``temp_c``; returns the clock level."""
        while self.active < len(self.trip_c) and temp_c >= self.trip_c[self.active] - eps:
            self.active += 1
        while self.active > 0 and temp_c < self.release_c[self.active - 1] + eps:
            self.active -= 1
        return self.level


class PidBudget:
    """The power allocator's PID (Linux IPA): the error to the control temperature sets a power
    budget, ``sustainable + k_p·e + k_i·∫e + k_d·de/dt``. Anti-windup as Linux: the integral grows
    only near the control temperature (or above it) and is bounded by ``sustainable / k_i``. Both
    the single node's governor and the thermal network's skin governor
    (:class:`sim.core.governors.PowerAllocator`) budget with it."""

    __slots__ = ("control_temp_c", "integral", "k_d", "k_i", "k_p", "last_err",
                 "sustainable_power_w")

    def __init__(self, control_temp_c: float, sustainable_power_w: float, k_p: float, k_i: float,
                 k_d: float) -> None:
        self.control_temp_c = control_temp_c
        self.sustainable_power_w = sustainable_power_w
        self.k_p = k_p
        self.k_i = k_i
        self.k_d = k_d
        self.integral = 0.0
        self.last_err: float | None = None

    def reset(self) -> None:
        """Below the switch-on temperature the controller forgets its history (as Linux does)."""
        self.integral = 0.0
        self.last_err = None

    def budget_w(self, temp_c: float, dt_s: float) -> float:
        err = self.control_temp_c - temp_c
        deriv = 0.0 if self.last_err is None or dt_s <= 0 else (err - self.last_err) / dt_s
        self.last_err = err
        sustainable = self.sustainable_power_w
        if err < 0 or abs(self.k_p * err) < sustainable:
            self.integral += err * dt_s
        if self.k_i > 0:
            limit = sustainable / self.k_i
            self.integral = max(-limit, min(limit, self.integral))
        return sustainable + self.k_p * err + self.k_i * self.integral + self.k_d * deriv


class PowerAllocatorGovernor(PidBudget):
    """The PID's budget, then the fastest clock level whose power fits it."""

    __slots__ = ("level",)

    def __init__(self, cfg: PidConfig) -> None:
        super().__init__(cfg.control_temp_c, cfg.sustainable_power_w, cfg.k_p, cfg.k_i, cfg.k_d)
        self.level = 0

    def choose(self, budget_w: float, static_w: float, demand_w: float,
               power_scales: list[float]) -> int:
        """Fastest level whose power (static + demand at that level's scale) fits ``budget_w``."""
        for i, ps in enumerate(power_scales):
            if static_w + demand_w * ps <= budget_w:
                self.level = i
                return i
        self.level = len(power_scales) - 1
        return self.level
