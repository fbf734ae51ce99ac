"""Fixtures for the UI tests: a deterministic recorded trace, a frozen host, a fake wall clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from edgeserve.records import RequestRecord, ResourceSample
from tests.sim.test_thermal_trace import phone
from tests.tui.servers import event_stream, serve, vllm_metrics
from tui.host import FixedProbe, HostStats
from tui.synthetic import SyntheticConfig, write_trace

TRACE_CONFIG = SyntheticConfig(rate_per_s=20.0, duration_s=60.0, workers=4, devices=2, seed=7)


class FakeWall:
    """A wall clock that moves only when a test says so."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt_s: float) -> None:
        self.t += dt_s


@pytest.fixture(scope="session")
def trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 s of synthetic runtime trace: 4 workers, a heavy-image burst at 20-25 s and 40-45 s,
    a failure every 97 requests, resource samples each second, and two devices' samples."""
    return write_trace(tmp_path_factory.mktemp("trace") / "run.jsonl", TRACE_CONFIG)


@pytest.fixture
def wall() -> FakeWall:
    return FakeWall()


@pytest.fixture
def host() -> FixedProbe:
    return FixedProbe(
        HostStats(
            cpu_percent=12.5,
            per_cpu_percent=(10.0, 15.0),
            mem_percent=40.0,
            gpu_note="no NVIDIA GPU (NVML not available)",
        )
    )


LIVE_ITEMS = [
    RequestRecord(id="a", arrived_s=1.0, first_token_s=1.2, finished_s=1.5),
    ResourceSample(t_s=2.0, preproc_queue=3, worker_busy=[0.5]),
    RequestRecord(id="b", arrived_s=1.5, finished_s=2.5),
]


@pytest.fixture
async def edgeserve_like() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/v1/events", event_stream([LIVE_ITEMS[:2], LIVE_ITEMS[2:]]))
    app.router.add_get("/metrics", vllm_metrics)
    async for url in serve(app):
        yield url


@pytest.fixture
async def vllm_like() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/metrics", vllm_metrics)
    async for url in serve(app):
        yield url


@pytest.fixture
def phone_scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A phone (NPU, CPU and a GPU its encoder may move to) under a 4 fps camera stream, as
    ``phone.yaml`` in the working directory (so that the status line names it the same always)."""
    monkeypatch.chdir(tmp_path)
    path = Path("phone.yaml")
    path.write_text(yaml.safe_dump({
        "name": "phone-migrate", "duration_s": 300, "sample_interval_s": 1.0,
        "devices": [{"name": "phone", "profile": phone(migrate=True),
                     "workload": {"kind": "periodic", "fps": 4, "output_tokens": [16, 16]}}]}))
    return path
