"""The streaming client's timing rules, against a small real HTTP server with a scripted stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from edgeserve.bench.client import RequestResult, send_chat


def chunk(delta: dict | None = None, usage: dict | None = None) -> bytes:
    data: dict = {"object": "chat.completion.chunk", "choices": []}
    if delta is not None:
        data["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
    if usage is not None:
        data["usage"] = usage
    return b"data: " + json.dumps(data).encode() + b"\n\n"


async def scripted(request: web.Request) -> web.StreamResponse:
    """Role chunk at once, a keep-alive, first text after 0.3 s, then 3 tokens 0.1 s apart."""
    body = await request.json()
    if body.get("model") == "busy":
        return web.json_response({"error": "queue full"}, status=429, headers={"Retry-After": "1"})
    if body.get("model") == "dying":  # the engine dies after the first token
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chunk({"content": "a"}))
        await resp.write(b"data: " + json.dumps({"error": {"message": "the engine has died",
                                                           "code": 503}}).encode() + b"\n\n")
        return resp
    if body.get("model") == "cut":  # the connection ends mid-stream, without an error
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chunk({"content": "a"}))
        return resp
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(chunk({"role": "assistant", "content": ""}))
    await resp.write(b": ping\n\n")
    await asyncio.sleep(0.3)
    for i, word in enumerate(["a", "b", "c", "d"]):
        if i:
            await asyncio.sleep(0.1)
        await resp.write(chunk({"content": word}))
    await resp.write(chunk(usage={"prompt_tokens": 17, "completion_tokens": 4}))
    await resp.write(b"data: [DONE]\n\n")
    return resp


@pytest.fixture
async def url() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", scripted)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/v1/chat/completions"
    await runner.cleanup()


async def test_ttft_waits_for_text_not_for_the_role_chunk(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        r = await send_chat(s, url, json.dumps({"model": "m"}).encode(), RequestResult(index=0))
    assert r.ok, r.error
    assert r.ttft_s == pytest.approx(0.3, abs=0.08)
    assert r.e2e_s == pytest.approx(0.6, abs=0.1)
    assert r.itl_s == pytest.approx([0.1, 0.1, 0.1], abs=0.05)
    assert (r.prompt_tokens, r.output_tokens, r.text) == (17, 4, "abcd")
    assert r.tpot_s == pytest.approx((r.e2e_s - r.ttft_s) / 3)
    assert r.stream_done and r.error_code == 0


async def test_a_refused_request_fails_with_its_status_and_message(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        r = await send_chat(s, url, json.dumps({"model": "busy"}).encode(), RequestResult(index=0))
    assert not r.ok
    assert r.http_status == 429
    assert r.error.startswith("HTTP 429") and "queue full" in r.error
    assert (r.error_code, r.retry_after_s) == (429, 1.0)


async def test_an_error_in_the_stream_keeps_its_code_and_a_cut_stream_is_not_done(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        died = await send_chat(s, url, json.dumps({"model": "dying"}).encode(), RequestResult(0))
        cut = await send_chat(s, url, json.dumps({"model": "cut"}).encode(), RequestResult(1))
    assert not died.ok and (died.http_status, died.error_code) == (200, 503)
    assert "the engine has died" in died.error and not died.stream_done
    assert cut.ok and not cut.stream_done  # tokens came, but the stream never said [DONE]


async def test_an_unreachable_server_is_a_failed_request_not_an_exception() -> None:
    async with aiohttp.ClientSession() as s:
        r = await send_chat(s, "http://127.0.0.1:9/v1/chat/completions", b"{}", RequestResult(index=0))
    assert not r.ok and "ClientConnector" in r.error
