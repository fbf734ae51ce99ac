"""A virtual sensor driven past its trip point by real CPU load makes thermal_aware act."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml
from conftest import (
    Proc,
    answer,
    chat,
    chat_body,
    gateway,
    get_json,
    png_data_url,
    post,
    trace_records,
    upstream,
)

from sim.scenario.config import resolve_profile_path

ABOVE_C = 50.0


def hot_profile(tmp: Path) -> Path:
    """The Jetson profile with a fast thermal node: ``P = 40 W · u`` for CPU utilisation ``u``
    through R = 1.5 °C/W from 25 °C: steady state 25 + 60·u °C, time constant RC = 6 s. From
    25 °C at full load it passes 50 °C after 6·ln(60/35) ≈ 3.2 s; within the first second it
    stays below 35 °C whatever the load."""
    raw = yaml.safe_load(resolve_profile_path("jetson-orin-nano", None).read_text())
    raw["name"] = "hot-test"
    raw["base_w"] = 0.0
    raw["units"] = {"cpu": {"kind": "cpu", "count": 2, "idle_w": 0.0, "active_w": 20.0},
                    "gpu": {"kind": "gpu", "count": 1, "idle_w": 0.0, "active_w": 0.0}}
    raw["thermal"] = {"r_c_per_w": 1.5, "c_j_per_c": 4.0, "ambient_c": 25.0,
                      "trips": [{"temp_c": ABOVE_C, "hysteresis_c": 2.0}]}
    path = tmp / "hot.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_virtual_sensor_past_its_trip_point_offloads_then_downgrades(
        tmp_path: Path, procs: list[Proc]) -> None:
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(cl := upstream(tmp_path, "cl"))
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(json.dumps({"policy": {"kind": "thermal_aware",
                                          "params": {"above_c": ABOVE_C}}}))
    procs.append(gw := gateway(tmp_path, "--config", str(cfg), "--local", loc.url,
                               "--cloud", cl.url, "--profile", str(hot_profile(tmp_path)),
                               "--sensors", "virtual"))
    assert "virtual (profile hot-test RC thermal model" in gw.log.read_text()
    assert answer(chat(gw, chat_body())[2])["upstream"] == "loc"
    cool = trace_records(tmp_path)[-1]
    assert cool["decision_reason"] == "temperature below limit"
    assert cool["sensor_source"] == "virtual" and cool["decision_temp_c"] < ABOVE_C

    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        deadline = time.monotonic() + 60
        while get_json(gw.url + "/health")["device"]["temp_c"] < ABOVE_C + 2:
            assert time.monotonic() < deadline, "the virtual sensor never heated up"
            time.sleep(0.2)
        assert answer(chat(gw, chat_body())[2])["upstream"] == "cl"
        hot = trace_records(tmp_path)[-1]
        assert hot["decision_reason"] == "hot: offload" and hot["placement"].startswith("cloud:")
        assert hot["decision_temp_c"] >= ABOVE_C

        post(gw.url + "/admin/policy", {"policy": "thermal_aware", "params": {
            "above_c": ABOVE_C, "action": "downgrade", "scale": 0.5}})
        got = answer(chat(gw, chat_body(image=png_data_url(200, 100)))[2])
        assert got == {"upstream": "loc", "model": None, "image_width": 100}
        assert trace_records(tmp_path)[-1]["decision_reason"] == "hot: downgrade resolution"
    finally:
        for b in burners:
            b.kill()
            b.wait()


def test_virtual_battery_drains_and_energy_aware_offloads(tmp_path: Path,
                                                          procs: list[Proc]) -> None:
    """A 0.01 Wh (36 J) virtual battery under at least the profile's 2 W base power is below
    half within 9 s of start-up, whatever the CPU load."""
    raw = yaml.safe_load(hot_profile(tmp_path).read_text())
    raw["base_w"] = 2.0
    raw["battery"] = {"capacity_wh": 0.01, "initial_fraction": 1.0, "low_fraction": 0.5}
    profile = tmp_path / "battery.yaml"
    profile.write_text(yaml.safe_dump(raw))
    procs.append(loc := upstream(tmp_path, "loc"))
    procs.append(cl := upstream(tmp_path, "cl"))
    procs.append(gw := gateway(tmp_path, "--local", loc.url, "--cloud", cl.url, "--profile",
                               str(profile), "--sensors", "virtual", "--policy", "energy_aware"))
    assert "battery: virtual (profile hot-test battery" in gw.log.read_text()
    deadline = time.monotonic() + 30
    while (get_json(gw.url + "/health")["device"]["battery_fraction"] or 1.0) >= 0.5:
        assert time.monotonic() < deadline, "the virtual battery never drained"
        time.sleep(0.2)
    assert answer(chat(gw, chat_body())[2])["upstream"] == "cl"
    assert trace_records(tmp_path)[-1]["decision_reason"] == "battery low: offload"
