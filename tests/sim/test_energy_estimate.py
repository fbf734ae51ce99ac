"""The energy-aware policy decides from each unit's efficiency at its present clock level.

One device whose only work is 100 decode steps of 50 ms on an NPU of 4 W dynamic power: 5 s and
20 J at full clock. Its clock law has 8 levels from full clock down to 0.3 (f = 1, 0.9, …, 0.3),
dynamic power ∝ f^2.5, and 10 TOPS/W at full clock, so the same work costs 20 J · f^1.5 at level
k. Offloading sends 5 MB up a 10 Mbit/s link and 900 bytes down a 50 Mbit/s one, at the radio's
1.5 W: 6.0 J. Local costs more than the radio down to f^1.5 = 0.3 (f ≈ 0.45): at levels 0–5 the
request goes to the cloud, at 6 and 7 it stays.
"""

from __future__ import annotations

from typing import Any

import pytest

from edgeserve.records import RequestRecord
from sim.core.device import Device
from sim.core.job import Job
from sim.core.offload import RADIO_W
from sim.core.policies import EnergyAware, Placement
from sim.core.simulation import Simulation
from sim.scenario.config import scenario_from_raw
from tests.sim.conftest import one_core_profile

IMAGE_BYTES = 5_000_000
OUTPUT_TOKENS = 100


def profile(npu_tops_per_w: float | None = 10.0) -> dict[str, Any]:
    prof = one_core_profile()
    prof["units"]["npu"] = {"kind": "npu", "idle_w": 0.5, "active_w": 4.5}
    prof["stages"]["prefill"] = {"unit": "npu"}
    prof["stages"]["decode_step"] = {"unit": "npu",
                                     "model": {"kind": "deterministic", "base_s": 0.05}}
    npu: dict[str, Any] = {"levels": 8, "min_clock": 0.3, "power_exponent": 2.5}
    if npu_tops_per_w is not None:
        npu["tops_per_w"] = npu_tops_per_w
    prof["thermal_network"] = {
        "junction_c_j_per_c": 1.0, "skin_c_j_per_c": 100.0, "r_junction_skin_c_per_w": 4.0,
        "r_skin_ambient_c_per_w": 3.0,
        "clocks": {"npu": npu, "cpu": {"levels": 2, "tops_per_w": 1.0}},
    }
    return prof


def device(prof: dict[str, Any]) -> Device:
    sim = Simulation(scenario_from_raw({
        "name": "energy", "duration_s": 1.0,
        "devices": [{"name": "d", "profile": prof, "workload": {"kind": "periodic", "fps": 1},
                     "link": {"uplink_mbps": 10, "downlink_mbps": 50, "jitter_ms": 0,
                              "loss": 0}}],
        "cloud": [{"name": "gpu", "profile": "h100-qwen2-vl-7b"}]}))
    return sim.devices[0]


def job() -> Job:
    return Job(RequestRecord(id="j", arrived_s=0.0, image_bytes=IMAGE_BYTES), None,
               0, 0, 0, 0, OUTPUT_TOKENS)


def test_the_decision_follows_the_npu_clock_level() -> None:
    dev = device(profile())
    assert dev.net is not None
    radio_j = ((IMAGE_BYTES + 2000) * 8 / 10e6 + (OUTPUT_TOKENS * 4 + 500) * 8 / 50e6) * RADIO_W
    assert dev.estimate_cloud_j(job()) == pytest.approx(radio_j)
    policy = EnergyAware()
    placements = []
    for level in range(8):
        dev.net.force(level)
        f = 1.0 - 0.1 * level
        assert dev.estimate_local_j(job()) == pytest.approx(20.0 * f ** 1.5)
        d = policy.decide(job(), dev)
        placements.append(d.placement)
        assert d.reason == ("offload predicted to use less energy" if d.placement is Placement.CLOUD
                            else "local predicted to use less energy")
    assert placements == [Placement.CLOUD] * 6 + [Placement.LOCAL] * 2


def test_without_efficiency_figures_it_decides_from_the_battery_alone() -> None:
    dev = device(profile(npu_tops_per_w=None))
    assert dev.estimate_local_j(job()) is None
    d = EnergyAware().decide(job(), dev)
    assert (d.placement, d.reason) == (Placement.LOCAL, "battery ok")
    # and the energy rule can be switched off where the figures exist
    dev = device(profile())
    assert EnergyAware(by_energy=False).decide(job(), dev).reason == "battery ok"
