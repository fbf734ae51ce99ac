"""The RC thermal node and step-wise throttling, against the closed-form solution.

Node: C·dT/dt = P − (T − T_amb)/R, so under constant P
T(t) = T_ss + (T0 − T_ss)·exp(−t/RC) with T_ss = T_amb + P·R.

The throttling scenario: one CPU core kept busy (arrivals outpace it), 20 W at full clock and
10 W at the throttled level, R = 2 °C/W, C = 10 J/°C (τ = 20 s), T_amb = 25 °C, one trip at 60 °C
with 5 °C hysteresis. At full clock T heads for 65 °C, throttled for 45 °C, so the device trips at
60 °C, cools to 55 °C, recovers, heats to 60 °C again, and so on.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from edgeserve.records import DeviceSample, RequestRecord
from sim.core.device import Device
from sim.core.simulation import Simulation
from sim.core.thermal import StepWiseGovernor, ThermalNode
from sim.scenario.config import scenario_from_raw
from sim.scenario.profiles import ThermalConfig, TripConfig
from tests.sim.conftest import one_core_profile

TAU_S = 20.0


def test_steady_state_is_ambient_plus_power_times_r() -> None:
    node = ThermalNode(ThermalConfig(r_c_per_w=2.5, c_j_per_c=8.0, ambient_c=30.0))
    for k in range(1, 2001):  # many small steps, as events would make them
        node.advance(k * 0.1, power_w=12.0)
    assert abs(node.temp_c - (30.0 + 12.0 * 2.5)) < 0.1


def test_one_time_constant_gives_63_2_percent_of_the_rise() -> None:
    node = ThermalNode(ThermalConfig(r_c_per_w=2.0, c_j_per_c=10.0, ambient_c=25.0))
    node.advance(TAU_S, power_w=20.0)
    rise = node.temp_c - 25.0
    assert abs(rise / 40.0 - 0.632) < 0.01 * 0.632


def test_time_to_a_temperature_inverts_the_solution() -> None:
    node = ThermalNode(ThermalConfig(r_c_per_w=2.0, c_j_per_c=10.0, ambient_c=25.0))
    t = node.time_to(60.0, power_w=20.0)
    assert t == pytest.approx(TAU_S * math.log(40 / 5))
    assert node.time_to(70.0, power_w=20.0) == math.inf  # above the steady state: never


def test_step_wise_trips_rise_and_release_with_hysteresis() -> None:
    gov = StepWiseGovernor(ThermalConfig(r_c_per_w=1, c_j_per_c=1, trips=[
        TripConfig(60, 5), TripConfig(70, 5)]), levels=3)
    seen = [gov.update(t) for t in (59.9, 60.0, 64.0, 70.0, 66.0, 64.9, 56.0, 54.9)]
    assert seen == [0, 1, 1, 2, 2, 1, 1, 0]


def busy_core_scenario(trips: list[dict[str, float]], duration_s: float = 200.0) -> Any:
    prof = one_core_profile(
        {"kind": "deterministic", "base_s": 0.1},
        dvfs=[{"scale": 1.0, "power_scale": 1.0}, {"scale": 2.0, "power_scale": 0.5}],
        thermal={"r_c_per_w": 2.0, "c_j_per_c": 10.0, "ambient_c": 25.0, "trips": trips},
    )
    prof["units"]["cpu"]["active_w"] = 20.0
    return scenario_from_raw({
        "name": "hot-core", "duration_s": duration_s, "sample_interval_s": 1.0,
        "devices": [{"name": "d", "profile": prof,
                     "workload": {"kind": "periodic", "fps": 20, "output_tokens": [1, 1]}}],
    })


class FirstArrival:
    """A record sink remembering the earliest arrival (the camera stream's random phase)."""

    def __init__(self) -> None:
        self.t_s = math.inf

    def __call__(self, rec: RequestRecord) -> None:
        self.t_s = min(self.t_s, rec.arrived_s)


def test_throttling_trips_and_recovers_at_the_configured_temperatures() -> None:
    sim = Simulation(busy_core_scenario([{"temp_c": 60.0, "hysteresis_c": 5.0}]))
    log: list[tuple[float, int, float]] = []

    def on_level(d: Device) -> None:
        log.append((d.loop.now, d.level, d.heat.junction_c()))

    sim.devices[0].on_level = on_level
    first = FirstArrival()
    sim.add_record_sink(first)
    sim.run_until(100.0)
    t0 = first.t_s  # the core is busy from the first arrival on
    heat = TAU_S * math.log((65 - 25) / (65 - 60))  # 25 → 60 °C towards 65 °C
    cool = TAU_S * math.log((60 - 45) / (55 - 45))  # 60 → 55 °C towards 45 °C
    reheat = TAU_S * math.log((65 - 55) / (65 - 60))  # 55 → 60 °C towards 65 °C
    expected = [
        (t0 + heat, 1, 60.0),
        (t0 + heat + cool, 0, 55.0),
        (t0 + heat + cool + reheat, 1, 60.0),
        (t0 + heat + 2 * cool + reheat, 0, 55.0),
    ]
    assert [lv for _, lv, _ in log[:4]] == [lv for _, lv, _ in expected]
    for (t, _, temp), (te, _, tempe) in zip(log, expected, strict=False):
        assert t == pytest.approx(te, abs=1e-6)
        assert temp == pytest.approx(tempe, abs=1e-6)


def test_heating_follows_the_rc_curve_in_a_run() -> None:
    """Without trips, device samples trace T_amb + P·R·(1 − exp(−t/RC)) and settle at T_amb + P·R."""
    sim = Simulation(busy_core_scenario([], duration_s=400.0))
    samples: list[DeviceSample] = []
    sim.add_sample_sink(samples.append)
    first = FirstArrival()
    sim.add_record_sink(first)
    sim.run_until(400.0)
    t0 = first.t_s
    at_tau = next(s for s in samples if s.t_s >= t0 + TAU_S)
    expected = 25.0 + 40.0 * (1 - math.exp(-(at_tau.t_s - t0) / TAU_S))
    assert at_tau.temp_c == pytest.approx(expected, abs=1e-9)
    assert abs(samples[-1].temp_c - 65.0) < 0.1


def test_summary_throttled_share_is_the_time_below_full_clock() -> None:
    sim = Simulation(busy_core_scenario([{"temp_c": 60.0, "hysteresis_c": 5.0}], duration_s=150))
    changes: list[tuple[float, int]] = []
    sim.devices[0].on_level = lambda d: changes.append((d.loop.now, d.level))
    summary = sim.run()
    end = summary.sim_time_s
    throttled = sum((b[0] if b else end) - a[0]
                    for a, b in itertools.zip_longest(changes, changes[1:]) if a[1] > 0)
    assert len(changes) >= 4
    assert summary.devices[0].throttled_share == pytest.approx(throttled / end)
