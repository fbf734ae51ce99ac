"""Policies: the built-ins by name, and a policy of one's own (a dataclass subclass of Policy)
used by the simulator exactly like a built-in — also when the built-ins are compiled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from edgeserve.records import RequestRecord
from sim.core.device import Device
from sim.core.job import Job
from sim.core.policies import (
    CLOUD,
    LOCAL,
    POLICIES,
    Decision,
    Placement,
    Policy,
    PredictedLatency,
    describe,
    make_policy,
    register,
)
from sim.core.simulation import Simulation
from sim.scenario.config import PolicyConfig, scenario_from_raw
from sim.scenario.schema import ConfigError
from tests.sim.conftest import small_fleet


@register
@dataclass
class EveryOther(Policy):
    """Alternate: local, cloud, local, … (per device)."""

    name: ClassVar[str] = "every_other_test"
    start_local: bool = True

    def decide(self, job: Job, device: Device) -> Decision:
        local = (device.decisions % 2 == 0) == self.start_local
        return LOCAL if local else CLOUD


def test_builtins_are_registered_under_their_names_with_a_description() -> None:
    assert POLICIES["predicted_latency"] is PredictedLatency
    assert PredictedLatency.name == "predicted_latency" == PredictedLatency().name
    about = dict(describe())
    for name in ("always_local", "always_cloud", "queue_threshold", "predicted_latency",
                 "thermal_aware", "energy_aware", "downgrade", "model_downgrade", "frame_drop"):
        cls = POLICIES[name]
        assert cls.name == name and about[name], name
        if cls.__doc__:  # pure Python (compiled classes carry no docstring): the same line
            assert about[name] == cls.__doc__.strip().splitlines()[0]
    assert about["every_other_test"] == "Alternate: local, cloud, local, … (per device)."


def test_builtin_parameters_come_from_config_and_are_validated() -> None:
    p = make_policy(PolicyConfig(kind="predicted_latency", params={"margin_s": 0.25}))
    assert isinstance(p, PredictedLatency) and p.margin_s == 0.25
    with pytest.raises(ConfigError, match=r"policy\.params\.nope: unknown field"):
        make_policy(PolicyConfig(kind="predicted_latency", params={"nope": 1}))
    with pytest.raises(ConfigError, match=r"policy\.params\.scale"):
        make_policy(PolicyConfig(kind="thermal_aware", params={"scale": 2.0}))


def test_a_policy_of_ones_own_steers_the_simulation() -> None:
    policy = make_policy(PolicyConfig(kind="every_other_test", params={"start_local": False}))
    assert isinstance(policy, EveryOther) and policy.name == "every_other_test"
    sim = Simulation(scenario_from_raw(small_fleet(duration_s=600)), policy=policy)
    records: list[RequestRecord] = []
    sim.add_record_sink(records.append)
    sim.run()
    by_device: dict[str, list[RequestRecord]] = {}
    for r in sorted(records, key=lambda r: r.arrived_s):
        by_device.setdefault(r.device or "", []).append(r)
    assert len(records) > 20
    for recs in by_device.values():
        places = [r.placement for r in recs]
        assert places[0] != "local" and places[1] == "local"  # cloud first, then alternating
        assert all((p == "local") == (i % 2 == 1) for i, p in enumerate(places))
        assert {r.decision_reason for r in recs} == {"local", "cloud"}
    assert sim.summary().policy == "every_other_test"


def test_decisions_are_plain_values() -> None:
    d = Decision(Placement.LOCAL, "why", resolution_scale=0.5)
    assert (d.placement, d.reason, d.resolution_scale, d.model) == (Placement.LOCAL, "why", 0.5, None)
