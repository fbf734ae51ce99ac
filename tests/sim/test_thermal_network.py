"""The two-node thermal network and its governors, against closed forms and as a running device.

Network: C·dθ/dt = −G θ + (P, 0) with θ the temperatures above ambient. The reference solution
here is scipy's matrix exponential, independent of the closed form the network uses.

The running device: one CPU core kept busy (arrivals outpace it), 10 W busy, on a junction of
C_j = 1 J/°C joined to a skin of C_s = 100 J/°C by R_js = 4 °C/W, the skin to 25 °C air by
R_sa = 3 °C/W: the junction settles ~40 °C over the skin within seconds, the skin warms over
minutes (τ ≈ 700 s). A step-wise trip at 50 °C on the junction, the power allocator at 45 °C on
the skin.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.linalg import expm

from edgeserve.records import DeviceSample, RequestRecord
from sim.core.device import Device
from sim.core.simulation import Simulation
from sim.core.thermal_network import TwoNodeNetwork
from sim.scenario.config import scenario_from_raw
from sim.scenario.schema import ConfigError, build
from sim.scenario.thermal_network_config import ThermalNetworkConfig
from tests.sim.conftest import one_core_profile

NET = {"junction_c_j_per_c": 2.0, "skin_c_j_per_c": 40.0, "r_junction_skin_c_per_w": 3.0,
       "r_skin_ambient_c_per_w": 6.0, "r_junction_ambient_c_per_w": 20.0, "ambient_c": 25.0}


def reference(cfg: ThermalNetworkConfig, theta0: np.ndarray, power_w: float,
              t_s: float) -> np.ndarray:
    g_js = 1 / cfg.r_junction_skin_c_per_w
    g_sa = 1 / cfg.r_skin_ambient_c_per_w
    g_ja = 0.0 if cfg.r_junction_ambient_c_per_w is None else 1 / cfg.r_junction_ambient_c_per_w
    g = np.array([[g_js + g_ja, -g_js], [-g_js, g_js + g_sa]])
    c_inv = np.diag([1 / cfg.junction_c_j_per_c, 1 / cfg.skin_c_j_per_c])
    a = -c_inv @ g
    ss = np.linalg.solve(g, np.array([power_w, 0.0]))
    return ss + expm(a * t_s) @ (theta0 - ss)


@pytest.mark.parametrize("r_ja", [20.0, None])
@pytest.mark.parametrize("t_s", [0.1, 1.0, 7.0, 60.0, 600.0])
def test_step_response_matches_the_matrix_exponential(t_s: float, r_ja: float | None) -> None:
    cfg = build(ThermalNetworkConfig, {**NET, "r_junction_ambient_c_per_w": r_ja}, "net")
    net = TwoNodeNetwork(cfg)
    tj, ts = net.advance(t_s, power_w=5.0)
    want = reference(cfg, np.zeros(2), 5.0, t_s) + 25.0
    assert tj == pytest.approx(want[0], abs=1e-9)
    assert ts == pytest.approx(want[1], abs=1e-9)


def test_many_small_steps_equal_one_step_and_settle_at_the_steady_state() -> None:
    cfg = build(ThermalNetworkConfig, NET, "net")
    one, many = TwoNodeNetwork(cfg), TwoNodeNetwork(cfg)
    one.advance(300.0, 5.0)
    for k in range(1, 3001):
        many.advance(k * 0.1, 5.0)
    assert many.junction_c == pytest.approx(one.junction_c, abs=1e-9)
    assert many.skin_c == pytest.approx(one.skin_c, abs=1e-9)
    far = TwoNodeNetwork(cfg)
    far.advance(1e6, 5.0)
    # steady state by hand: the junction's two paths to the air in parallel with the skin path
    g_js, g_sa, g_ja = 1 / 3.0, 1 / 6.0, 1 / 20.0
    theta_j = 5.0 / (g_ja + 1 / (1 / g_js + 1 / g_sa))
    theta_s = theta_j * g_js / (g_js + g_sa)
    assert far.junction_c == pytest.approx(25.0 + theta_j, abs=1e-9)
    assert far.skin_c == pytest.approx(25.0 + theta_s, abs=1e-9)
    assert far.steady_c(5.0) == pytest.approx((25.0 + theta_j, 25.0 + theta_s))


def test_time_constants_are_the_eigenvalues() -> None:
    cfg = build(ThermalNetworkConfig, NET, "net")
    slow, fast = TwoNodeNetwork(cfg).tau_s
    g_js, g_sa, g_ja = 1 / 3.0, 1 / 6.0, 1 / 20.0
    a = np.array([[-(g_js + g_ja) / 2.0, g_js / 2.0], [g_js / 40.0, -(g_js + g_sa) / 40.0]])
    lam = sorted(np.linalg.eigvals(a).real)
    assert (fast, slow) == pytest.approx((-1 / lam[0], -1 / lam[1]))
    assert fast < 10.0 < 100.0 < slow


def hot_core(duration_s: float, governors: list[dict[str, Any]]) -> Any:
    prof = one_core_profile({"kind": "deterministic", "base_s": 0.1})
    prof["units"]["cpu"]["active_w"] = 10.0
    prof["thermal_network"] = {
        "junction_c_j_per_c": 1.0, "skin_c_j_per_c": 100.0, "r_junction_skin_c_per_w": 4.0,
        "r_skin_ambient_c_per_w": 3.0, "ambient_c": 25.0, "poll_s": 0.1,
        "clocks": {"cpu": {"levels": 8, "min_clock": 0.3, "power_exponent": 2.5}},
        "governors": governors,
    }
    return scenario_from_raw({
        "name": "hot-core", "duration_s": duration_s, "sample_interval_s": 1.0,
        "devices": [{"name": "d", "profile": prof,
                     "workload": {"kind": "periodic", "fps": 20, "output_tokens": [1, 1]}}],
    })


JUNCTION = {"node": "junction", "units": ["cpu"], "step_wise": {"trip_c": 50.0, "hysteresis_c": 1.0}}
SKIN = {"node": "skin", "units": ["cpu"],
        "power_allocator": {"control_temp_c": 45.0, "sustainable_power_w": 6.67, "k_p": 0.5,
                            "k_i": 0.01, "switch_on_below_c": 3.0}}


class FirstArrival:
    def __init__(self) -> None:
        self.t_s = math.inf

    def __call__(self, rec: RequestRecord) -> None:
        self.t_s = min(self.t_s, rec.arrived_s)


def test_a_junction_trip_throttles_within_seconds_while_the_skin_is_cool() -> None:
    sim = Simulation(hot_core(120.0, [JUNCTION, SKIN]))
    dev = sim.devices[0]
    log: list[tuple[float, int, float, float]] = []

    def on_level(d: Device) -> None:
        assert d.net is not None
        log.append((d.loop.now, d.level, d.net.net.junction_c, d.net.net.skin_c))

    dev.on_level = on_level
    first = FirstArrival()
    sim.add_record_sink(first)
    sim.run_until(120.0)
    t, level, tj, ts = log[0]
    # 10 W into the junction: 25 → 50 °C towards ~65 °C with τ ≈ 4 s, polled every 0.1 s
    assert level == 1 and t - first.t_s < 6.0
    assert tj >= 50.0 and ts < 27.0  # the skin has hardly warmed
    # afterwards the junction is held near its trip (one poll's overshoot at most)
    assert dev.net is not None and abs(dev.net.net.junction_c - 50.0) < 1.5
    assert dev.level > 0


def test_the_skin_governor_settles_the_skin_at_its_limit() -> None:
    sim = Simulation(hot_core(2400.0, [SKIN]))
    samples: list[DeviceSample] = []
    sim.add_sample_sink(samples.append)
    dev = sim.devices[0]
    skin: list[float] = []
    sim.add_sample_sink(lambda s: skin.append(dev.net.net.skin_c if dev.net else math.nan))
    sim.run_until(2400.0)
    late = skin[-600:]
    assert max(skin) < 45.0 + 1.5  # the PID overshoots a little while its integral winds up
    assert sum(late) / len(late) == pytest.approx(45.0, abs=0.1)
    assert max(late) - min(late) < 0.1
    # unthrottled it would settle at 25 + 10 W · 3 °C/W = 55 °C: the clock had to come down
    assert samples[-1].clock_level > 0


def test_units_throttle_separately() -> None:
    """A governor of the NPU leaves the CPU at full clock."""
    prof = one_core_profile({"kind": "deterministic", "base_s": 0.0})
    prof["units"]["npu"] = {"kind": "npu", "count": 1, "idle_w": 0.0, "active_w": 10.0}
    prof["stages"]["prefill"] = {"unit": "npu", "model": {"kind": "deterministic", "base_s": 0.05}}
    prof["stages"]["decode_step"] = {"unit": "npu",
                                     "model": {"kind": "deterministic", "base_s": 0.05}}
    prof["thermal_network"] = {
        "junction_c_j_per_c": 1.0, "skin_c_j_per_c": 100.0, "r_junction_skin_c_per_w": 4.0,
        "r_skin_ambient_c_per_w": 3.0, "poll_s": 0.1,
        "clocks": {"npu": {"levels": 6, "min_clock": 0.5}, "cpu": {"levels": 4}},
        "governors": [{**JUNCTION, "units": ["npu"]}]}
    sim = Simulation(scenario_from_raw({
        "name": "npu", "duration_s": 60, "sample_interval_s": 1.0,
        "devices": [{"name": "d", "profile": prof,
                     "workload": {"kind": "periodic", "fps": 2, "output_tokens": [64, 64]}}]}))
    sim.run_until(60.0)
    dev = sim.devices[0]
    assert dev.net is not None
    levels = dev.net.unit_levels()
    assert levels["npu"] > 0 and levels["cpu"] == 0
    assert dev.scale == 1.0 and dev.llm_scale > 1.0


def test_a_governor_naming_an_unknown_unit_is_a_config_error() -> None:
    prof = one_core_profile()
    prof["thermal_network"] = {**NET, "governors": [{**JUNCTION, "units": ["gpu"]}]}
    with pytest.raises(ConfigError, match=r"governors\[0\].units: no unit 'gpu'"):
        scenario_from_raw({"name": "x", "devices": [{"name": "d", "profile": prof}]})


def test_firmware_steps_down_from_the_soft_limit_and_drops_at_the_hard_limit() -> None:
    """Raspberry Pi firmware: from 80 °C one level per poll down to the soft floor, at 85 °C at
    once to the hard level, back up one level per poll below 80 − 2 °C."""
    from sim.core.governors import Firmware
    from sim.scenario.thermal_network_config import FirmwareConfig

    gov = Firmware(FirmwareConfig(soft_c=80.0, hard_c=85.0, soft_floor_level=3, hard_level=7,
                                  hysteresis_c=2.0), max_level=9)
    temps = [79.9, 80.0, 81.0, 82.0, 83.0, 84.0, 85.0, 84.0, 84.0, 84.0, 84.0, 79.0, 77.9, 77.0,
             76.0, 75.0]
    levels = [gov.update(t, 0.25, lambda lv: 0.0) for t in temps]
    assert levels == [0, 1, 2, 3, 3, 3, 7, 6, 5, 4, 3, 3, 2, 1, 0, 0]


def test_step_wise_is_one_level_per_poll() -> None:
    from sim.core.governors import StepWise
    from sim.scenario.thermal_network_config import StepWiseConfig

    gov = StepWise(StepWiseConfig(trip_c=90.0, hysteresis_c=1.0), max_level=2)
    levels = [gov.update(t, 0.25, lambda lv: 0.0) for t in (89, 90, 95, 95, 89.5, 88.9, 80, 80)]
    assert levels == [0, 1, 2, 2, 2, 1, 0, 0]
