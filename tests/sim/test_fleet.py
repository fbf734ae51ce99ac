"""Fleets: ``count:`` devices with their own seeds and jitter, summaries per class and for the fleet."""

from __future__ import annotations

import math
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from edgeserve.cli.main import main
from edgeserve.records import RequestRecord, read_trace
from sim.core.fleet import instances
from sim.core.report import DeviceSummary, Summary
from sim.core.simulation import Simulation
from sim.scenario.config import PER_DEVICE_AUTO_MAX, inline_profiles, scenario_from_raw
from sim.scenario.schema import ConfigError

COUNTS = ("requests", "ok", "failed", "dropped", "rejected")


def fleet_raw(count: int, requests: int, **extra: Any) -> dict[str, Any]:
    """``count`` Jetson cameras at 1 Hz each, a little jittered, sharing 4 H100 replicas."""
    raw = {
        "name": "fleet", "seed": 3, "requests": requests, "sample_interval_s": 5.0,
        "policy": {"kind": "predicted_latency"}, "slo": {"e2e_s": 3.0},
        "devices": [{
            "name": "cam", "profile": "jetson-orin-nano", "count": count,
            "jitter": {"rate": 0.2, "link": 0.3, "ambient_c": 5.0},
            "workload": {"kind": "poisson", "rate_hz": 1.0,
                         "image": {"sizes": [{"width": 640, "height": 480}]},
                         "text_tokens": 24, "output_tokens": [16, 48]},
            "link": {"uplink_mbps": 40, "downlink_mbps": 100, "rtt_ms": 30},
        }],
        "cloud": [{"name": "h100", "profile": "h100-qwen2-vl-7b", "replicas": 4}],
    }
    raw.update(extra)
    return inline_profiles(raw)


def _weighted(rows: list[DeviceSummary], field: str, weight: str) -> float:
    w = sum(getattr(r, weight) for r in rows)
    return sum(getattr(r, field) * getattr(r, weight) for r in rows if getattr(r, weight)) / w


def _assert_sums(total: DeviceSummary, parts: list[DeviceSummary]) -> None:
    """``total`` is the sum of ``parts``: counts exactly, means as weighted combinations."""
    for c in COUNTS:
        assert getattr(total, c) == sum(getattr(p, c) for p in parts), c
    assert total.device_count == sum(p.device_count for p in parts)
    assert total.energy_j == pytest.approx(sum(p.energy_j for p in parts), rel=1e-12)
    assert total.throughput_rps == pytest.approx(sum(p.throughput_rps for p in parts), rel=1e-12)
    assert total.e2e_mean_s == pytest.approx(_weighted(parts, "e2e_mean_s", "ok"), rel=1e-12)
    assert total.slo_attainment == pytest.approx(
        _weighted(parts, "slo_attainment", "requests"), rel=1e-12)
    assert total.energy_per_request_j == pytest.approx(total.energy_j / total.ok, rel=1e-12)
    assert total.throttled_share == pytest.approx(
        _weighted(parts, "throttled_share", "device_count"), rel=1e-12, abs=1e-15)
    assert total.peak_temp_c == max(p.peak_temp_c for p in parts)


def test_1000_devices_x_100_requests_fleet_is_the_sum_of_its_devices() -> None:
    # per-device detail on request: this fleet is larger than the automatic limit
    sc = scenario_from_raw(fleet_raw(1000, 100_000, per_device=True))
    assert sc.device_count == 1000 > PER_DEVICE_AUTO_MAX
    s = Simulation(sc).run()
    assert [d.name for d in s.devices] == [f"cam-{i}" for i in range(1000)]
    per = [d.requests for d in s.devices]
    assert sum(per) == s.fleet.requests == 100_000 and min(per) > 50 and max(per) < 160
    assert s.fleet.ok > 0 and 0 < s.fleet.offload_share < 1  # both paths in use
    _assert_sums(s.fleet, s.devices)
    (cls,) = s.classes
    assert cls.name == "cam" and cls.device_count == 1000
    assert {**_fields(cls), "name": "fleet"} == _fields(s.fleet)


def _fields(d: DeviceSummary) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: ("nan" if isinstance(v, float) and math.isnan(v) else v)
            for k, v in asdict(d).items()}


def _two_classes(per_device: bool | None) -> Summary:
    raw = fleet_raw(120, 6000, per_device=per_device)
    phones = {**raw["devices"][0], "name": "phone", "count": 30,
              "profile": inline_profiles({"devices": [{"profile": "phone-soc"}]})["devices"][0][
                  "profile"]}
    raw["devices"].append(phones)
    return Simulation(scenario_from_raw(raw)).run()


def test_summaries_per_class_are_the_same_with_or_without_per_device_detail() -> None:
    detailed, by_class = _two_classes(True), _two_classes(None)  # 150 devices: by class
    assert len(detailed.devices) == 150 and by_class.devices == []
    assert [c.name for c in by_class.classes] == ["cam", "phone"]
    for a, b in zip([*detailed.classes, detailed.fleet], [*by_class.classes, by_class.fleet],
                    strict=True):
        fa, fb = _fields(a), _fields(b)
        for k in ("e2e_mean_s", "energy_j", "energy_per_request_j", "throttled_share"):
            assert fa.pop(k) == pytest.approx(fb.pop(k), rel=1e-9)  # summed in another order
        assert fa == fb  # counts, quantiles (merged histograms), SLO, peak: exactly
    _assert_sums(detailed.fleet, detailed.classes)
    _assert_sums(by_class.fleet, by_class.classes)
    cams = [d for d in detailed.devices if d.name.startswith("cam-")]
    _assert_sums(detailed.classes[0], cams)


def test_class_time_series_are_means_over_the_class() -> None:
    sim = Simulation(scenario_from_raw(fleet_raw(50, 3000, per_device=False)))
    sim.run()
    assert set(sim.stats.timelines) == {"cam"}
    tl = sim.stats.timelines["cam"]
    assert len(tl.temp_c.t) == len(set(tl.temp_c.t)) > 5  # one point per sample tick
    assert sum(tl.decisions.v) == 3000  # decisions per tick summed over the class
    assert tl.max_temp_c >= max(tl.temp_c.v)  # the hottest device, not the mean


def test_jitter_gives_each_device_its_own_parameters_from_its_own_stream() -> None:
    sc = scenario_from_raw(fleet_raw(10, 100))
    entry = sc.devices[0]
    devs = list(instances(entry, "3"))
    rates = [d.workload.rate_hz for d in devs]
    assert all(0.8 <= r <= 1.2 for r in rates) and len(set(rates)) == 10
    ups = [d.link.uplink_mbps for d in devs]
    assert all(28 <= u <= 52 for u in ups) and len(set(ups)) == 10
    amb = [d.profile.thermal.ambient_c - entry.profile.thermal.ambient_c for d in devs]
    assert all(-5 <= a <= 5 for a in amb) and len(set(amb)) == 10
    # a device's draws depend on its name and the seed, not on the fleet's size
    bigger = list(instances(scenario_from_raw(fleet_raw(20, 100)).devices[0], "3"))
    assert bigger[:10] == devs
    assert next(instances(entry, "4")) != devs[0]
    # no jitter: the copies share the entry's config
    plain = scenario_from_raw({**fleet_raw(3, 100), "devices": [
        {**fleet_raw(3, 100)["devices"][0], "jitter": {}}]}).devices[0]
    assert all(d.workload is plain.workload and d.profile is plain.profile
               for d in instances(plain, "3"))


@pytest.mark.parametrize(("key", "value", "message"), [
    ("rate", 1.5, "scenario.devices[0].jitter.rate: must be within [0, 1), got 1.5"),
    ("ambient_c", -1, "scenario.devices[0].jitter.ambient_c: must be >= 0"),
    ("speed", 0.1, "scenario.devices[0].jitter.speed: unknown field"),
])
def test_bad_jitter_is_a_clear_error(key: str, value: Any, message: str) -> None:
    raw = fleet_raw(2, 10)
    raw["devices"][0]["jitter"] = {key: value}
    with pytest.raises(ConfigError, match=re.escape(message)):
        scenario_from_raw(raw)


def _peak_bytes(requests: int, trace: Path) -> tuple[int, int]:
    tracemalloc.start()
    try:
        # two devices, one sample tick: what is left to grow is what grows with requests
        raw = fleet_raw(2, requests, sample_interval_s=1e9)
        s = Simulation(scenario_from_raw(raw), trace_path=trace).run()
        return tracemalloc.get_traced_memory()[1], s.fleet.requests
    finally:
        tracemalloc.stop()


def test_memory_stays_flat_with_the_number_of_requests(tmp_path: Path) -> None:
    # 20k requests: past the point where every fixed-size buffer (a stage's random draws come in
    # blocks that grow to 4096) is full; from there on nothing may grow
    small, n_small = _peak_bytes(20_000, tmp_path / "small.jsonl")
    large, n_large = _peak_bytes(80_000, tmp_path / "large.jsonl")
    assert (n_small, n_large) == (20_000, 80_000)
    # records went to disk, not into memory
    assert sum(isinstance(i, RequestRecord) for i in read_trace(tmp_path / "large.jsonl")) == 80_000
    assert large < 1.1 * small, (small, large)  # 4x the requests, not 4x the memory


def test_cli_summarizes_a_large_fleet_by_class_and_per_device_on_request(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "run", "fleet", "--requests", "3000", "--no-progress"]) == 0
    out = capsys.readouterr().out
    rows = [ln.split()[0] for ln in out.splitlines()[3:] if ln and not ln.startswith("(")]
    assert rows == ["cam", "kiosk", "phone", "fleet", "cloud"]  # and the server's line
    assert "cam ×1000" in out and "cloud h100: 4 replicas × TP1" in out
    assert main(["sim", "run", "fleet", "--requests", "3000", "--no-progress",
                 "--set", "per_device=true"]) == 0
    out = capsys.readouterr().out
    rows = [ln.split()[0] for ln in out.splitlines()[3:] if ln and not ln.startswith("(")]
    assert rows[:2] == ["cam-0", "cam-1"] and len(rows) == 1500 + 3 + 1 + 1
