"""Fleets: a device entry with ``count: N`` becomes N devices, each a little different.

A scenario describes a fleet by class, not device by device::

    devices:
      - name: cam                      # the class: cam-0 … cam-9999
        profile: jetson-orin-nano
        count: 10000
        jitter: {rate: 0.2, link: 0.3, ambient_c: 5}
        workload: {kind: poisson, rate_hz: 0.5}
    cloud:
      - {name: h100, profile: h100-qwen2-vl-7b, replicas: 8}   # shared by all

Every device has its own random streams — arrivals, service times, link — seeded by the scenario
seed and the device's name, so ``cam-17`` sees the same arrivals whatever the fleet's size or
the policy. :class:`~sim.scenario.config.JitterConfig` spreads the parameters that differ between devices
in the field (how busy a camera is, how good its link, how hot its enclosure), drawn once per
device from its own stream too. With no jitter the copies share the entry's config objects.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from typing import NamedTuple

from sim.scenario.config import DeviceEntry, LinkConfig, WorkloadConfig
from sim.scenario.profiles import DeviceProfile


class Instance(NamedTuple):
    """One device of an entry, with the parameters it runs with."""

    name: str
    profile: DeviceProfile
    workload: WorkloadConfig
    link: LinkConfig


def device_name(entry: DeviceEntry, i: int) -> str:
    return entry.name if entry.count == 1 else f"{entry.name}-{i}"


def instances(entry: DeviceEntry, seed: str) -> Iterator[Instance]:
    """The entry's devices in order, jittered (see the module docstring)."""
    jit = entry.jitter
    for i in range(entry.count):
        name = device_name(entry, i)
        if not jit.any:
            yield Instance(name, entry.profile, entry.workload, entry.link)
            continue
        rng = random.Random(f"{seed}:jitter:{name}")

        def factor(x: float, rng: random.Random = rng) -> float:
            return rng.uniform(1.0 - x, 1.0 + x)

        wl, link, prof = entry.workload, entry.link, entry.profile
        if jit.rate:
            f = factor(jit.rate)
            wl = dataclasses.replace(wl, rate_hz=wl.rate_hz * f, fps=wl.fps * f)
        if jit.link:
            link = dataclasses.replace(link, uplink_mbps=link.uplink_mbps * factor(jit.link),
                                       downlink_mbps=link.downlink_mbps * factor(jit.link),
                                       rtt_ms=link.rtt_ms * factor(jit.link))
        if jit.ambient_c:
            th = prof.thermal
            shift = rng.uniform(-jit.ambient_c, jit.ambient_c)
            prof = dataclasses.replace(prof, thermal=dataclasses.replace(
                th, ambient_c=th.ambient_c + shift))
            if prof.thermal_network is not None:
                tn = prof.thermal_network
                prof = dataclasses.replace(prof, thermal_network=dataclasses.replace(
                    tn, ambient_c=tn.ambient_c + shift))
        yield Instance(name, prof, wl, link)
