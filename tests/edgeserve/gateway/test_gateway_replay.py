"""A gateway trace, recorded through a real gateway in front of fake upstreams, replayed in the
simulator: the same requests under the same policy."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import (
    Proc,
    chat,
    chat_body,
    delay_proxy,
    gateway,
    png_data_url,
    trace_records,
    upstream,
)

from edgeserve.records import RequestRecord, read_trace
from sim.experiments.gateway_replay import (
    cloud_from_server,
    read_gateway_trace,
    replay,
    replay_scenario,
    trace_from,
)
from sim.scenario.schema import ConfigError

SIZES = [(640, 480), (1280, 720), (320, 240), (1024, 768)]


def test_a_recorded_gateway_trace_replays_with_its_requests_and_policy(
        tmp_path: Path, procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc", "--delay-s", "0.05"))
    procs.append(cloud := upstream(tmp_path, "cloud", "--delay-s", "0.02"))
    procs.append(gw := gateway(tmp_path, "--local", loc.url, "--cloud", cloud.url,
                               "--policy", "predicted_latency", "--profile", "jetson-orin-nano"))
    for i in range(12):
        w, h = SIZES[i % len(SIZES)]
        assert chat(gw, chat_body(f"question {i}", image=png_data_url(w, h)))[0] == 200
    gw.stop()
    trace = tmp_path / "gateway.jsonl"
    live = trace_records(tmp_path)
    assert len(live) == 12

    header, recs = read_gateway_trace(trace)
    raw = replay_scenario(trace, header, recs, {})
    assert raw["policy"]["kind"] == "predicted_latency" and raw["requests"] == 12
    assert raw["devices"][0]["profile"] == "jetson-orin-nano"
    # the link is the one the gateway measured to its cloud, not a scenario's
    rtts = sorted(r.link_rtt_s for r in recs if r.link_rtt_s is not None)
    assert len(rtts) == 12 and all(0 < x < 1.0 for x in rtts)
    link = raw["devices"][0]["link"]
    assert link["rtt_ms"] == pytest.approx(statistics.median(rtts) * 1000)
    assert link["uplink_mbps"] == pytest.approx(20.0)  # flat PNGs: too small to measure it

    out = subprocess.run([sys.executable, "-m", "edgeserve", "sim", "run", "--replay-gateway",
                          str(trace), "--no-progress"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "policy predicted_latency" in out.stdout
    row = next(x for x in out.stdout.splitlines() if x.startswith("requests"))
    assert row.split()[1:] == ["12", "12"]  # live, simulated
    assert "offload share" in out.stdout and "E2E p99 (ms)" in out.stdout

    policy, live_fig, sim_fig = replay(trace)
    assert policy == "predicted_latency" and live_fig.requests == sim_fig.requests == 12
    assert live_fig.e2e_p50_s > 0.05 - 1e-3  # the local upstream's delay at least
    assert sim_fig.e2e_p50_s > 0


def test_a_trace_not_from_the_gateway_is_refused(tmp_path: Path) -> None:
    from edgeserve.records import TraceHeader, TraceWriter

    path = tmp_path / "serve.jsonl"
    w = TraceWriter(str(path), TraceHeader(producer="edgeserve serve"))
    w.write(RequestRecord(id="a", arrived_s=0.0))
    w.close()
    assert [type(x).__name__ for x in read_trace(path)] == ["TraceHeader", "RequestRecord"]
    with pytest.raises(ConfigError, match="not a trace written by `edgeserve gateway"):
        read_gateway_trace(path)
    out = subprocess.run([sys.executable, "-m", "edgeserve", "sim", "run", "--replay-gateway",
                          str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "not a trace written by" in out.stderr


CALIB = Path(__file__).resolve().parents[2] / "sim" / "data" / "calib.jsonl"


def test_a_calibrated_server_profile_stands_for_the_cloud(tmp_path: Path, procs: list[Proc]
                                                         ) -> None:
    """``replay(cloud_profile=P)``: the simulated cloud serves with the calibrated server's step
    model and preprocessing, so a server profile whose steps take ten times as long makes the
    offloaded requests' simulated E2E longer, and the default cloud (an L4) is no longer in it."""
    server = tmp_path / "server.yaml"
    cal = subprocess.run([sys.executable, "-m", "edgeserve", "calibrate", str(CALIB), "--out",
                          str(server), "--base", "jetson-orin-nano"], capture_output=True,
                         text=True, timeout=300)
    assert cal.returncode == 0, cal.stderr
    prof = yaml.safe_load(server.read_text())
    slow = {**prof, "llm": {**prof["llm"], "step": {
        **prof["llm"]["step"], "base_s": prof["llm"]["step"]["base_s"] * 10,
        "per": {k: v * 10 for k, v in prof["llm"]["step"]["per"].items()}}}}
    slow_path = tmp_path / "slow.yaml"
    slow_path.write_text(yaml.safe_dump(slow))

    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(cloud := upstream(tmp_path, "cloud"))
    procs.append(gw := gateway(tmp_path, "--local", loc.url, "--cloud", cloud.url,
                               "--policy", "always_cloud"))
    for i in range(10):
        w, h = SIZES[i % len(SIZES)]
        assert chat(gw, chat_body(f"question {i}", image=png_data_url(w, h)))[0] == 200
    gw.stop()
    trace = tmp_path / "gateway.jsonl"
    _, recs = read_gateway_trace(trace)

    made = cloud_from_server(prof, {"name": "l4", "server": {"max_batch": 64}}, recs)
    assert made["server"]["step"] == prof["llm"]["step"]
    assert made["server"]["max_batch"] == prof["llm"]["step"]["max_num_seqs"]
    assert made["server"]["preprocess_s_per_mpixel"] > 0

    _, live, fast = replay(trace, cloud_profile=server)
    _, _, slower = replay(trace, cloud_profile=slow_path)
    _, _, l4 = replay(trace)
    assert live.offload_share == fast.offload_share == slower.offload_share == 1.0
    assert slower.e2e_p50_s > 3 * fast.e2e_p50_s
    assert fast.e2e_p50_s != pytest.approx(l4.e2e_p50_s, rel=0.05)

    out = subprocess.run([sys.executable, "-m", "edgeserve", "sim", "run", "--replay-gateway",
                          str(trace), "--cloud-profile", str(tmp_path / "missing.yaml")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "missing.yaml" in out.stderr


def test_a_slower_link_measured_by_the_gateway_is_the_replays_link(
        tmp_path: Path, procs: list[Proc]) -> None:
    """Behind a proxy that delays each request by 0.15 s, the cloud's calls and probes take
    0.15 s longer: the gateway records that round trip and the replay's link has it, so the
    simulated offloaded E2E grows by about as much as the live one."""
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(cloud := upstream(tmp_path, "cloud", "--delay-s", "0.01"))
    procs.append(slow := delay_proxy(tmp_path, cloud, 0.15))
    procs.append(gw := gateway(tmp_path, "--local", loc.url, "--cloud", slow.url,
                               "--policy", "always_cloud"))
    time.sleep(1.5)  # a few probes of the cloud's link
    for i in range(6):
        assert chat(gw, chat_body(f"question {i}", image=png_data_url(320, 240)))[0] == 200
    gw.stop()
    trace = tmp_path / "gateway.jsonl"
    header, recs = read_gateway_trace(trace)
    assert len(recs) == 6 and all((r.placement or "").startswith("cloud:") for r in recs)
    live_e2e = statistics.median(r.finished_s - r.arrived_s for r in recs)  # type: ignore[operator]
    assert live_e2e > 0.15
    link = replay_scenario(trace, header, recs, {})["devices"][0]["link"]
    assert 140 < link["rtt_ms"] < 250


def test_a_warm_up_is_cut_from_a_gateway_trace(tmp_path: Path) -> None:
    from edgeserve.records import TraceHeader, TraceWriter

    path = tmp_path / "gw.jsonl"
    w = TraceWriter(str(path), TraceHeader(producer="edgeserve gateway",
                                           meta={"policy": "always_local"}))
    for i, t in enumerate([1.0, 2.0, 5.0, 6.5]):
        w.write(RequestRecord(id=str(i), arrived_s=t, placement="local:d", finished_s=t + 0.1))
    w.close()
    out = trace_from(path, 5.0, tmp_path / "measured.jsonl")
    header, recs = read_gateway_trace(out)
    assert header.meta["policy"] == "always_local" and [r.id for r in recs] == ["2", "3"]
    with pytest.raises(ConfigError, match="no request arrived after"):
        trace_from(path, 7.0, tmp_path / "none.jsonl")


def test_the_cloud_preprocesses_at_the_servers_worker_stages_per_megapixel() -> None:
    """Decode and an encoder that ran in the worker (on the CPU unit) count; the engine's stages
    and an encoder on its own unit do not. 1000×1000 images: 1 MP, 1e6/784 tokens."""
    def prof(encode_unit: str) -> dict[str, Any]:
        return {"name": "s", "llm": {"step": {"base_s": 0.002, "max_num_seqs": 4}},
                "stages": {
                    "image_decode": {"unit": "cpu", "model": {"base_s": 0.0,
                                                              "per": {"source_pixels": 1e-8}}},
                    "encode": {"unit": encode_unit, "model": {"per": {"image_tokens": 1e-4}}},
                    "prefill": {"unit": "gpu", "model": {"base_s": 0.5}}}}

    recs = [RequestRecord(id=str(i), arrived_s=float(i), source_width=1000, source_height=1000)
            for i in range(3)]
    in_worker = cloud_from_server(prof("cpu"), {"name": "l4"}, recs)["server"]
    assert in_worker["preprocess_s_per_mpixel"] == pytest.approx(0.01 + 1e-4 * 1e6 / 784)
    own_unit = cloud_from_server(prof("gpu"), {"name": "l4"}, recs)["server"]
    assert own_unit["preprocess_s_per_mpixel"] == pytest.approx(0.01)
    assert own_unit["step"]["base_s"] == 0.002 and own_unit["max_batch"] == 4


def test_a_server_profile_without_a_step_model_cannot_stand_for_the_cloud() -> None:
    with pytest.raises(ConfigError, match="no engine step model"):
        cloud_from_server({"name": "x", "llm": {}}, {"name": "l4"}, [])
