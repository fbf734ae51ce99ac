"""The gateway's cloud estimate, round trip + upload + service, each a moving average: its
arithmetic, and a replayed gateway trace whose simulated device learns it from its own finished
cloud calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edgeserve.records import RequestRecord
from sim.core.job import Job
from sim.core.link_estimate import (
    REQUEST_OVERHEAD_BYTES,
    RTT_PRIOR_S,
    SERVICE_PRIOR_S,
    UPLINK_PRIOR_BPS,
    LinkEstimate,
)
from sim.core.simulation import Simulation
from sim.experiments.gateway_replay import estimate_prior, read_gateway_trace, replay_scenario
from sim.scenario.config import SCENARIO_DIR, inline_profiles, scenario_from_raw
from sim.scenario.schema import ConfigError, load_yaml
from tests.sim.conftest import gateway_trace

KB = 1024


def job(image_bytes: int) -> Job:
    return Job(RequestRecord(id="j", arrived_s=0.0, image_bytes=image_bytes), None, 0, 0, 0, 10, 1)


def test_it_starts_at_the_gateways_priors() -> None:
    est = LinkEstimate.starting_at()
    assert (est.rtt_s.value, est.uplink_bps.value, est.service_s.value) == (
        RTT_PRIOR_S, UPLINK_PRIOR_BPS, SERVICE_PRIOR_S) == (0.05, 20e6, 1.0)
    assert est.rtt_s.count == est.uplink_bps.count == est.service_s.count == 0


def test_the_estimate_is_round_trip_plus_upload_plus_service() -> None:
    est = LinkEstimate.starting_at(rtt_s=0.1, uplink_bps=8e6, service_s=0.5)
    assert est.transfer_s(1_000_000) == pytest.approx(1.0)  # 8 Mbit at 8 Mbit/s
    assert est.predict_s(1_000_000) == pytest.approx(0.1 + 1.0 + 0.5)
    # a job's request: its image's bytes and the prompt's text and headers
    assert REQUEST_OVERHEAD_BYTES == 2000
    assert est.estimate_s(job(998_000)) == pytest.approx(est.predict_s(1_000_000))


def test_a_small_call_teaches_the_service_time_and_a_probe_the_round_trip() -> None:
    est = LinkEstimate.starting_at(rtt_s=0.1, uplink_bps=8e6, service_s=0.5)
    est.observe_rtt(0.2)
    assert est.rtt_s.value == pytest.approx(0.2)  # the first probe replaces the prior
    est.observe_call(10_000, headers_s=0.3, total_s=1.21)  # 10 ms on the wire
    assert est.service_s.value == pytest.approx(1.21 - 0.2 - 0.01)
    assert est.uplink_bps.count == 0  # a small body says nothing about the upload rate
    # the same bytes again are predicted to take what they took
    assert est.predict_s(10_000) == pytest.approx(1.21)


def test_a_large_call_after_a_small_one_teaches_the_upload_rate() -> None:
    est = LinkEstimate.starting_at(rtt_s=0.1, uplink_bps=8e6, service_s=0.5)
    est.observe_call(100 * KB, headers_s=0.2, total_s=0.8)
    assert est.uplink_bps.count == 0  # no service time observed yet to take off the headers time
    service = est.service_s.value
    # to the headers: round trip + upload + the service seen so far; the rest is the upload
    body = 400 * KB
    est.observe_call(body, headers_s=0.1 + 0.5 + service, total_s=2.0)
    assert est.uplink_bps.value == pytest.approx(body * 8 / 0.5)
    # headers no later than round trip + service: no upload to measure, the rate stays
    before = est.uplink_bps.value
    est.observe_call(body, headers_s=0.1 + est.service_s.value, total_s=2.0)
    assert est.uplink_bps.value == before


def replayed(tmp_path: Path, link: dict[str, Any] | None = None, policy: str = "always_cloud",
             live_cloud_s: float | None = None) -> tuple[Simulation, list[RequestRecord]]:
    """A gateway trace of 12 photos of 40 kB, 2 s apart, with the link the gateway measured
    (50 ms, 20 Mbit/s), replayed under ``policy`` beside the default scenario's L4; ``link``
    replaces figures of the simulated link (not the estimate's starting figures);
    ``live_cloud_s``: the cloud prediction the gateway's records carry."""
    trace = gateway_trace(tmp_path / "gw.jsonl", "jetson-orin-nano", 12, 2.0, policy)
    header, recs = read_gateway_trace(trace)
    for r in recs:
        r.predicted_cloud_s = live_cloud_s
    raw = replay_scenario(trace, header, recs, load_yaml(SCENARIO_DIR / "default.yaml"))
    raw["devices"][0]["link"].update(link or {})
    sim = Simulation(scenario_from_raw(inline_profiles(raw, SCENARIO_DIR)))
    out: list[RequestRecord] = []
    sim.add_record_sink(out.append)
    sim.run()
    return sim, sorted(out, key=lambda r: r.arrived_s)


def test_the_replayed_cloud_estimate_moves_from_its_prior_to_the_calls_latencies(
        tmp_path: Path) -> None:
    sim, recs = replayed(tmp_path)
    assert all(r.placement == "cloud:l4" for r in recs)
    latency = [r.finished_s - r.arrived_s for r in recs]  # type: ignore[operator]
    predicted = [r.predicted_cloud_s for r in recs]
    # the first decision: the trace's measured round trip and rate, the gateway's 1 s service
    request = 40_000 + REQUEST_OVERHEAD_BYTES
    assert predicted[0] == pytest.approx(0.05 + request * 8 / 20e6 + 1.0)
    assert max(latency) < 0.5 < predicted[0]
    # one call later the estimate is that call's latency (the first observation replaces the
    # prior); from then on it follows the calls'
    assert predicted[1] == pytest.approx(latency[0])
    for p, lat in zip(predicted[2:], latency[2:], strict=True):
        assert p == pytest.approx(lat, rel=0.05)
    # the records carry what the decisions saw, as the gateway's do
    assert all(r.link_rtt_s == pytest.approx(0.05) for r in recs)
    assert all(r.link_uplink_mbps == pytest.approx(20.0) for r in recs)
    est = sim.devices[0].observed_link
    assert est is not None and est.service_s.count == len(recs)


def test_a_slower_link_than_measured_makes_the_learnt_estimate_slower(tmp_path: Path) -> None:
    """The same trace on a link with three times the round trip the gateway measured: the probe
    the device sends as it starts sees the longer round trip before the first decision, and the
    calls the slower answers."""
    _, fast = replayed(tmp_path)
    _, slow = replayed(tmp_path, {"rtt_ms": 150.0})
    assert slow[0].predicted_cloud_s == pytest.approx(fast[0].predicted_cloud_s + 0.1)
    assert all(r.link_rtt_s == pytest.approx(0.15) for r in slow)
    for f, s in zip(fast[1:], slow[1:], strict=True):
        assert s.predicted_cloud_s == pytest.approx(f.predicted_cloud_s + 0.1, rel=0.05)


def test_it_starts_where_the_gateways_estimate_stood_at_the_first_replayed_decision(
        tmp_path: Path) -> None:
    """A trace cut after a warm-up: the gateway's first recorded decision already predicted
    0.3 s for the cloud (its service time learnt from the warm-up); the replay's first decision
    predicts the same, not the 1 s service prior."""
    trace = gateway_trace(tmp_path / "gw.jsonl", "jetson-orin-nano", 3, 1.0)
    _, recs = read_gateway_trace(trace)
    recs[0].predicted_cloud_s = 0.3
    upload = (40_000 + REQUEST_OVERHEAD_BYTES) * 8 / 20e6
    assert estimate_prior(recs) == pytest.approx(
        {"rtt_s": 0.05, "uplink_mbps": 20.0, "service_s": 0.3 - 0.05 - upload})
    _, sim = replayed(tmp_path, live_cloud_s=0.3)
    assert sim[0].predicted_cloud_s == pytest.approx(0.3)


def test_without_measured_link_figures_it_starts_at_the_gateways_priors(tmp_path: Path) -> None:
    trace = gateway_trace(tmp_path / "gw.jsonl", "jetson-orin-nano", 3, 1.0)
    header, recs = read_gateway_trace(trace)
    for r in recs:
        r.link_rtt_s = r.link_uplink_mbps = None
    raw = replay_scenario(trace, header, recs, load_yaml(SCENARIO_DIR / "default.yaml"))
    assert raw["devices"][0]["observed_cloud_estimate"] is True
    assert "cloud_estimate_prior" not in raw["devices"][0]
    dev = Simulation(scenario_from_raw(inline_profiles(raw, SCENARIO_DIR))).devices[0]
    est = dev.observed_link
    assert est is not None
    assert (est.uplink_bps.value, est.service_s.value) == (UPLINK_PRIOR_BPS, SERVICE_PRIOR_S)
    # the gateway probes its cloud as it starts: the round trip is the simulated link's
    assert est.rtt_s.count == 1 and est.rtt_s.value == pytest.approx(dev.link.est_fixed_s)


def test_other_scenarios_keep_the_link_and_cloud_model_estimate() -> None:
    default = Simulation(scenario_from_raw(inline_profiles(
        load_yaml(SCENARIO_DIR / "default.yaml"), SCENARIO_DIR)))
    big = job(200_000)
    for dev in default.devices:
        assert dev.observed_link is None
        assert dev.estimate_cloud_s(big) == dev.uplink.estimate_s(big)


def test_a_negative_starting_figure_is_refused() -> None:
    raw = load_yaml(SCENARIO_DIR / "default.yaml")
    raw["devices"][0]["cloud_estimate_prior"] = {"uplink_mbps": 0}
    with pytest.raises(ConfigError, match=r"cloud_estimate_prior\.uplink_mbps: must be > 0"):
        scenario_from_raw(inline_profiles(raw, SCENARIO_DIR))
