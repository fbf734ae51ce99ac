"""LiveSource against real HTTP servers: an event stream like edgeserve's, and vLLM's /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiohttp import web

from edgeserve.net import free_port
from tests.tui.conftest import LIVE_ITEMS
from tests.tui.servers import serve
from tui.sources.base import Batch, Panel, SourceError
from tui.sources.live import LiveSource, Mode
from tui.sources.vllm_metrics import EngineMetrics


async def poll_until(src: LiveSource, pred: Callable[[list], bool], timeout_s: float = 10.0):
    got: list = []
    deadline = asyncio.get_running_loop().time() + timeout_s
    b: Batch | None = None
    while asyncio.get_running_loop().time() < deadline:
        b = await src.poll()
        got += b.items
        if pred(got):
            return got, b
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out; got {got}")


async def test_events_are_decoded_in_order_and_survive_a_reconnect(edgeserve_like: str):
    src = LiveSource(edgeserve_like)
    await src.start()
    assert src.mode is Mode.EDGESERVE
    got, b = await poll_until(src, lambda g: sum(not isinstance(x, EngineMetrics) for x in g) >= 3)
    assert [x for x in got if not isinstance(x, EngineMetrics)] == LIVE_ITEMS
    assert any(isinstance(x, EngineMetrics) for x in got)  # /metrics too, for KV-cache usage
    assert "edgeserve events" in b.status and "3 events" in b.status
    assert set(src.caps.why_empty) == {Panel.DEVICES}
    await src.stop()


async def test_a_stock_vllm_server_is_watched_through_metrics_alone(vllm_like: str):
    src = LiveSource(vllm_like)
    await src.start()
    assert src.mode is Mode.VLLM
    b = await src.poll()
    (m,) = b.items
    assert isinstance(m, EngineMetrics) and (m.waiting, m.running) == (7.0, 3.0)
    why = src.caps.why_empty
    assert {Panel.WORKERS, Panel.TIMELINE, Panel.WATERFALL} <= set(why)
    assert "stock vLLM" in why[Panel.WATERFALL]
    await src.stop()


async def test_nothing_listening_is_a_clear_error():
    port = free_port()
    with pytest.raises(SourceError, match=f"cannot connect to http://127.0.0.1:{port}"):
        await LiveSource(f"http://127.0.0.1:{port}", connect_timeout_s=2).start()


async def test_a_server_that_is_neither_is_a_clear_error():
    app = web.Application()

    async def not_vllm(request: web.Request) -> web.Response:
        return web.Response(text="up 1\n")

    app.router.add_get("/metrics", not_vllm)
    async for url in serve(app):
        with pytest.raises(SourceError, match="no vLLM metrics"):
            await LiveSource(url).start()
