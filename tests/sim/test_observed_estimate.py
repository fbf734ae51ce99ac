"""The gateway's local estimate, idle prediction × observed ratio × (1 + queue): its arithmetic,
and a replayed gateway trace whose simulated device learns from its own finished requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from edgeserve.records import RequestRecord
from sim.core.ewma import Ewma
from sim.core.job import Job
from sim.core.observed_estimate import ObservedEstimate
from sim.core.simulation import Simulation
from sim.experiments.gateway_replay import read_gateway_trace, replay_scenario
from sim.scenario.config import SCENARIO_DIR, inline_profiles, scenario_from_raw
from sim.scenario.schema import load_yaml
from tests.sim.conftest import gateway_trace, one_core_profile


def job(pixels: int) -> Job:
    return Job(RequestRecord(id="j", arrived_s=0.0), None, pixels, pixels, 0, 10, 1)


def test_an_ewma_starts_at_its_prior_and_the_first_observation_replaces_it() -> None:
    e = Ewma(1.0, alpha=0.25)
    assert (e.value, e.count) == (1.0, 0)
    assert e.add(3.0) == 3.0  # not 1.5: the prior is a placeholder, not an observation
    assert e.add(7.0) == pytest.approx(3.0 + 0.25 * 4.0)
    assert e.count == 2


def test_the_estimate_is_the_idle_prediction_times_the_ratio_times_one_plus_the_queue() -> None:
    est = ObservedEstimate(lambda j: j.source_pixels * 1e-6)  # 1 s per megapixel, idle
    one_mp, two_mp = job(1_000_000), job(2_000_000)
    assert est.estimate_s(one_mp, 0) == pytest.approx(1.0)  # no observation yet: ratio 1
    assert est.estimate_s(two_mp, 3) == pytest.approx(2.0 * 4)
    # 6 s behind a queue of 2: a service of 2 s against 1 s predicted, ratio 2
    est.observe(one_mp, 6.0, 2)
    assert est.ratio.value == pytest.approx(2.0) and est.service.value == pytest.approx(2.0)
    assert est.estimate_s(two_mp, 0) == pytest.approx(2.0 * 2.0)
    assert est.estimate_s(two_mp, 1) == pytest.approx(2.0 * 2.0 * 2)
    # 1 s alone on 2 MP: ratio 0.5, moved by alpha = 0.3 from 2
    est.observe(two_mp, 1.0, 0)
    assert est.ratio.value == pytest.approx(2.0 + 0.3 * (0.5 - 2.0))
    assert est.estimate_s(one_mp, 0) == pytest.approx(1.55)


def test_without_an_idle_prediction_it_is_the_moving_service_time() -> None:
    est = ObservedEstimate(None)
    big, small = job(4_000_000), job(1000)
    assert est.estimate_s(big, 0) == est.estimate_s(small, 0) == 1.0  # the prior
    est.observe(small, 0.9, 2)
    assert est.estimate_s(big, 1) == pytest.approx(0.3 * 2)
    assert est.ratio.count == 0


def test_a_zero_idle_prediction_leaves_the_ratio_alone() -> None:
    est = ObservedEstimate(lambda j: 0.0)
    est.observe(job(0), 0.4, 0)
    assert est.ratio.count == 0 and est.ratio.value == 1.0
    assert est.service.value == pytest.approx(0.4)


def replayed(tmp_path: Path, level: int, observed: bool = True) -> list[RequestRecord]:
    """A gateway trace of 20 photos, 2 s apart, under ``predicted_latency``, replayed on a one-core
    device whose only work is a 0.2 s image decode (so the queue stays empty), forced to run at
    clock ``level`` (1: three times slower, which its idle prediction at full clock does not
    know), beside the default scenario's L4 behind a 50 ms link (about 0.24 s for these). The
    cloud estimate is the link's and the cloud's model estimate (``observed_cloud_estimate`` off),
    which knows these 0.24 s from the start: the gateway's learns them only from a cloud call
    (tests/sim/test_link_estimate.py)."""
    prof = one_core_profile({"kind": "deterministic", "base_s": 0.2},
                            dvfs=[{"scale": 1.0}, {"scale": 3.0}])
    (tmp_path / "dev.yaml").write_text(yaml.safe_dump(prof))
    trace = gateway_trace(tmp_path / "gw.jsonl", str(tmp_path / "dev.yaml"), 20, 2.0)
    header, recs = read_gateway_trace(trace)
    raw: dict[str, Any] = replay_scenario(trace, header, recs,
                                          load_yaml(SCENARIO_DIR / "default.yaml"))
    raw["devices"][0]["observed_estimate"] = observed
    raw["devices"][0]["observed_cloud_estimate"] = False
    sim = Simulation(scenario_from_raw(inline_profiles(raw, SCENARIO_DIR)))
    sim.devices[0].set_level(level)
    out: list[RequestRecord] = []
    sim.add_record_sink(out.append)
    sim.run()
    return sorted(out, key=lambda r: r.arrived_s)


def test_a_device_slower_than_its_idle_prediction_learns_it_and_offloads(tmp_path: Path) -> None:
    recs = replayed(tmp_path, level=1)
    first, rest = recs[0], recs[1:]
    # the first decision has only the idle prediction: local, where it takes three times that
    assert first.placement == "local" and first.predicted_local_s == pytest.approx(0.2)
    assert first.finished_s is not None
    assert first.finished_s - first.arrived_s == pytest.approx(0.6)
    assert first.predicted_cloud_s is not None and 0.2 < first.predicted_cloud_s < 0.6
    # observed: the estimate is three times the idle prediction, above the cloud's
    assert all(r.decision_queue == 0 for r in recs)
    assert all(r.predicted_local_s == pytest.approx(0.6) for r in rest)
    assert all(r.placement == "cloud:l4" for r in rest)


def test_a_device_as_fast_as_its_idle_prediction_stays_local(tmp_path: Path) -> None:
    recs = replayed(tmp_path, level=0)
    assert all(r.placement == "local" for r in recs)
    assert all(r.predicted_local_s == pytest.approx(0.2) for r in recs)


def test_the_replay_turns_it_on_and_other_scenarios_keep_the_model_estimate(
        tmp_path: Path) -> None:
    trace = gateway_trace(tmp_path / "gw.jsonl", "jetson-orin-nano", 3, 1.0)
    header, recs = read_gateway_trace(trace)
    raw = replay_scenario(trace, header, recs, {})
    assert raw["devices"][0]["observed_estimate"] is True
    replay = Simulation(scenario_from_raw(inline_profiles(raw, SCENARIO_DIR)))
    assert isinstance(replay.devices[0].observed, ObservedEstimate)
    default = Simulation(scenario_from_raw(inline_profiles(
        load_yaml(SCENARIO_DIR / "default.yaml"), SCENARIO_DIR)))
    assert all(d.observed is None for d in default.devices)
    # off, the records carry no decision figures: another scenario's trace is unchanged
    off = replayed(tmp_path, level=0, observed=False)
    assert all(r.decision_queue is None and r.predicted_local_s is None for r in off)
