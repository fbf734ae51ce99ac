"""The UI watching a real ``edgeserve serve`` (tiny Qwen2-VL on vLLM's CPU engine).

Slow: the engine takes tens of seconds to start, so the server is shared by the module.
"""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image
from skimage import data as photos

from edgeserve.bench.compare import ServerKind, server_argv
from edgeserve.bench.server_process import ServerProcess
from edgeserve.net import free_port
from edgeserve.records import Outcome, Stage, stage_spans
from tui.app import TuiApp
from tui.sources.base import Panel
from tui.sources.live import LiveSource, Mode
from tui.widgets.request_detail import RequestDetail
from tui.widgets.waterfall import WaterfallPanel

pytestmark = pytest.mark.engine

REQUESTS = 6
WORKERS = 2


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path
) -> Iterator[ServerProcess]:
    d = tmp_path_factory.mktemp("tui-serve")
    srv = ServerProcess.edgeserve(
        [
            "--model",
            str(tiny_model_dir),
            "--workers",
            str(WORKERS),
            "--max-model-len",
            "4096",
            "--max-num-seqs",
            "8",
            "--sample-interval",
            "0.5",
        ],
        d / "server.log",
    ).start().ready()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[str]:
    """A stock vLLM OpenAI server, started as `edgeserve bench compare` starts it."""
    port = free_port()
    log = tmp_path_factory.mktemp("tui-vllm") / "log"
    srv = ServerProcess(server_argv(ServerKind.VLLM, tiny_model_dir, port), log, port=port).start()
    url = srv.url
    try:
        asyncio.run(srv.wait_ready(timeout_s=300))
        yield url
    finally:
        srv.stop()


async def send(url: str, n: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        body = image_request(model)
        replies = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=body) for _ in range(n))
        )
    assert [r.status_code for r in replies] == [200] * n


def image_request(model: str) -> dict:
    buf = io.BytesIO()
    Image.fromarray(photos.coffee()).save(buf, format="JPEG", quality=90)
    url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
    return {
        "model": model,
        "max_tokens": 8,
        "ignore_eos": True,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": "Describe."},
                ],
            }
        ],
    }


async def test_the_ui_follows_a_real_server(server: ServerProcess, host):
    app = TuiApp(LiveSource(server.url), host_probe=host)
    async with app.run_test(size=(160, 48)) as pilot:
        await app.workers.wait_for_complete()
        assert isinstance(app.source, LiveSource) and app.source.mode is Mode.EDGESERVE
        await send(server.url, REQUESTS)
        for _ in range(100):  # the records reach the UI within a sample interval or two
            await app.workers.wait_for_complete()
            await app.refresh_data()
            await pilot.pause()
            if app.state.finished_total >= REQUESTS and app.state.timeline.from_samples:
                break
            await asyncio.sleep(0.1)
        snap = app.state.snapshot()
        assert snap.overview.finished_total == REQUESTS and snap.overview.errors == 0
        assert snap.overview.ttft_p50_s is not None and snap.overview.requests_per_s
        assert len(snap.workers.busy) == WORKERS  # per-worker figures from the samples
        assert snap.queues.preproc_queue is not None and snap.queues.engine_running is not None
        assert [row.name for row in snap.timeline] == ["cpu0", "cpu1", "engine"]
        assert all(r.outcome is Outcome.OK for r in snap.recent)
        assert app.panels()[Panel.SYSTEM].has_class("-empty") is False

        await pilot.press("5")
        waterfall = app.query_one(WaterfallPanel)
        assert len(waterfall.rows) == REQUESTS
        await pilot.press("enter")
        assert isinstance(app.screen, RequestDetail)
        stages = [s for s, _, _ in stage_spans(app.screen.record)]
        assert stages[:4] == [Stage.PREPROC_QUEUE, Stage.DECODE, Stage.RESIZE, Stage.NORMALIZE]
        await pilot.press("escape", "q")
    assert app.return_code == 0


async def test_a_stock_vllm_server_fills_what_its_metrics_allow(vllm_url: str, host):
    app = TuiApp(LiveSource(vllm_url), host_probe=host)
    async with app.run_test(size=(160, 48)) as pilot:
        await app.workers.wait_for_complete()
        assert isinstance(app.source, LiveSource) and app.source.mode is Mode.VLLM
        await app.refresh_data()  # a scrape before the requests: the baseline of the deltas
        await send(vllm_url, REQUESTS)
        for _ in range(100):
            await app.workers.wait_for_complete()
            await app.refresh_data()
            await pilot.pause()
            if app.state.snapshot().overview.finished_total >= REQUESTS:
                break
            await asyncio.sleep(0.1)
        snap = app.state.snapshot()
        o = snap.overview
        assert o.finished_total == REQUESTS and o.errors == 0
        assert o.requests_per_s and o.requests_per_s > 0
        assert o.ttft_p50_s is not None and o.itl_p50_s is not None
        assert snap.queues.engine_waiting == 0 and snap.queues.preproc_queue is None
        for panel in (Panel.WORKERS, Panel.TIMELINE, Panel.WATERFALL):
            assert app.panels()[panel].has_class("-empty")
            assert "stock vLLM" in app.panels()[panel].drawing.plain
