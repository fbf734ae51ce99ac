"""Drive prepared requests against a server on an arrival schedule and collect what the client saw.

The runner is deliberately thin: every body is already encoded (see
:mod:`edgeserve.bench.workload`), the schedule is already drawn (see
:mod:`edgeserve.bench.arrivals`), so the only work left in the timed part is sleeping until each
send time, writing bytes and parsing small SSE chunks. One asyncio task per request; a semaphore
implements the closed-loop concurrency cap.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from edgeserve.bench.client import RequestResult, send_chat
from edgeserve.bench.workload import PreparedRequest


@dataclass(slots=True)
class RunResult:
    """All requests of one run, in send order, and the run's wall time."""

    results: list[RequestResult]
    duration_s: float  # first send → last response
    t0_s: float  # perf_counter at the start (RequestResult.start_s is on the same clock)


def chat_url(base_url: str) -> str:
    """``http://host:port`` or ``…/v1`` or a full ``…/chat/completions`` URL → the chat URL."""
    url = base_url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if not url.endswith("/v1"):
        url += "/v1"
    return url + "/chat/completions"


def server_root(base_url: str) -> str:
    """The server's root URL (where ``/metrics`` and ``/v1/models`` live)."""
    url = base_url.rstrip("/")
    for suffix in ("/chat/completions", "/v1"):
        url = url.removesuffix(suffix)
    return url


async def fetch_model_id(base_url: str, timeout_s: float = 10.0) -> str:
    """The first model a server lists at ``/v1/models``."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(server_root(base_url) + "/v1/models") as resp,
    ):
        resp.raise_for_status()
        data = await resp.json()
    models = data.get("data") or []
    if not models:
        raise ValueError(f"{base_url} lists no models at /v1/models")
    return str(models[0]["id"])


async def run_load(
    base_url: str,
    requests: Sequence[PreparedRequest],
    offsets_s: Sequence[float],
    max_concurrency: int | None = None,
    request_timeout_s: float = 600.0,
    progress: bool = True,
    progress_desc: str = "requests",
) -> RunResult:
    """Send ``requests[i]`` at ``offsets_s[i]`` seconds after the start; wait for all answers."""
    if len(requests) != len(offsets_s):
        raise ValueError(f"{len(requests)} requests but {len(offsets_s)} send times")
    from tqdm.auto import tqdm

    url = chat_url(base_url)
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    pbar = tqdm(total=len(requests), desc=progress_desc, unit="req", disable=not progress, leave=False)
    connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True)
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        t0 = time.perf_counter()

        async def one(req: PreparedRequest, offset_s: float) -> RequestResult:
            delay = t0 + offset_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            result = RequestResult(
                index=req.index,
                max_tokens=req.max_tokens,
                image_bytes=req.image_bytes,
                image_pixels=req.image_pixels,
            )
            if sem is None:
                await send_chat(session, url, req.body, result)
            else:
                async with sem:
                    await send_chat(session, url, req.body, result)
            pbar.update(1)
            return result

        tasks = [asyncio.create_task(one(r, float(o))) for r, o in zip(requests, offsets_s, strict=True)]
        try:
            results = list(await asyncio.gather(*tasks))
        finally:
            for t in tasks:
                t.cancel()
            pbar.close()
        duration_s = time.perf_counter() - t0
    return RunResult(results=results, duration_s=duration_s, t0_s=t0)
