"""Device and policy behaviour: the offload path's timeline, battery, governors, policies."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from edgeserve.records import DeviceSample, Outcome, RequestRecord
from sim.core.cloud import Roofline
from sim.core.simulation import Simulation
from sim.scenario.config import load_cloud_profile, scenario_from_raw
from tests.sim.conftest import one_core_profile


def records(sim: Simulation) -> list[RequestRecord]:
    out: list[RequestRecord] = []
    sim.add_record_sink(out.append)
    return out


def one_device(profile: dict[str, Any], workload: dict[str, Any], policy: str | dict = "always_local",
               link: dict | None = None, cloud: bool = False, **extra: Any) -> Simulation:
    raw: dict[str, Any] = {
        "name": "t", "seed": 3, "policy": policy if isinstance(policy, dict) else {"kind": policy},
        "devices": [{"name": "d", "profile": profile, "workload": workload,
                     "link": link or {"jitter_ms": 0.0, "loss": 0.0}}],
        **extra,
    }
    if cloud:
        raw["cloud"] = [{"name": "gpu", "profile": "h100-qwen2-vl-7b"}]
    return Simulation(scenario_from_raw(raw))


def test_an_offloaded_request_follows_link_server_and_roofline_times() -> None:
    link = {"uplink_mbps": 10, "downlink_mbps": 50, "rtt_ms": 40, "jitter_ms": 0, "loss": 0}
    sim = one_device(one_core_profile(), {"output_tokens": [20, 20]}, "always_cloud", link,
                     cloud=True, requests=1)
    recs = records(sim)
    sim.run()
    r = recs[0]
    roof = Roofline(load_cloud_profile("h100-qwen2-vl-7b"))
    up = (r.image_bytes + 2000) * 8 / 10e6 + 0.020
    pre = r.source_width * r.source_height * 0.004 / 1e6
    assert r.placement == "cloud:gpu" and r.decision_reason == "always cloud"
    assert r.uplink_end_s == pytest.approx(r.arrived_s + up)
    assert r.engine_queued_s == pytest.approx(r.uplink_end_s + pre)
    prefill = roof.prefill_tokens_s(r.prompt_tokens) + 2e-5 * r.image_tokens
    assert r.first_token_s == pytest.approx(r.engine_queued_s + prefill)
    assert r.last_token_s == pytest.approx(r.first_token_s + 19 * roof.step_s(1, r.prompt_tokens))
    assert r.finished_s == pytest.approx(r.last_token_s + (20 * 4 + 500) * 8 / 50e6 + 0.020)
    assert r.preproc_start_s is None  # nothing ran on the device


def test_packet_loss_retransmits_after_the_timeout() -> None:
    lossy = {"uplink_mbps": 10, "rtt_ms": 40, "jitter_ms": 0, "loss": 0.5, "rto_ms": 200}
    sim = one_device(one_core_profile(), {"rate_hz": 0.01}, "always_cloud", lossy, cloud=True,
                     requests=400)
    recs = records(sim)
    sim.run()
    tx = [(r.image_bytes + 2000) * 8 / 10e6 for r in recs]
    extra = [r.uplink_end_s - r.arrived_s - t - 0.020 for r, t in zip(recs, tx, strict=True)]  # type: ignore[operator]
    attempts = [round(e / (0.2 + t)) for e, t in zip(extra, tx, strict=True)]
    assert min(attempts) == 0 and max(attempts) >= 3
    assert sum(attempts) / len(attempts) == pytest.approx(1.0, rel=0.2)  # loss/(1−loss) = 1


def battery_profile(initial_fraction: float, capacity_wh: float = 1.0) -> dict[str, Any]:
    prof = one_core_profile({"kind": "deterministic", "base_s": 0.5})
    prof["base_w"] = 3.6  # 1 mWh per second
    prof["battery"] = {"capacity_wh": capacity_wh, "initial_fraction": initial_fraction,
                       "low_fraction": 0.2}
    return prof


def test_battery_drains_by_energy_and_an_empty_battery_fails_requests() -> None:
    sim = one_device(battery_profile(1.0, capacity_wh=0.1), {"rate_hz": 1.0}, duration_s=200)
    recs = records(sim)
    sim.run()
    dev = sim.devices[0]
    assert dev.battery_wh == 0.0
    empty_at = 0.1 * 3600 / (3.6 + 0.5)  # base 3.6 W plus the core busy half the time (1 W)
    failed = [r for r in recs if r.outcome is Outcome.FAILED]
    assert failed and all(r.error == "battery depleted" for r in failed)
    assert min(r.arrived_s for r in failed) == pytest.approx(empty_at, rel=0.05)
    assert all(r.outcome is Outcome.OK for r in recs if r.arrived_s < empty_at * 0.95)


def test_energy_aware_offloads_when_the_battery_is_low() -> None:
    for frac, placement in ((0.9, "local"), (0.1, "cloud:gpu")):
        sim = one_device(battery_profile(frac), {"rate_hz": 1.0}, "energy_aware", cloud=True,
                         requests=20)
        recs = records(sim)
        sim.run()
        assert {r.placement for r in recs} == {placement}


def test_thermal_aware_offloads_when_hot_and_downgrades_without_a_cloud() -> None:
    hot = one_core_profile(thermal={"r_c_per_w": 1.0, "c_j_per_c": 1e6, "initial_c": 80.0})
    sim = one_device(hot, {"rate_hz": 1.0}, {"kind": "thermal_aware", "params": {"above_c": 70}},
                     cloud=True, requests=5)
    recs = records(sim)
    sim.run()
    assert {(r.placement, r.decision_reason) for r in recs} == {("cloud:gpu", "hot: offload")}
    sim = one_device(hot, {"rate_hz": 1.0, "image": {"sizes": [{"width": 1280, "height": 960}]}},
                     {"kind": "thermal_aware", "params": {"above_c": 70, "scale": 0.5}},
                     requests=5)
    recs = records(sim)
    sim.run()
    assert {r.decision_reason for r in recs} == {"hot: downgrade resolution"}
    assert {(r.source_width, r.source_height) for r in recs} == {(640, 480)}
    assert {r.image_tokens for r in recs} == {476 * 644 // 784}


def test_frame_drop_drops_frames_that_cannot_meet_their_deadline() -> None:
    slow = one_core_profile({"kind": "deterministic", "base_s": 0.3})  # 0.3 s per frame
    sim = one_device(slow, {"kind": "periodic", "fps": 10}, "frame_drop", duration_s=5)
    recs = records(sim)
    summary = sim.run()
    dropped = [r for r in recs if r.outcome is Outcome.DROPPED]
    assert len(dropped) == len(recs)  # even an idle device needs 0.3 s > 0.1 s
    assert {r.decision_reason for r in dropped} == {"deadline would be missed"}
    assert summary.fleet.slo_attainment == 0.0 and summary.fleet.dropped == len(recs)


def test_set_policy_applies_to_later_arrivals() -> None:
    sim = one_device(one_core_profile(), {"rate_hz": 2.0}, cloud=True, duration_s=100)
    recs = records(sim)
    sim.run_until(50.0)
    sim.set_policy("always_cloud")
    sim.run()
    assert all(r.placement == ("local" if r.arrived_s < 50 else "cloud:gpu") for r in recs)
    assert sim.summary().policy == "always_cloud"


def test_queue_threshold_offloads_only_with_a_queue() -> None:
    slow = one_core_profile({"kind": "deterministic", "base_s": 1.0})
    sim = one_device(slow, {"rate_hz": 3.0},
                     {"kind": "queue_threshold", "params": {"max_queue": 2}}, cloud=True,
                     duration_s=60)
    recs = records(sim)
    sim.run()
    reasons = {r.decision_reason for r in recs}
    assert reasons == {"queue below threshold", "queue at threshold"}
    local = [r for r in recs if r.placement == "local"]
    waits = [r.preproc_start_s - r.preproc_queued_s for r in local]  # type: ignore[operator]
    assert max(waits) <= 2.0 + 1e-9  # at most two ahead, one second each


def test_power_allocator_holds_the_control_temperature() -> None:
    prof = one_core_profile(
        {"kind": "deterministic", "base_s": 0.1},
        dvfs=[{"scale": 1.0, "power_scale": 1.0}, {"scale": 1.3, "power_scale": 0.75},
              {"scale": 1.8, "power_scale": 0.5}, {"scale": 3.0, "power_scale": 0.25}],
        thermal={"r_c_per_w": 2.0, "c_j_per_c": 10.0, "ambient_c": 25.0,
                 "governor": "power_allocator",
                 "pid": {"control_temp_c": 50.0, "sustainable_power_w": 12.5, "k_p": 1.0,
                         "k_i": 0.1, "interval_s": 0.1}})
    prof["units"]["cpu"]["active_w"] = 20.0  # full speed heads for 65 °C
    sim = one_device(copy.deepcopy(prof), {"kind": "periodic", "fps": 20}, duration_s=400,
                     sample_interval_s=1.0)
    samples: list[DeviceSample] = []
    sim.add_sample_sink(samples.append)
    sim.run_until(400)
    late = [s.temp_c for s in samples if s.t_s > 200]
    assert max(late) < 52.0 and sum(late) / len(late) == pytest.approx(50.0, abs=1.5)
    assert any(s.clock_level > 0 for s in samples)


def test_model_downgrade_moves_queued_requests_to_the_smaller_model() -> None:
    from sim.scenario.config import load_device_profile  # noqa: F401  (the shipped profile has 'small')

    raw: dict[str, Any] = {
        "name": "t", "seed": 1, "duration_s": 600,
        "policy": {"kind": "model_downgrade", "params": {"model": "small", "queue_above": 1}},
        "devices": [{"name": "j", "profile": "jetson-orin-nano",
                     "workload": {"rate_hz": 2.0, "output_tokens": [32, 32]}}],
    }
    sim = Simulation(scenario_from_raw(raw))
    recs = records(sim)
    sim.run()
    small = [r for r in recs if r.placement == "local:small"]
    full = [r for r in recs if r.placement == "local"]
    assert small and full
    assert {r.decision_reason for r in small} == {"queue long: smaller model"}
    tpot = lambda rs: sum(r.tpot_s for r in rs) / len(rs)  # type: ignore[misc]  # noqa: E731
    assert tpot(small) < tpot(full) / 2


def test_a_policy_naming_a_missing_model_is_a_clear_error() -> None:
    from sim.scenario.schema import ConfigError

    sim = one_device(one_core_profile(), {"rate_hz": 5.0},
                     {"kind": "model_downgrade", "params": {"queue_above": 0}}, requests=3)
    with pytest.raises(ConfigError, match="device d has no model 'small'"):
        sim.run()
