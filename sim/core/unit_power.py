"""The device's units at work and the power they draw at the nominal clock.

A device has named units (a CPU cluster, an NPU, a GPU), each with ``count`` servers drawing
``idle_w`` each when idle and ``active_w`` when busy. :class:`UnitPower` counts the busy servers of
every unit and keeps ``Σ busy servers × (active_w − idle_w)``, the dynamic power at the nominal
clock; a heat model (:mod:`sim.core.heat`, :mod:`sim.core.device_network`) scales it by the clock
level's ``power_scale`` and adds ``static_w`` (``base_w`` plus every unit's idle power).

A unit can be asked for more servers than it has (an engine sharing the CPU cluster with the
preprocessing workers): the extra ones draw nothing more, the unit is already fully busy.
"""

from __future__ import annotations

from sim.scenario.profiles import DeviceProfile


class UnitPower:
    """Busy servers per unit and the dynamic power they draw at nominal clock."""

    __slots__ = ("busy", "cap", "dyn_busy_w", "dyn_w", "names", "static_w")

    def __init__(self, profile: DeviceProfile) -> None:
        units = profile.units
        self.names = list(units)
        self.cap = [units[n].count for n in self.names]
        self.dyn_w = [units[n].active_w - units[n].idle_w for n in self.names]
        self.busy = [0] * len(self.names)
        self.dyn_busy_w = 0.0  # Σ over busy servers (up to each unit's count) of active_w − idle_w
        self.static_w = profile.base_w + sum(u.idle_w * u.count for u in units.values())

    def index(self, unit: str) -> int:
        return self.names.index(unit)

    def delta(self, unit: int, delta: int) -> bool:
        """A server of ``unit`` started (+1) or stopped (−1) work; True if the power changed
        (False beyond the unit's count: a shared unit already fully counted)."""
        busy = self.busy
        b = busy[unit]
        busy[unit] = b + delta
        if (b < self.cap[unit]) if delta > 0 else (b <= self.cap[unit]):
            self.dyn_busy_w += delta * self.dyn_w[unit]
            return True
        return False

    def busy_w(self, unit: int) -> float:
        """``unit``'s dynamic power at nominal clock now."""
        b = self.busy[unit]
        cap = self.cap[unit]
        return (b if b < cap else cap) * self.dyn_w[unit]

    def max_dyn_w(self) -> float:
        """Dynamic power with every server of every unit busy, at nominal clock."""
        return sum(c * d for c, d in zip(self.cap, self.dyn_w, strict=True))

    def move(self, src: int, dst: int, servers: int) -> None:
        """``servers`` busy servers now count on unit ``dst`` instead of ``src`` (a migrated
        stage takes its work in progress with it)."""
        self.busy[src] -= servers
        self.busy[dst] += servers
