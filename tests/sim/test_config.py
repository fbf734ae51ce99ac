"""Scenarios and profiles: shipped files load; bad values are rejected naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.scenario.config import (
    SCENARIO_DIR,
    available_profiles,
    load_cloud_profile,
    load_device_profile,
    load_scenario,
    parse_override,
    scenario_from_raw,
)
from sim.scenario.schema import ConfigError


def test_every_shipped_profile_loads_and_documents_sources_and_assumptions() -> None:
    names = available_profiles()
    assert {"jetson-orin-nano", "rpi5-hailo", "phone-soc", "h100-qwen2-vl-7b"} <= set(names)
    for n in names:
        p = load_device_profile(n) if "units" in Path(f"models/profiles/{n}.yaml").read_text() \
            else load_cloud_profile(n)
        assert p.sources and p.assumed, n


def test_every_shipped_scenario_loads() -> None:
    for path in SCENARIO_DIR.glob("*.yaml"):
        assert load_scenario(path).devices


@pytest.mark.parametrize(("key", "value", "message"), [
    ("devices[0].profile.thermal_network.r_skin_ambient_c_per_w", -1,
     "scenario.devices[0].profile.thermal_network.r_skin_ambient_c_per_w: must be > 0, got -1.0"),
    ("devices[0].workload.rate_hz", "fast",
     "scenario.devices[0].workload.rate_hz: expected a number, got 'fast'"),
    ("devices[0].workload.kind", "lumpy",
     "scenario.devices[0].workload.kind: must be one of 'poisson', 'gamma', 'periodic', 'replay'"),
    ("devices[0].link.loss", 1.5, "scenario.devices[0].link.loss: must be within [0, 1)"),
    ("devices[0].profile.stages.prefill.unit", "tpu",
     "scenario.devices[0].profile.stages.prefill.unit: no unit 'tpu'"),
    ("devices[0].workload.colour", 1, "scenario.devices[0].workload.colour: unknown field"),
    ("devices[0].profile.stages.image_decode.model.per.pixels", 1e-9,
     "scenario.devices[0].profile.stages.image_decode.model.per.pixels: unknown feature"),
    ("cloud[0].profile.server.gpu_memory_utilization", 0,
     "scenario.cloud[0].profile.server.gpu_memory_utilization: must be in (0, 1]"),
])
def test_bad_fields_are_named(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_scenario(None, [(key, value)])
    assert str(e.value).startswith(message)


def test_missing_required_field_and_unknown_profile() -> None:
    with pytest.raises(ConfigError, match=r"^scenario.devices: required field is missing"):
        scenario_from_raw({"name": "x", "duration_s": 1})
    with pytest.raises(ConfigError, match=r"devices\[0\].profile: no profile 'nano-9000'"):
        scenario_from_raw({"name": "x", "duration_s": 1,
                           "devices": [{"name": "d", "profile": "nano-9000"}]})


def test_overrides_parse_yaml_values() -> None:
    assert parse_override("devices.0.count=3") == ("devices.0.count", 3)
    assert parse_override("policy.kind=always_cloud") == ("policy.kind", "always_cloud")
    with pytest.raises(ConfigError, match=r"expected KEY\.PATH=VALUE"):
        parse_override("nonsense")


def test_profile_set_tweaks_a_named_profile() -> None:
    sc = scenario_from_raw({"name": "x", "duration_s": 1, "devices": [{
        "name": "p", "profile": "phone-soc",
        "profile_set": {"battery.initial_fraction": 0.6, "thermal_network.ambient_c": 35}}]})
    prof = sc.devices[0].profile
    assert prof.battery is not None and prof.battery.initial_fraction == 0.6
    assert prof.thermal_network is not None and prof.thermal_network.ambient_c == 35.0
