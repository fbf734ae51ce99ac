"""Small scenarios built in code, so each test states exactly the system it checks."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from sim.scenario.config import Scenario, scenario_from_raw

ZERO: dict[str, Any] = {"kind": "deterministic", "base_s": 0.0}


def one_core_profile(decode: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A device whose only non-zero work is image decode on one CPU core: a single-server queue."""
    prof: dict[str, Any] = {
        "name": "one-core",
        "units": {"cpu": {"kind": "cpu", "count": 1, "idle_w": 0.0, "active_w": 1.0}},
        "stages": {
            "image_decode": {"unit": "cpu", "model": decode or ZERO},
            "resize": {"unit": "cpu"},
            "normalize": {"unit": "cpu"},
            "prefill": {"unit": "cpu"},
            "decode_step": {"unit": "cpu"},
        },
        "thermal": {"r_c_per_w": 1.0, "c_j_per_c": 1.0},
    }
    prof.update(extra)
    return prof


def queue_scenario(kind: str, arrival_hz: float, service_s: float, requests: int,
                   seed: int = 0) -> Scenario:
    """M/M/1 (``kind="exponential"``) or M/D/1 (``"deterministic"``) as a one-core device."""
    return scenario_from_raw({
        "name": f"m-{kind}-1", "seed": seed, "requests": requests, "sample_interval_s": 1e9,
        "devices": [{
            "name": "q",
            "profile": one_core_profile({"kind": kind, "base_s": service_s}),
            "workload": {"kind": "poisson", "rate_hz": arrival_hz, "output_tokens": [1, 1]},
        }],
    })


def small_fleet(**overrides: Any) -> dict[str, Any]:
    """The built-in default scenario as a raw mapping, shortened for tests."""
    from sim.scenario.config import SCENARIO_DIR, inline_profiles
    from sim.scenario.schema import load_yaml

    raw = inline_profiles(load_yaml(SCENARIO_DIR / "default.yaml"), SCENARIO_DIR)
    raw["duration_s"] = 600
    raw.update(overrides)
    return copy.deepcopy(raw)


@pytest.fixture
def fleet_raw() -> dict[str, Any]:
    return small_fleet()


def gateway_trace(path: Path, profile: str, requests: int, spacing_s: float,
                  policy: str = "predicted_latency") -> Path:
    """A trace as ``edgeserve gateway --trace`` writes it: ``requests`` 640×480 photos with one
    output token each, ``spacing_s`` apart, decided on ``profile`` under ``policy``, with the
    cloud link the gateway measured (50 ms, 20 Mbit/s)."""
    from edgeserve.records import RequestRecord, TraceHeader, TraceWriter

    w = TraceWriter(str(path), TraceHeader(producer="edgeserve gateway",
                                           meta={"policy": policy, "profile": profile}))
    for i in range(requests):
        w.write(RequestRecord(
            id=f"gw-{i}", device="gateway", arrived_s=100.0 + spacing_s * i, placement="local:dev",
            image_bytes=40_000, num_images=1, source_width=640, source_height=480,
            image_tokens=280, prompt_tokens=300, output_tokens=1, max_tokens=1,
            link_rtt_s=0.05, link_uplink_mbps=20.0))
    w.close()
    return path
