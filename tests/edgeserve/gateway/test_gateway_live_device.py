"""The live device's local and cloud estimates are the simulator's: the estimators a replay of the
gateway's trace gives its simulated device, the same code fed the same kind of observation."""

from __future__ import annotations

from pathlib import Path

import pytest

import edgeserve.gateway.state as gateway_state
from edgeserve.gateway.config import load_gateway_config
from edgeserve.gateway.estimates import Ewma as GatewayEwma
from edgeserve.gateway.estimates import LinkEstimate as GatewayLinkEstimate
from edgeserve.gateway.targets import Target
from edgeserve.records import RequestRecord
from sim.core.ewma import Ewma
from sim.core.job import Job
from sim.core.link_estimate import LinkEstimate
from sim.core.observed_estimate import ObservedEstimate
from sim.core.simulation import Simulation
from sim.experiments.gateway_replay import read_gateway_trace, replay_scenario
from sim.scenario.config import SCENARIO_DIR, inline_profiles, scenario_from_raw
from sim.scenario.schema import load_yaml
from tests.sim.conftest import gateway_trace


def code(fn: object) -> object:
    """A function's code object (a mypyc-compiled method has none: then the function itself)."""
    return getattr(fn, "__code__", fn)


def photo(w: int, h: int) -> Job:
    rec = RequestRecord(id="p", arrived_s=0.0, source_width=w, source_height=h)
    return Job(rec, None, w * h, w * h, w * h // 784, w * h // 784 + 20, 16)


def test_the_live_and_the_replayed_device_share_one_estimator(tmp_path: Path) -> None:
    cfg = load_gateway_config(None, {"policy": "predicted_latency", "profile": "jetson-orin-nano",
                                     "sensors": "virtual"},
                              [{"name": "dev", "url": "http://127.0.0.1:9", "place": "local"}])
    live = gateway_state.build_state(cfg).device
    target = live.locals[0]
    trace = gateway_trace(tmp_path / "gw.jsonl", "jetson-orin-nano", 3, 1.0)
    header, recs = read_gateway_trace(trace)
    raw = inline_profiles(replay_scenario(trace, header, recs, {}), SCENARIO_DIR)
    simulated = Simulation(scenario_from_raw(raw)).devices[0]
    assert simulated.observed is not None
    for est in (target.estimate, simulated.observed):
        assert type(est) is ObservedEstimate
        assert code(type(est).estimate_s) is code(ObservedEstimate.estimate_s)
        assert code(type(est).observe) is code(ObservedEstimate.observe)
    assert GatewayEwma is Ewma

    # the same observations give the same estimate, live and simulated (both idle)
    big, small = photo(1280, 720), photo(320, 240)
    idle = simulated.observed.idle_s
    assert idle is not None
    assert live.estimate_local_s(big) == pytest.approx(simulated.estimate_local_s(big))
    assert live.estimate_local_s(big) == pytest.approx(idle(big))
    # behind one request, three times its idle prediction: 1.5 times as slow as predicted
    live.observe_local(target, big, 3 * idle(big), 1)
    simulated.observed.observe(big, 3 * idle(big), 1)
    for j in (big, small):
        assert live.estimate_local_s(j) == pytest.approx(simulated.estimate_local_s(j))
        assert live.estimate_local_s(j) == pytest.approx(1.5 * idle(j))


def test_without_a_profile_the_live_estimate_is_the_moving_service_time() -> None:
    cfg = load_gateway_config(None, {"policy": "predicted_latency"},
                              [{"name": "dev", "url": "http://127.0.0.1:9", "place": "local"}])
    live = gateway_state.build_state(cfg).device
    target: Target = live.locals[0]
    assert target.estimate.idle_s is None
    live.observe_local(target, photo(640, 480), 0.8, 1)
    target.polled_waiting = 2
    assert live.estimate_local_s(photo(1280, 720)) == pytest.approx(0.4 * 3)


def test_the_live_and_the_replayed_device_share_one_cloud_estimator(tmp_path: Path) -> None:
    """The gateway's cloud target and the replayed device hold the same :class:`LinkEstimate`
    code, start from the same priors where the trace measured nothing, and the same probes and
    calls give them the same cloud estimate."""
    cfg = load_gateway_config(None, {"policy": "predicted_latency", "profile": "jetson-orin-nano",
                                     "sensors": "virtual"},
                              [{"name": "dev", "url": "http://127.0.0.1:9", "place": "local"},
                               {"name": "c", "url": "http://127.0.0.1:8", "place": "cloud"}])
    live = gateway_state.build_state(cfg).device
    target = live.clouds[0]
    trace = gateway_trace(tmp_path / "gw.jsonl", "jetson-orin-nano", 3, 1.0)
    header, recs = read_gateway_trace(trace)
    for r in recs:
        r.link_rtt_s = r.link_uplink_mbps = None  # nothing measured: the gateway's priors
    raw = inline_profiles(replay_scenario(trace, header, recs,
                                          load_yaml(SCENARIO_DIR / "default.yaml")), SCENARIO_DIR)
    simulated = Simulation(scenario_from_raw(raw)).devices[0]
    sim_link = simulated.observed_link
    assert sim_link is not None
    assert GatewayLinkEstimate is LinkEstimate
    for est in (target.link, sim_link):
        assert type(est) is LinkEstimate
        for method in ("estimate_s", "predict_s", "observe_call", "observe_rtt"):
            assert code(getattr(type(est), method)) is code(getattr(LinkEstimate, method))
    assert (target.link.uplink_bps.value, target.link.service_s.value) == (
        sim_link.uplink_bps.value, sim_link.service_s.value)

    big = photo(1280, 720)
    big.rec.image_bytes = 300_000
    # the same probe and the same calls (a small one, then a large one) on both sides
    for est in (target.link, sim_link):
        est.observe_rtt(0.08)
        est.observe_call(20_000, 0.3, 0.5)
        est.observe_call(302_000, 0.3 + 0.2, 0.9)
    assert target.link.uplink_bps.count == sim_link.uplink_bps.count == 1
    assert live.estimate_cloud_s(big) == pytest.approx(simulated.estimate_cloud_s(big))
    assert live.estimate_cloud_s(big) == pytest.approx(target.link.predict_s(302_000))
