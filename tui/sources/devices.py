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


def infos_from_meta(meta: dict[str, object]) -> list[DeviceInfo]:
    """Device facts a trace header may carry as ``meta["devices"]``.

    The expected shape is ``{name: {"trip_temps_c": [..], "ambient_c": .., "clock_levels": ..,
    "battery_capacity_wh": ..}}`` (every key optional); anything else is ignored, so a trace
    without it simply shows devices without trip lines.
    """
    devices = meta.get("devices")
    if not isinstance(devices, dict):
        return []
    out = []
    for name, d in devices.items():
        if not isinstance(d, dict):
            continue
        try:
            cap = d.get("battery_capacity_wh")
            out.append(
                DeviceInfo(
                    device=str(name),
                    trip_temps_c=tuple(float(t) for t in d.get("trip_temps_c", ())),
                    ambient_c=float(d.get("ambient_c", 25.0)),
                    clock_levels=int(d.get("clock_levels", 1)),
                    battery_capacity_wh=None if cap is None else float(cap),
                )
            )
        except (TypeError, ValueError):
            continue
    return out
