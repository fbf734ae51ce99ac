"""A gateway trace, recorded through a real gateway in front of fake upstreams, replayed in the
simulator: the same requests under the same policy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Proc, chat, chat_body, gateway, png_data_url, trace_records, upstream

from edgeserve.records import RequestRecord, read_trace
from sim.experiments.gateway_replay import read_gateway_trace, replay, replay_scenario
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
    raw = replay_scenario(trace, header, len(recs), {})
    assert raw["policy"]["kind"] == "predicted_latency" and raw["requests"] == 12
    assert raw["devices"][0]["profile"] == "jetson-orin-nano"

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
