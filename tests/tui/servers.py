"""Small real HTTP servers for the live-source tests: an edgeserve-like event stream and a
stock-vLLM-like /metrics endpoint (the real `edgeserve serve` is in test_live_engine.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from edgeserve.records import encode
from tests.tui.vllm_metrics_text import VLLM_METRICS

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve(app: web.Application) -> AsyncIterator[str]:
    """Run ``app`` on a free local port; yields its base URL."""
    runner = web.AppRunner(app, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def event_stream(batches: list[list], hold_s: float = 30.0) -> Handler:
    """An SSE handler: connection *i* sends batch *i* and closes; the last one stays open."""
    state = {"conn": 0}

    async def handler(request: web.Request) -> web.StreamResponse:
        i = state["conn"]
        state["conn"] += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b": keep-alive comment\n\n")
        for it in batches[min(i, len(batches) - 1)]:
            await resp.write(b"data: " + encode(it) + b"\n")
        if i + 1 < len(batches):
            return resp
        await asyncio.sleep(hold_s)
        return resp

    return handler


async def vllm_metrics(request: web.Request) -> web.Response:
    return web.Response(text=VLLM_METRICS, content_type="text/plain")
