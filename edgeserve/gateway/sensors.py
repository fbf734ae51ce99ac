"""Temperature and battery for the live device: the host's sensors, or a virtual one.

Where the host exposes them (``psutil.sensors_temperatures`` / ``sensors_battery``) the gateway
reads the hottest temperature and the battery charge. Where it does not (a container, a VM, a
desktop without a battery), and a device profile was given, a *virtual sensor* stands in: the
profile's lumped RC thermal node (:class:`sim.core.thermal.ThermalNode`, ``C·dT/dt = P − (T − T_amb)/R``)
driven by a power figure computed from the measured CPU utilisation ``u`` of this host:

    P = base_w + Σ_units count · (idle_w + u · (active_w − idle_w))

and, when the profile has a battery, a virtual battery drained by the same power. The source of
each figure (``host`` or ``virtual``) is said at start-up and in every decision record.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from dataclasses import dataclass

import psutil

from sim.core.thermal import ThermalNode
from sim.scenario.profiles import DeviceProfile


class SensorSource(enum.StrEnum):
    HOST = "host"
    VIRTUAL = "virtual"
    NONE = "none"


@dataclass(slots=True)
class Reading:
    temp_c: float
    temp_source: SensorSource
    battery_fraction: float | None
    battery_source: SensorSource
    cpu_util: float


def host_temp_c() -> float | None:
    try:
        temps = psutil.sensors_temperatures()
    except (AttributeError, OSError):
        return None
    values = [t.current for ts in temps.values() for t in ts if t.current]
    return max(values) if values else None


def host_battery_fraction() -> float | None:
    try:
        b = psutil.sensors_battery()
    except (AttributeError, OSError):
        return None
    return None if b is None else b.percent / 100.0


class Sensors:
    """Samples every ``interval_s``; :attr:`reading` is the latest."""

    def __init__(self, profile: DeviceProfile | None, interval_s: float,
                 host: bool = True) -> None:
        self.profile = profile
        self.host = host  # False: virtual sensors even where the host has real ones
        self.interval_s = interval_s
        self.node = ThermalNode(profile.thermal, time.monotonic()) if profile else None
        bat = profile.battery if profile else None
        self._bat_capacity_j = bat.capacity_wh * 3600.0 if bat else None
        self._bat_j = self._bat_capacity_j * bat.initial_fraction if bat and self._bat_capacity_j else 0.0
        self._t = time.monotonic()
        psutil.cpu_percent(None)  # the first call starts the measuring window
        self.reading = self._read(0.0)

    def power_w(self, util: float) -> float:
        p = self.profile
        if p is None:
            return 0.0
        return p.base_w + sum(u.count * (u.idle_w + util * (u.active_w - u.idle_w))
                              for u in p.units.values())

    def _read(self, util: float) -> Reading:
        now = time.monotonic()
        dt, self._t = now - self._t, now
        power = self.power_w(util)
        temp = host_temp_c() if self.host else None
        temp_src = SensorSource.HOST
        if temp is None:
            if self.node is not None:
                temp, temp_src = self.node.advance(now, power), SensorSource.VIRTUAL
            else:
                temp, temp_src = 0.0, SensorSource.NONE
        bat = host_battery_fraction() if self.host else None
        bat_src = SensorSource.HOST
        if bat is None:
            if self._bat_capacity_j:
                self._bat_j = max(0.0, self._bat_j - power * dt)
                bat, bat_src = self._bat_j / self._bat_capacity_j, SensorSource.VIRTUAL
            else:
                bat_src = SensorSource.NONE
        return Reading(temp, temp_src, bat, bat_src, util)

    def sample(self) -> Reading:
        self.reading = self._read(psutil.cpu_percent(None) / 100.0)
        return self.reading

    def describe(self) -> str:
        r = self.reading
        name = self.profile.name if self.profile else "?"
        temp = {SensorSource.HOST: "host sensor",
                SensorSource.VIRTUAL: f"virtual (profile {name} RC thermal model driven by "
                                      "measured CPU utilisation)",
                SensorSource.NONE: "none (no host sensor and no --profile: reads 0 °C)"}
        bat = {SensorSource.HOST: "host sensor",
               SensorSource.VIRTUAL: f"virtual (profile {name} battery drained by the same power)",
               SensorSource.NONE: "none (no host battery and no profile battery)"}
        return f"temperature: {temp[r.temp_source]}; battery: {bat[r.battery_source]}"

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.sample()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)
