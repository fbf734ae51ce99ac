"""Static facts about a simulated device that its periodic samples do not repeat."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class DeviceInfo:
    """What the devices panel needs besides :class:`~edgeserve.records.DeviceSample`.

    Attributes:
        device: The device's name, as in its samples.
        trip_temps_c: Temperatures at which the device steps down a clock level, ascending.
        ambient_c: Ambient temperature (the bottom of the temperature bar).
        clock_levels: Number of DVFS levels (level 0 is the fastest).
        battery_capacity_wh: Full battery, or ``None`` for a mains-powered device.
    """

    device: str
    trip_temps_c: tuple[float, ...] = ()
    ambient_c: float = 25.0
    clock_levels: int = 1
    battery_capacity_wh: float | None = None
