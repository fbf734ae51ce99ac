"""The shipped thermal-network profiles carry every unit's efficiency, and the phone's energy-aware
decision follows it.

Each unit's clock law gives its efficiency at full clock (``tops_per_w``); at level ``k``, clock
``f_k``, it is ``tops_per_w · f_k^(1 − n)`` for dynamic power ∝ f^n, so the energy per operation
falls with the clock wherever ``n > 1``.

On the ``phone-battery`` scenario's phone (its real profile, its device in a simulation, a cloud
reachable) a request's local energy is ``a·g_cpu + b·g_npu`` with ``g = f^(n − 1)`` of each unit's
present clock (``a``, ``b``: the request's full-clock energy on the CPU and on the NPU). The
request below uploads 6 MB: its radio energy lies between the local estimate at full clock and at
the deepest clock level, so energy_aware offloads it when the phone is cool and keeps it when the
phone is throttled, and without the efficiency figures decides from the battery alone.
"""

from __future__ import annotations

import pytest

from edgeserve.records import RequestRecord
from sim.core.device import Device
from sim.core.job import Job
from sim.core.policies import EnergyAware, Placement
from sim.core.simulation import Simulation
from sim.scenario.config import load_device_profile, load_scenario

SHIPPED = ("phone-soc", "rpi5-hailo", "jetson-orin-nano")


@pytest.mark.parametrize("name", SHIPPED)
def test_every_unit_has_an_efficiency_at_every_level(name: str) -> None:
    prof = load_device_profile(name)
    net = prof.thermal_network
    assert net is not None
    assert set(net.clocks) | set(net.tops_per_w) == set(prof.units)
    for unit, law in net.clocks.items():
        assert law.tops_per_w is not None, unit
        effs = [law.efficiency(k) for k in range(law.levels)]
        assert all(e is not None and e > 0 for e in effs), unit
        joules_per_op = [1.0 / e for e in effs if e is not None]
        if law.levels > 1 and law.power_exponent > 1:
            assert all(lo < hi for lo, hi in zip(joules_per_op[1:], joules_per_op, strict=False)), \
                f"{name} {unit}: energy per operation must fall with the clock"
        for f, e in zip(law.clocks(), effs, strict=True):
            assert e == pytest.approx(law.tops_per_w * f ** (1.0 - law.power_exponent))


@pytest.mark.parametrize("name", SHIPPED)
def test_a_simulated_device_prices_every_unit_at_every_level(name: str) -> None:
    """Law units as their law says; a unit on the profile's dvfs ladder by stretch × power."""
    sim = Simulation(load_scenario(None, []))  # the default scenario has one of each
    dev = next(d for d in sim.devices if d.profile.name == name)
    net = dev.net
    assert net is not None and dev.profile.thermal_network is not None
    cfg = dev.profile.thermal_network
    for u, unit in enumerate(dev.unit_names):
        clock = net.clocks[u]
        for k in range(clock.max_level + 1):
            e = net.energy.efficiency(u, k)
            law = cfg.clocks.get(unit)
            if law is not None:
                assert e == pytest.approx(law.efficiency(k))
            else:
                lv = dev.levels[k]
                assert e == pytest.approx(cfg.tops_per_w[unit] / (lv.scale * lv.power_scale))


def phone(tops_per_w: bool = True) -> Device:
    path = "devices[0].profile.thermal_network.clocks"
    off = [] if tops_per_w else [(f"{path}.{u}.tops_per_w", None) for u in ("cpu", "npu")]
    sim = Simulation(load_scenario("phone-battery", off))
    return sim.devices[0]


def request() -> Job:
    rec = RequestRecord(id="r", arrived_s=0.0, image_bytes=6_000_000)
    return Job(rec, None, 4000 * 3000, 1280 * 960, 1200, 1232, 128)


def test_the_phone_s_decision_follows_its_units_efficiency_at_their_clock() -> None:
    dev = phone()
    assert dev.net is not None and dev.profile.thermal_network is not None
    laws = dev.profile.thermal_network.clocks
    cpu, npu = laws["cpu"], laws["npu"]

    def g(law_name: str, level: int) -> float:
        law = laws[law_name]
        eff = law.efficiency(level)
        assert eff is not None and law.tops_per_w is not None
        return law.tops_per_w / eff  # f^(n - 1): energy per operation relative to full clock

    estimates = {}
    for level in (0, cpu.levels - 1, npu.levels - 1):
        dev.net.force(level)
        estimates[level] = dev.estimate_local_j(request())
    full, cpu_deep, both_deep = estimates[0], estimates[cpu.levels - 1], estimates[npu.levels - 1]
    assert full is not None and cpu_deep is not None and both_deep is not None
    # force(7): both units at level 7; force(15): the CPU stays at its deepest (7), the NPU at 15
    npu_7, npu_15, cpu_7 = g("npu", cpu.levels - 1), g("npu", npu.levels - 1), g("cpu", 7)
    b = (cpu_deep - both_deep) / (npu_7 - npu_15)  # the request's NPU energy at full clock
    a = full - b
    assert a > 0 and b > 0
    assert cpu_deep == pytest.approx(a * cpu_7 + b * npu_7)
    assert b / full > 0.5  # the language model on the NPU is most of it
    # the deepest NPU level divides its part by 0.3^-1.5 = 6.1
    assert npu_15 == pytest.approx(0.3 ** 1.5)
    assert both_deep == pytest.approx(a * cpu_7 + b * 0.3 ** 1.5)

    radio = dev.estimate_cloud_j(request())
    assert radio is not None and both_deep < radio < full
    policy = EnergyAware()
    dev.net.force(0)
    assert policy.decide(request(), dev).placement is Placement.CLOUD
    dev.net.force(npu.levels - 1)
    d = policy.decide(request(), dev)
    assert (d.placement, d.reason) == (Placement.LOCAL, "local predicted to use less energy")

    bare = phone(tops_per_w=False)
    assert bare.estimate_local_j(request()) is None
    d = policy.decide(request(), bare)
    assert (d.placement, d.reason) == (Placement.LOCAL, "battery ok")
