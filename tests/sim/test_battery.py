"""The battery part alone: charge left, share and low mark after a number of joules drawn."""

from __future__ import annotations

import pytest

from sim.core.battery import Battery
from sim.scenario.profiles import BatteryConfig
from tests.sim.conftest import one_core_profile
from tests.sim.test_device import one_device


def test_charge_left_is_the_initial_charge_less_the_joules_drawn() -> None:
    b = Battery(BatteryConfig(capacity_wh=10.0, initial_fraction=0.5, low_fraction=0.2))
    assert b.start_wh == 5.0
    assert b.left_wh(0.0) == 5.0
    assert b.left_wh(3600.0) == 4.0  # 3600 J is one watt-hour
    assert b.fraction(3600.0) == 0.4
    assert not b.low(3600.0)


def test_the_battery_is_low_below_its_mark_and_never_below_empty() -> None:
    b = Battery(BatteryConfig(capacity_wh=10.0, initial_fraction=1.0, low_fraction=0.25))
    assert not b.low(7.5 * 3600.0)  # exactly at the mark: not below it
    assert b.low(7.6 * 3600.0)
    assert b.left_wh(11.0 * 3600.0) == 0.0
    assert b.fraction(11.0 * 3600.0) == 0.0


def test_a_device_reports_its_battery_through_the_part() -> None:
    prof = one_core_profile({"kind": "deterministic", "base_s": 0.5},
                            battery={"capacity_wh": 2.0, "initial_fraction": 0.75,
                                     "low_fraction": 0.5})
    sim = one_device(prof, {"rate_hz": 1.0}, requests=5)
    sim.run()
    dev = sim.devices[0]
    drawn = dev.energy_j + dev.radio_j
    assert drawn > 0.0
    assert dev.battery_wh == pytest.approx(1.5 - drawn / 3600.0, rel=1e-12)
    assert dev.battery_fraction == pytest.approx((1.5 - drawn / 3600.0) / 2.0, rel=1e-12)
    assert dev.battery_capacity_wh == 2.0 and dev.battery_low_fraction == 0.5
